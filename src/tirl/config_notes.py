"""Notes for config keys that are set but that the rest of the config does not use.

A flag that silently does nothing is a silent failure: ``--base-url`` without ``--generator openai`` generated
locally, ``--ray-address`` without ``--backend ray`` trained locally. :func:`unused_settings` names each such key
and what would use it; :func:`tirl.config.resolve_config` adds them to its notes, which ``tirl train`` and
``tirl config show`` print. Covered: those two pairs. Not covered: any other key that one setting makes moot.
"""

from __future__ import annotations

from typing import Protocol


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


__all__ = ["ModelKeys", "TrainerKeys", "unused_settings"]
