"""Notes for config keys that are set but that the rest of the config does not use.

A flag that silently does nothing is a silent failure: ``--base-url`` without ``--generator openai`` generated
locally, ``--ray-address`` without ``--backend ray`` trained locally. :func:`unused_settings` names each such key
and what would use it; :func:`tirl.config.resolve_config` adds them to its notes, which ``tirl train`` and
``tirl config show`` print. Covered: those two pairs. Not covered: any other key that one setting makes moot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tirl.config import TirlConfig


def unused_settings(cfg: TirlConfig) -> list[str]:
    """One note per key that is set but unused by the rest of ``cfg``."""
    out = []
    if cfg.model.base_url and cfg.model.generator != "openai":
        out.append(
            f"model.base_url is set but model.generator={cfg.model.generator} does not use it — add --generator "
            "openai to generate through that server"
        )
    if cfg.trainer.ray_address and cfg.trainer.backend != "ray":
        out.append("trainer.ray_address is set but trainer.backend=local does not use it — add --backend ray")
    return out


__all__ = ["unused_settings"]
