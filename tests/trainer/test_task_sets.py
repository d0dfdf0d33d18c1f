"""Held-out evaluation tasks and training tasks never overlap, also for a small task space."""

from __future__ import annotations

import pytest

from tirl.config import load_config
from tirl.trainer.wiring import TaskSets

SMALL = ["env.name=swe-lite", "env.difficulty=1"]  # the 33 hand-planted bugs (swe-lite's preset is the curriculum)


def test_tir_math_eval_set_is_200_distinct_and_disjoint_from_training() -> None:
    sets = TaskSets(load_config(None, ["env.name=tir-math"]))
    assert len(sets.eval_tasks) == 200 and len({t.prompt for t in sets.eval_tasks}) == 200
    train = sets.train(1, 16)
    assert len(train) == 16 and not {t.prompt for t in train} & {t.prompt for t in sets.eval_tasks}


def test_small_task_space_is_split_instead_of_exhausted() -> None:
    sets = TaskSets(load_config(None, SMALL))
    eval_prompts = {t.prompt for t in sets.eval_tasks}
    assert 0 < len(eval_prompts) == len(sets.eval_tasks) < 200
    train = sets.train(3, 8)
    assert len(train) == 8
    assert not {t.prompt for t in train} & eval_prompts


def test_pool_draw_is_without_replacement_and_covers_every_task_once_per_epoch() -> None:
    sets = TaskSets(load_config(None, SMALL))
    assert sets._pool is not None
    size = len(sets._pool)
    assert size >= 8
    for step in range(12):  # a step never repeats a task while n <= the pool (random.choices did)
        drawn = [t.id for t in sets.train(step, 8)]
        assert len(set(drawn)) == 8, drawn
        assert drawn == [t.id for t in TaskSets(load_config(None, SMALL)).train(step, 8)]
    epoch0 = [sets.train(step, 1)[0].id for step in range(size)]  # n=1: steps 0..size-1 are epoch 0
    assert sorted(epoch0) == sorted(t.id for t in sets._pool)
    epoch1 = [sets.train(step, 1)[0].id for step in range(size, 2 * size)]
    assert sorted(epoch1) == sorted(epoch0) and epoch1 != epoch0  # reshuffled, same tasks
    per_epoch = size // 8  # n=8: an epoch is size // 8 steps, no task twice within it
    seen = [t.id for step in range(per_epoch) for t in sets.train(step, 8)]
    assert len(seen) == len(set(seen)) == per_epoch * 8
    big = sets.train(5, size + 3)  # n > pool: whole shuffles, every task at least once
    assert len(big) == size + 3 and {t.id for t in big} == {t.id for t in sets._pool}


def test_eval_split_picks_the_validation_set_and_refuses_an_empty_one() -> None:
    from tirl.errors import ConfigError

    sets = TaskSets(load_config(None, ["env.name=tir-math", "env.eval_split=validation"]))
    assert sets.split("validation") is sets.validation_tasks and sets.split("heldout") is sets.eval_tasks
    assert not {t.prompt for t in sets.validation_tasks} & {t.prompt for t in sets.eval_tasks}
    with pytest.raises(ConfigError, match=r"env\.eval_split=validation is empty"):
        TaskSets(load_config(None, [*SMALL, "env.eval_split=validation"]))
    with pytest.raises(ConfigError, match=r"env\.eval_split"):
        load_config(None, ["env.eval_split=test"])


def test_tirl_eval_on_an_empty_validation_split_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tirl.cli import main

    assert main(["eval", "--env", "swe-lite", "--split", "validation", "--set", "env.difficulty=1",
                 "--set", "trainer.threads=1"]) == 2  # fmt: skip
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert err == [
        "error: --split=validation is empty for env swe-lite with this task source (a task file or a small task "
        "space has no validation split): use --split=heldout"
    ]


def test_a_dataset_smaller_than_eval_size_is_split_not_all_held_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the verifiers example's 8 rows all went to the held-out set (env.eval_size 200), and the run
    stopped after the before-evaluation with 'could not draw training tasks ... lower env.eval_size'."""
    pytest.importorskip("verifiers")
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    sets = TaskSets(load_config(None, ["env.name=verifiers:verifiers_calc:load_environment"]))
    eval_prompts = {t.prompt for t in sets.eval_tasks}
    assert len(sets.eval_tasks) == 4 and len(eval_prompts) == 4  # 8 rows: half held out
    train = sets.train(1, 4)
    assert len(train) == 4 and not {t.prompt for t in train} & eval_prompts
