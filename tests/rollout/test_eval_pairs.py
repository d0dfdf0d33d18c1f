"""Evaluation reports list each task's outcome, and two of them compare pair by pair (McNemar).

Plain data: trajectories built here, checked against a loop over the pairs written out by hand. The real
``tirl train`` / ``tirl eval`` files that carry these records: tests/trainer/test_train_cli.py.
"""

from __future__ import annotations

import random

import pytest

from tirl.ablation_stats import mcnemar_exact
from tirl.rollout.evaluation import EvalReport, PairedChange, TaskOutcome
from tirl.types import TerminationReason, Trajectory, TurnRecord


def _traj(task: str, correct: bool | None, end: TerminationReason | None, turns: int) -> Trajectory:
    t = Trajectory(id=f"s0-{task}-g0", messages=[], group=task, correct=correct, termination=end)
    t.turns = [TurnRecord(index=k, action="code", sampled_tokens=1, observation_tokens=0, gen_s=0.0, env_s=0.0)
               for k in range(turns)]  # fmt: skip
    return t


def test_outcomes_are_each_task_sorted_with_how_it_ended() -> None:
    trajs = [
        _traj("t2", True, TerminationReason.SUBMITTED, 5),
        _traj("t1", None, None, 0),  # an episode that never got a verdict counts as not solved
        _traj("t3", False, TerminationReason.MAX_TURNS, 10),
    ]
    report = EvalReport.of(trajs, wall_s=1.0)
    got = report.outcomes()
    assert [o.id for o in got] == ["t1", "t2", "t3"]
    assert got[0] == TaskOutcome("t1", False, "none", 0)
    assert got[1] == TaskOutcome("t2", True, TerminationReason.SUBMITTED.value, 5)
    assert got[2].termination == TerminationReason.MAX_TURNS.value and got[2].turns == 10
    assert [TaskOutcome.from_dict(o.to_dict()) for o in got] == got
    assert sum(o.correct for o in got) == report.correct


def test_paired_change_counts_each_cell_and_tests_the_discordant_pairs() -> None:
    rng = random.Random(7)
    ids = [f"task-{i:03d}" for i in range(200)]
    before = {i: rng.random() < 0.2 for i in ids}
    after = {i: rng.random() < 0.35 for i in ids}
    extra = TaskOutcome("only-after", True, "submitted", 4)  # not paired: the other side has no such task
    got = PairedChange.of(
        [TaskOutcome(i, before[i], "submitted", 3) for i in reversed(ids)],  # order does not matter
        [TaskOutcome(i, after[i], "submitted", 3) for i in ids] + [extra],
    )
    cells = {(True, True): 0, (False, True): 0, (True, False): 0, (False, False): 0}
    for i in ids:
        cells[(before[i], after[i])] += 1
    assert (got.n, got.both, got.gained, got.lost, got.neither) == (
        200, cells[(True, True)], cells[(False, True)], cells[(True, False)], cells[(False, False)]
    )  # fmt: skip
    assert got.p_value == mcnemar_exact(cells[(False, True)], cells[(True, False)]) < 0.05
    assert PairedChange.from_dict(got.to_dict()) == got
    assert got.line() == (
        f"{got.gained} solved after only, {got.lost} before only, {got.both} both, {got.neither} neither "
        f"(McNemar exact p = {got.p_value:.3g})"
    )
    assert PairedChange.of([TaskOutcome("a", True, "x", 1)], [TaskOutcome("a", True, "x", 1)]).p_value == 1.0
    with pytest.raises(ValueError, match="twice"):
        PairedChange.of([TaskOutcome("a", True, "x", 1)] * 2, [TaskOutcome("a", True, "x", 1)])
