"""VoidTurnFilter modes and statistics."""

from __future__ import annotations

from tirl.filters.groups import groups_needing_more, zero_variance
from tirl.filters.void_turn import LOSS_WEIGHT_KEY, VoidTurnFilter
from tirl.types import Group, Message, Role, TerminationReason, Trajectory

CODE = "```python\nprint(1)\n```"


def traj(tid: str, *turns: str, reward: float = 0.0, term: TerminationReason | None = None) -> Trajectory:
    msgs = [Message(role=Role.USER, content="q")]
    for t in turns:
        msgs += [Message(role=Role.ASSISTANT, content=t), Message(role=Role.TOOL, content="out")]
    return Trajectory(id=tid, messages=msgs, reward=reward, termination=term)


def batch() -> list[Group]:
    return [
        Group("g0", [traj("a", CODE, "\\boxed{1}", reward=1), traj("b", CODE, "hmm"), traj("c", "\\boxed{2}")]),
        Group("g1", [traj("d", "nothing"), traj("e", "nope")]),
        Group("g2", [traj("f", CODE, term=TerminationReason.ERROR), traj("g", "\\boxed{3}", reward=1)]),
    ]


def test_drop_removes_void_and_failed_before_groups_are_used() -> None:
    res = VoidTurnFilter("drop").apply(batch())
    assert [[t.id for t in g.trajectories] for g in res.groups] == [["a", "c"], ["g"]]
    s = res.stats
    assert (s.trajectories, s.valid, s.void, s.failed, s.empty_groups) == (7, 3, 3, 1, 1)
    assert s.min_valid_per_group == 0
    assert abs(s.void_ratio - 0.5) < 1e-12
    assert sorted(t.id for t in res.removed) == ["b", "d", "e", "f"]
    assert s.metrics()["filter/void_trajectories"] == 3.0


def test_mask_keeps_void_in_groups_with_zero_weight() -> None:
    res = VoidTurnFilter("mask").apply(batch())
    ids = [[t.id for t in g.trajectories] for g in res.groups]
    assert ids == [["a", "b", "c"], ["d", "e"], ["g"]]
    weights = {t.id: t.info.get(LOSS_WEIGHT_KEY, 1.0) for g in res.groups for t in g.trajectories}
    assert weights == {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0, "e": 0.0, "g": 1.0}


def test_off_counts_but_keeps() -> None:
    res = VoidTurnFilter("off").apply(batch())
    assert sum(len(g) for g in res.groups) == 6
    assert res.stats.void == 3
    assert all(LOSS_WEIGHT_KEY not in t.info for g in res.groups for t in g.trajectories)


def test_env_void_termination_counts_as_void() -> None:
    t = traj("x", "\\boxed{1}", term=TerminationReason.VOID)
    res = VoidTurnFilter("drop").apply([Group("g", [t])])
    assert res.stats.void == 1 and not res.groups


def test_groups_needing_more_includes_emptied_groups() -> None:
    res = VoidTurnFilter("drop").apply(batch())
    assert groups_needing_more(res.groups, ["g0", "g1", "g2"], min_valid=2) == ["g1", "g2"]
    assert zero_variance(res.groups[1]) and not zero_variance(res.groups[0])
