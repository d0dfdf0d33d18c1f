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
token caps its expert episodes need (``tirl sft --env swe-lite`` reads the same three), and the RL keys of its
default job (sampling temperature, learning rate and warm-up, steps, saved trajectories), chosen on the
validation draw for the 30-minute budget and a stable run — none of the tries there gained (docs/training.md
"The SWE job"); ``skyrl-gym:swe-lite`` (SkyRL-style swe-lite rows) — the same keys. ``tir-chain`` is the
dataclass defaults themselves. Not covered: presets for a registered user env (give a ``--config`` file
instead).
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
        # RL keys, chosen on the validation draw for the 30-minute budget and a stable run, not for a gain (the
        # two tries from tiny-swe evaluated after training went 10->11 and 10->10 of 100; docs/training.md)
        "generation.temperature": 0.7,  # tiny-swe solves 0 of 20 validation tasks at 1; 0.6 (groups of 16) went void
        "algo.lr": 2e-4,  # 5e-5 spent the run in warm-up; 3e-4 gave importance ratios of 8-13
        "algo.warmup_steps": 1,
        "trainer.steps": 8,  # 2 x 200-task evaluations + 8 steps of 64 episodes fit 30 min on 2 idle cores
        "trainer.samples_per_step": 64,  # every trajectory saved, so `tirl audit --rejudge` checks every reward
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
