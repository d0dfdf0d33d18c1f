"""Generator capabilities are declared protocols: the wiring dispatches on them, never on getattr probes."""

from __future__ import annotations

from typing import Any

from trainer_fakes import SMALL

from tirl.inference.base import BusyMetered, Startable, Versioned, WeightSyncing
from tirl.models.tiny import build_tiny_model
from tirl.trainer.wiring import RunParts


class Syncing:
    policy_version = 0

    def __init__(self) -> None:
        self.synced: list[int] = []

    def sync_weights(self, model: Any, tokenizer: Any, version: int) -> None:
        self.synced.append(version)
        self.policy_version = version


class Plain:
    policy_version = 0


class Policy:
    model = None
    tokenizer = None


def parts(generator: Any) -> RunParts:
    return RunParts(Policy(), generator, None, lambda task: None, lambda task: None, None, None, None, None)  # type: ignore[arg-type]


def test_the_builtin_generators_declare_what_they_can() -> None:
    from tirl.inference.hf import HFGenerator
    from tirl.inference.openai_http import OpenAIGenerator

    model, tok = build_tiny_model(SMALL, seed=0)
    hf = HFGenerator(model, tok, eos_ids=[tok.eos_token_id])
    assert isinstance(hf, Versioned) and isinstance(hf, BusyMetered)
    assert not isinstance(hf, WeightSyncing) and not isinstance(hf, Startable)
    http = OpenAIGenerator("http://127.0.0.1:9/v1", model="m", api_key="k")
    assert isinstance(http, WeightSyncing) and isinstance(http, Startable) and isinstance(http, Versioned)


def test_set_policy_version_syncs_weights_or_sets_the_version() -> None:
    syncing, plain = Syncing(), Plain()
    parts(syncing).set_policy_version(3)
    parts(plain).set_policy_version(4)
    assert syncing.synced == [3] and syncing.policy_version == 3
    assert plain.policy_version == 4
    parts(object()).set_policy_version(5)  # a generator with neither capability is left alone
