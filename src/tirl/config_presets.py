"""Per-env defaults: the keys an environment's own job needs, applied under the file and ``--set``.

>>> from tirl.config import resolve_config
>>> resolved = resolve_config(None, ["env.name=swe-lite"])
>>> (resolved.config.env.difficulty, resolved.sources["env.difficulty"])
(2, 'env swe-lite')
>>> resolve_config(None, ["env.name=swe-lite", "env.difficulty=1"]).config.env.difficulty
1

A value here replaces the dataclass default of its key when the resolved ``env.name`` names the env, and
only for keys that neither the TOML file nor a ``--set`` (nor a run's saved config) gives: the order is
dataclass default < env preset < file < ``--set``. ``tirl config show`` prints such a key's source as
``env NAME``. The env's built-in model is not a key here: ``model.path`` unset loads the env's shipped
warm start (:data:`tirl.models.loading.BUILTIN_MODELS`).

Covered: ``swe-lite`` — the bug-fixing curriculum (``env.difficulty=2``, 1,934 tasks) with the turns and
token caps its expert episodes need (``tirl sft --env swe-lite`` reads the same three); ``skyrl-gym:swe-lite``
(SkyRL-style swe-lite rows) — the same turns and caps. ``tir-chain`` is the
dataclass defaults themselves. Not covered: RL settings for swe-lite (steps, group, prompts, learning rate:
none has been chosen on its validation draw yet, docs/training.md "The SWE job"); presets for a registered
user env (give a ``--config`` file instead).
"""

from __future__ import annotations

from typing import Any

#: env name -> {dotted config key: value}; each value is what the config's text parser would read.
ENV_PRESETS: dict[str, dict[str, Any]] = {
    "swe-lite": {
        "env.difficulty": 2,  # the curriculum (1,934 tasks); 1 is the 33 hand-planted bugs
        "env.max_turns": 10,  # expert episodes take 5-8 turns
        "generation.max_new_tokens": 384,  # the longest expert turn is ~210 characters
        "generation.max_total_tokens": 6144,  # expert episodes: median 1,125 characters, max 1,941 (1,315 tasks)
    },
}
# SkyRL-style swe-lite rows with the class forced (tirl.integrations.skyrl_swe): swe-lite's episode caps; the
# tasks come from the file, so no difficulty
ENV_PRESETS["skyrl-gym:swe-lite"] = {k: v for k, v in ENV_PRESETS["swe-lite"].items() if k != "env.difficulty"}


def env_preset(data: dict[str, Any], sources: dict[str, str], default_env: str) -> tuple[str, dict[str, Any]]:
    """The env that ``data`` names and its preset keys that ``sources`` does not set yet.

    ``data`` is the config tree before it is built (TOML file, overrides, a saved config whose leaves are
    wrapped values with ``.value``); ``sources`` holds every dotted key something set; ``default_env`` is
    the env when ``data`` names none (``EnvConfig.name``).
    """
    section = data.get("env")
    name = section.get("name", default_env) if isinstance(section, dict) else default_env
    name = getattr(name, "value", name)  # a saved config's leaf
    if not isinstance(name, str):
        return str(name), {}
    return name, {k: v for k, v in ENV_PRESETS.get(name, {}).items() if k not in sources}


__all__ = ["ENV_PRESETS", "env_preset"]
