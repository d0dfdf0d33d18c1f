"""Issue 23's stressors: each a config key settable by ``--set``, by ``tirl ablate --set`` and by a dose level.

Covered: every stressor changes its key from the default through ``load_config`` (what ``tirl train --set``
reads); ``tirl ablate --dry-run --set KEY=VALUE`` passes it, last, to every run it would start; the dose
ladder (:data:`tirl.ablation.DOSE_LEVELS`) holds every stressor, is cumulative (a level keeps the previous
level's overrides) and leaves the learning rate and warm-up alone (not a learning-rate hammer); ``--dose
--dry-run`` starts each level's runs with that level's overrides. What each option does inside training is
tested where it is implemented (tests/trainer/test_loss_plumbing.py, tests/envs/test_ood.py,
tests/envs/test_chain_length.py, tests/inference/test_generation_dtype.py).
"""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path

import pytest
from tests.tiny_run import tirl_in_process

from tirl.ablation import DOSE_LEVELS, STRESS
from tirl.config import load_config

#: stressor -> (override, the config attribute path, the value it must read back)
STRESSORS: dict[str, tuple[str, str, object]] = {
    "generator/trainer mismatch": ("generation.dtype=bfloat16", "generation.dtype", "bfloat16"),
    "no TIS": ("algo.tis_cap=none", "algo.tis_cap", None),
    "out-of-distribution tool output": ("env.ood_rate=0.3", "env.ood_rate", 0.3),
    "no dual clip": ("algo.dual_clip=none", "algo.dual_clip", None),
    "no grad clip": ("algo.grad_clip=0", "algo.grad_clip", 0.0),
    "per-sequence aggregation": ("algo.loss_agg=seq_mean", "algo.loss_agg", "seq_mean"),
    "longer chains (min)": ("env.chain_min=4", "env.chain_min", 4),
    "longer chains (max)": ("env.chain_max=8", "env.chain_max", 8),
    "more turns": ("env.max_turns=10", "env.max_turns", 10),
}


def _get(cfg: object, path: str) -> object:
    section, key = path.split(".")
    return getattr(getattr(cfg, section), key)


@pytest.mark.parametrize("name", list(STRESSORS))
def test_each_stressor_is_a_set_option(name: str) -> None:
    override, path, value = STRESSORS[name]
    assert _get(load_config(None, []), path) != value  # the default is not stressed
    assert _get(load_config(None, [override]), path) == value


def _train_commands(stdout: str) -> list[list[str]]:
    return [shlex.split(x) for x in stdout.splitlines() if " -m tirl.cli train " in x]


def _sets(cmd: list[str]) -> list[str]:
    return [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]


def test_tirl_ablate_set_passes_every_stressor_to_every_run(tmp_path: Path) -> None:
    args = [a for o, _, _ in STRESSORS.values() for a in ("--set", o)]
    res = tirl_in_process("ablate", "--dry-run", "--seeds", "2", "--modes", "off,drop", "--out", str(tmp_path / "o"),
                          *args)  # fmt: skip
    assert res.returncode == 0, res.stderr
    commands = _train_commands(res.stdout)
    assert len(commands) == 4 and not (tmp_path / "o").exists()
    for cmd in commands:
        cfg = load_config(None, _sets(cmd))
        assert all(_get(cfg, path) == value for _, path, value in STRESSORS.values())


def test_the_dose_ladder_holds_every_stressor_cumulatively_without_touching_the_lr() -> None:
    levels = list(DOSE_LEVELS.values())
    assert len(levels) >= 3
    for milder, stronger in itertools.pairwise(levels):
        assert set(milder) < set(stronger)  # each level keeps the previous one's overrides and adds some
    strongest = load_config(None, [*STRESS, *levels[-1]])
    for name, (_, path, value) in STRESSORS.items():
        assert _get(strongest, path) == value, name
    touched = {o.split("=", 1)[0] for level in levels for o in level}
    assert not touched & {"algo.lr", "algo.warmup_steps"}


def test_dose_dry_run_starts_each_level_with_its_overrides(tmp_path: Path) -> None:
    res = tirl_in_process("ablate", "--dose", "--dry-run", "--seeds", "1", "--out", str(tmp_path / "d"))
    assert res.returncode == 0, res.stderr
    commands = _train_commands(res.stdout)
    assert len(commands) == len(DOSE_LEVELS)
    for cmd, (level, overrides) in zip(commands, DOSE_LEVELS.items(), strict=True):
        assert cmd[cmd.index("--run-dir") + 1] == str(tmp_path / "d" / level / "off-seed0")
        sets = _sets(cmd)
        assert all(o in sets for o in overrides)
        assert load_config(None, sets).filter.mode == "off"
