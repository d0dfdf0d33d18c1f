"""VoidTurnFilter modes and statistics."""

from __future__ import annotations

import pytest

from tirl.filters import MODES, VoidTurnFilter
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
    assert [[t.id for t in g.trajectories] for g in res.groups] == [["a", "c"], [], ["g"]]
    assert res.usable == [2, 0, 1]
    assert [g.id for g in res.learnable(1)] == ["g0", "g2"]
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
    weights = {t.id: t.loss_weight for g in res.groups for t in g.trajectories}
    assert weights == {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0, "e": 0.0, "g": 1.0}
    assert res.usable == [2, 0, 1]  # masked void trajectories stay in the group but carry no signal
    assert {t.id: t.void for g in res.groups for t in g.trajectories}["b"] is True


def test_off_counts_but_keeps() -> None:
    res = VoidTurnFilter("off").apply(batch())
    assert sum(len(g) for g in res.groups) == 6
    assert res.stats.void == 3
    assert all(t.loss_weight == 1.0 for g in res.groups for t in g.trajectories)
    assert res.usable == [3, 2, 1]  # under off a void trajectory is a usable one
    assert res.stats.min_valid_per_group == 1


def test_env_void_termination_counts_as_void() -> None:
    t = traj("x", "\\boxed{1}", term=TerminationReason.VOID)
    res = VoidTurnFilter("drop").apply([Group("g", [t])])
    assert res.stats.void == 1 and not res.groups[0].trajectories and res.usable == [0]
    assert t.void and t.void_turns == [0]


def test_usable_matches_a_plain_reference_loop_for_every_mode() -> None:
    for mode, rule in MODES.items():
        groups = batch()
        res = VoidTurnFilter(mode).apply(groups)  # type: ignore[arg-type]
        for group, kept, usable in zip(groups, res.groups, res.usable, strict=True):
            expect_kept = [t for t in group.trajectories if not t.failed and (not t.void or rule.keep)]
            expect_usable = sum(1 for t in expect_kept if not t.void or rule.usable)
            if rule.resample_on_correct:  # roc: off's rows, halved (the selection: tests/filters/test_roc.py)
                ids = [t.id for t in kept.trajectories]
                assert set(ids) <= {t.id for t in expect_kept} and usable == len(ids)
                assert len(ids) == min(len(group.trajectories) // 2, len(expect_kept))
                continue
            assert [t.id for t in kept.trajectories] == [t.id for t in expect_kept]
            assert usable == expect_usable


def test_unknown_mode_names_the_choices() -> None:
    import pytest

    with pytest.raises(ValueError, match="drop, mask, off"):
        VoidTurnFilter("nope")  # type: ignore[arg-type]


def test_rule_options_change_the_configs_rule_and_never_turn_a_form_back_on() -> None:
    from tirl.config import load_config
    from tirl.errors import ConfigError
    from tirl.filters import RuleOptions, rules_from_config, rules_with_options

    cfg = load_config(None, ["filter.answer_tags=false", 'filter.exec_langs=["python"]'])
    assert rules_with_options(cfg, RuleOptions()) == rules_from_config(cfg.filter, cfg.env)
    changed = rules_with_options(cfg, RuleOptions(exec_langs=frozenset({"bash"}), no_boxed=True))
    assert changed.exec_langs == frozenset({"bash"}) and not changed.boxed and not changed.answer_tags
    assert RuleOptions.parse_langs(" python, sh ,") == frozenset({"python", "sh"})
    with pytest.raises(ConfigError, match="--exec-langs is empty"):
        RuleOptions.parse_langs(" , ")
