"""Notes for config keys that are set but that the rest of the config does not use.

A flag that silently does nothing is a silent failure: ``--base-url`` without ``--generator openai`` generated
locally, ``--ray-address`` without ``--backend ray`` trained locally. :func:`unused_settings` names each such key
and what would use it, and :func:`moot_settings` each key of :data:`MOOT` a user set (a ``--set``, a file)
that the rest of the config leaves unused (``filter.void_penalty`` under ``filter.mode=off``);
:func:`tirl.config.resolve_config` adds them to its notes, which ``tirl train``, ``tirl eval`` and ``tirl config
show`` print. Not covered: any other key that one setting makes moot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol


class ModelKeys(Protocol):
    """What :func:`unused_settings` reads of ``[model]`` (a :class:`tirl.config.ModelConfig`)."""

    @property
    def base_url(self) -> str | None: ...  # noqa: D102

    @property
    def generator(self) -> str: ...  # noqa: D102


class TrainerKeys(Protocol):
    """What :func:`unused_settings` reads of ``[trainer]`` (a :class:`tirl.config.TrainerConfig`)."""

    @property
    def ray_address(self) -> str | None: ...  # noqa: D102

    @property
    def backend(self) -> str: ...  # noqa: D102


def unused_settings(model: ModelKeys, trainer: TrainerKeys) -> list[str]:
    """One note per key that is set but unused: ``model.base_url``, ``trainer.ray_address``.

    Typed by protocols, not the config classes: :mod:`tirl.config` imports this module, never the other way.
    """
    out = []
    if model.base_url and model.generator != "openai":
        out.append(
            f"model.base_url is set but model.generator={model.generator} does not use it — add --generator openai "
            "to generate through that server"
        )
    if trainer.ray_address and trainer.backend != "ray":
        out.append(
            f"trainer.ray_address is set but trainer.backend={trainer.backend} does not use it — add --backend ray"
        )
    return out


#: key -> (the config leaves it unused, what would use it). Each checked against the code that reads the key.
MOOT: dict[str, tuple[Callable[[Any], bool], str]] = {
    "filter.void_penalty": (lambda c: c.filter.mode != "penalize", "filter.mode=penalize"),  # trainer: penalized rows
    "algo.kl_estimator": (lambda c: c.algo.kl_coef == 0, "algo.kl_coef > 0"),  # no reference model at 0
    "algo.lora_alpha": (lambda c: c.algo.lora_rank == 0, "algo.lora_rank > 0"),
    "algo.lora_targets": (lambda c: c.algo.lora_rank == 0, "algo.lora_rank > 0"),
    "trainer.wandb_project": (lambda c: c.trainer.wandb == "off", "trainer.wandb=online or offline"),
    "sandbox.pool_size": (lambda c: not c.sandbox.warm_pool, "sandbox.warm_pool=true"),
    "model.vllm_dtype": (lambda c: c.model.generator != "vllm", "model.generator=vllm (--generator vllm)"),
    "model.vllm_gpu_memory_utilization": (lambda c: c.model.generator != "vllm", "--generator vllm"),
    "model.vllm_max_model_len": (lambda c: c.model.generator != "vllm", "--generator vllm"),
}


def moot_settings(cfg: Any, given: Iterable[str]) -> list[str]:
    """One note per key of :data:`MOOT` in ``given`` (the keys a user set) that ``cfg`` leaves unused.

    ``cfg`` is a ``TirlConfig``. ``--set filter.void_penalty=2`` under ``filter.mode=off`` was accepted and did
    nothing, without a word.
    """
    out = []
    for key in sorted(set(given) & MOOT.keys()):
        unused, user = MOOT[key]
        if unused(cfg):
            out.append(f"{key} is set but nothing uses it with this config — it acts with {user}")
    return out


__all__ = ["MOOT", "ModelKeys", "TrainerKeys", "moot_settings", "unused_settings"]
