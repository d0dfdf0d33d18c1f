"""A resumed run equals the uninterrupted run: parameters, optimiser state, the next step's tokens, the RNGs.

Both runs go through the real recipe (:class:`tirl.trainer.run.TrainingRun`, what ``tirl train`` and
``tirl train --resume`` run) on a tiny random model saved to disk, with the real HF generator, pipeline
strategy, sandbox and checkpoint files. The only instrument is a wrapper around ``Trainer.learn`` that
records the token ids each step sampled. The test does not read checkpoint files by name: it compares
the live objects each run ends with.

Mutants this kills (issue 21): the RNG state not restored on resume (the global draws after the run
differ), and the checkpointed step trained again on resume (the parameters, the optimiser's step
count and the logged policy versions differ).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.tiny_run import save_tiny_model

from tirl.config import TirlConfig, load_config
from tirl.trainer.logging import read_metrics
from tirl.trainer.run import TrainingRun
from tirl.trainer.trainer import Trainer

STEPS = 3
TINY = [
    "trainer.prompts_per_step=2",
    "algo.group_size=2",
    "generation.max_new_tokens=16",
    "generation.max_total_tokens=200",
    "filter.mode=off",  # a random model only writes void turns; train on them anyway
    "algo.kl_coef=0.01",  # every step updates, and the reference model is part of the resume
    "trainer.threads=1",
    "trainer.eval_before_after=false",
    "trainer.checkpoint_every=1",
]
GREEDY = "generation.temperature=0"  # see test_resume_samples_the_same_tokens_at_temperature_1


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


def _cfg(model_dir: Path, steps: int, *extra: str) -> TirlConfig:
    return load_config(None, [f"model.path={model_dir}", f"trainer.steps={steps}", *TINY, *extra])


def _seed_globals(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _global_draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(4).tolist()


def _run(cfg: TirlConfig, run_dir: Path, *, resume: bool) -> TrainingRun:
    run = TrainingRun(cfg, run_dir, resume=resume, progress=False)
    asyncio.run(run())
    return run


def _end_state(run: TrainingRun) -> dict[str, Any]:
    assert run.trainer is not None
    opt = run.trainer.optimizer.state_dict()
    return {
        "params": {k: v.detach().clone() for k, v in run.trainer.model.state_dict().items()},
        "opt_state": opt["state"],
        "opt_groups": opt["param_groups"],
        "policy_version": run.trainer.policy_version,
        "draws": _global_draws(),
    }


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["params"].keys() == b["params"].keys()
    for name, value in a["params"].items():
        assert torch.equal(value, b["params"][name]), f"parameter {name} differs"
    assert a["opt_state"].keys() == b["opt_state"].keys()
    for pid, state in a["opt_state"].items():
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(b["opt_state"][pid][key])), (pid, key)
    assert a["opt_groups"] == b["opt_groups"]
    assert a["policy_version"] == b["policy_version"] == STEPS  # one update per step (kl_coef > 0)


def _record_sampled(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, dict[int, list[list[int]]]], list[str]]:
    """Wrap ``Trainer.learn``: ``sampled[label][step]`` = the sorted token ids that step sampled."""
    sampled: dict[str, dict[int, list[list[int]]]] = {}
    label = ["whole"]
    learn = Trainer.learn

    async def recording_learn(self: Trainer, step: int, col: Any, t0: float) -> Any:
        sampled.setdefault(label[0], {})[step] = sorted(list(t.token_ids) for t in col.sampled)
        return await learn(self, step, col, t0)

    monkeypatch.setattr(Trainer, "learn", recording_learn)
    return sampled, label


def _whole_and_resumed(
    model_dir: Path, tmp_path: Path, label: list[str], *extra: str, edit: Callable[[Path], None] | None = None
) -> tuple[dict[str, Any], dict[str, Any], tuple[float, float, list[float]]]:
    """The end states of the uninterrupted and the resumed run, and the global draws where the cut run ended.

    ``edit``: called with the cut run's directory before the resume.
    """
    _seed_globals(1)
    whole = _end_state(_run(_cfg(model_dir, STEPS, *extra), tmp_path / "whole", resume=False))
    label[0] = "cut"
    _seed_globals(1)
    _run(_cfg(model_dir, STEPS - 1, *extra), tmp_path / "cut", resume=False)  # ends at the checkpoint of step 2
    cut_draws = _global_draws()
    if edit is not None:
        edit(tmp_path / "cut")
    label[0] = "resumed"
    _seed_globals(12345)  # a different process state: only the checkpoint may bring the RNGs back
    resumed = _end_state(_run(_cfg(model_dir, STEPS, *extra), tmp_path / "cut", resume=True))
    return whole, resumed, cut_draws


def test_resume_equals_the_uninterrupted_run(model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """Greedy sampling, so the tokens depend on the weights only (the sampling RNG: the test below)."""
    sampled, label = _record_sampled(monkeypatch)
    whole, resumed, cut_draws = _whole_and_resumed(model_dir, tmp_path, label, GREEDY)
    assert sorted(sampled["resumed"]) == [STEPS], "the resumed run must train exactly the steps after its checkpoint"
    assert sampled["resumed"][STEPS] == sampled["whole"][STEPS]  # the next step samples the same tokens
    assert sampled["cut"] == {s: sampled["whole"][s] for s in range(1, STEPS)}
    _assert_same(whole, resumed)
    # the RNGs continue where the checkpoint left them. A step draws nothing from them (sampling and mini-batch
    # order are seeded per step), so the resumed run ends where the cut run ended. The uninterrupted run is no
    # reference here: its set-up, the first in this process, also drew at import time.
    assert resumed["draws"] == cut_draws, "the global RNGs were not restored from the checkpoint"
    versions = [r["policy/version"] for r in read_metrics(tmp_path / "cut")]
    assert versions == [r["policy/version"] for r in read_metrics(tmp_path / "whole")] == list(range(STEPS))


def test_resume_samples_the_same_tokens_at_temperature_1(model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """Per-turn seeds come from (trainer.seed, trajectory id, turn): a resumed step samples as the whole run did
    (it sampled with step 1's seeds again while the AgentLoop had no seed and used the restarted generator RNG)."""
    sampled, label = _record_sampled(monkeypatch)
    _whole_and_resumed(model_dir, tmp_path, label)
    assert sampled["cut"] == {s: sampled["whole"][s] for s in range(1, STEPS)}  # two fresh runs agree
    assert sampled["resumed"][STEPS] == sampled["whole"][STEPS]


def _as_written_before_accelerator_states(run_dir: Path) -> None:
    """The newest checkpoint's rng.json as tirl wrote it before the CUDA/MPS states (no ``cuda``, no ``mps``), its
    checksum updated (the checkpoint verifies: only the format is old)."""
    ckpt = max((run_dir / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    rng = ckpt / "rng.json"
    doc = json.loads(rng.read_text())
    assert doc.pop("cuda") == [] and doc.pop("mps") is None  # this machine has no accelerator
    rng.write_text(json.dumps(doc))
    state = json.loads((ckpt / "state.json").read_text())
    state["files"]["rng.json"] = {"size": rng.stat().st_size, "sha256": hashlib.sha256(rng.read_bytes()).hexdigest()}
    (ckpt / "state.json").write_text(json.dumps(state))


def test_a_checkpoint_from_before_the_accelerator_states_still_resumes(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rng.json gained ``cuda`` and ``mps``; a checkpoint without them resumes on CPU exactly as before (real run)."""
    sampled, label = _record_sampled(monkeypatch)
    whole, resumed, cut_draws = _whole_and_resumed(
        model_dir, tmp_path, label, GREEDY, edit=_as_written_before_accelerator_states
    )
    assert sorted(sampled["resumed"]) == [STEPS], "it must resume from the edited checkpoint, not an older one"
    assert sampled["resumed"][STEPS] == sampled["whole"][STEPS]
    _assert_same(whole, resumed)
    assert resumed["draws"] == cut_draws
