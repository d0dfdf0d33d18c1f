"""Evaluation hygiene (issue 16, item 6): held-out, validation, training and SFT prompts do not mix."""

from __future__ import annotations

import pytest

from tirl.config import load_config
from tirl.envs.registry import load_tasks
from tirl.envs.seeds import eval_seed
from tirl.sft import demonstration_prompts
from tirl.trainer.wiring import TaskSets


@pytest.mark.parametrize("env", ["tir-math", "tir-chain"])
def test_heldout_and_validation_leave_out_the_sft_prompts_and_each_other(env: str) -> None:
    cfg = load_config(None, [f"env.name={env}"])
    sets = TaskSets(cfg)
    sft = demonstration_prompts(env, cfg.env.difficulty)
    held = [t.prompt for t in sets.eval_tasks]
    val = [t.prompt for t in sets.validation_tasks]
    assert len(held) == len(val) == cfg.env.eval_size
    assert not set(held) & sft and not set(val) & sft and not set(held) & set(val)
    train = {t.prompt for step in range(1, 26) for t in sets.train(step, cfg.trainer.prompts_per_step)}
    assert not train & (set(held) | set(val))


def test_the_plain_draw_did_overlap_the_builtin_demonstrations() -> None:
    """Without the exclusion, 8 of the 200 held-out prompts were SFT demonstrations of the shipped checkpoint."""
    cfg = load_config(None, ["env.name=tir-math"])
    raw = load_tasks(cfg.env, cfg.env.eval_size, seed=eval_seed(cfg.env.seed))
    sft = demonstration_prompts("tir-math", 1)
    assert sum(t.prompt in sft for t in raw) == 8
    kept = [t for t in raw if t.prompt not in sft]
    assert [t.prompt for t in TaskSets(cfg).eval_tasks[: len(kept)]] == [t.prompt for t in kept]  # order kept


def test_demonstration_prompts_are_the_sft_task_draw() -> None:
    from tirl.envs.tasks.math_gen import generate_tasks
    from tirl.sft import sft_task_seed

    assert demonstration_prompts("tir-math", 1) == {t.prompt for t in generate_tasks(3000, seed=sft_task_seed(0))}
    assert demonstration_prompts("swe-lite") == frozenset()
