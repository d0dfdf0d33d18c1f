"""Held-out evaluation tasks and training tasks never overlap, also for a small task space."""

from __future__ import annotations

from tirl.config import load_config
from tirl.trainer.wiring import TaskSets


def test_tir_math_eval_set_is_200_distinct_and_disjoint_from_training() -> None:
    sets = TaskSets(load_config(None, ["env.name=tir-math"]))
    assert len(sets.eval_tasks) == 200 and len({t.prompt for t in sets.eval_tasks}) == 200
    train = sets.train(1, 16)
    assert len(train) == 16 and not {t.prompt for t in train} & {t.prompt for t in sets.eval_tasks}


def test_small_task_space_is_split_instead_of_exhausted() -> None:
    sets = TaskSets(load_config(None, ["env.name=swe-lite"]))
    eval_prompts = {t.prompt for t in sets.eval_tasks}
    assert 0 < len(eval_prompts) == len(sets.eval_tasks) < 200
    train = sets.train(3, 8)
    assert len(train) == 8
    assert not {t.prompt for t in train} & eval_prompts
