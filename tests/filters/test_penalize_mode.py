"""The ``penalize`` filter mode: removed like ``drop``, handed back for the void-turn penalty."""

from __future__ import annotations

import pytest

from tirl.config import load_config
from tirl.errors import ConfigError
from tirl.filters import MODES, VoidTurnFilter
from tirl.types import Group, Message, Role, TerminationReason, Trajectory

CODE = "```python\nprint(1)\n```"


def traj(tid: str, *turns: str, reward: float = 0.0, term: TerminationReason | None = None) -> Trajectory:
    msgs = [Message(role=Role.USER, content="q")]
    for t in turns:
        msgs += [Message(role=Role.ASSISTANT, content=t), Message(role=Role.TOOL, content="out")]
    return Trajectory(id=tid, messages=msgs, reward=reward, termination=term)


def test_penalize_removes_void_from_groups_and_hands_it_back() -> None:
    groups = [
        Group("g0", [traj("a", CODE, "\\boxed{1}", reward=1), traj("b", CODE, CODE, "hmm"), traj("c", "\\boxed{2}")]),
        Group("g1", [traj("f", CODE, term=TerminationReason.ERROR), traj("d", "nothing")]),
    ]
    pen = VoidTurnFilter("penalize").apply(groups)
    drop = VoidTurnFilter("drop").apply(groups)
    assert [[t.id for t in g.trajectories] for g in pen.groups] == [["a", "c"], []]
    assert pen.usable == drop.usable == [2, 0]  # the group statistics are exactly drop's
    assert [t.id for t in pen.penalized] == ["b", "d"]  # void ones only, never the failed one
    assert pen.penalized[0].void_turns == [2]  # the third assistant turn, not the earlier code turns
    assert drop.penalized == []
    assert MODES["penalize"].penalize and not MODES["drop"].penalize


def test_config_accepts_the_mode_and_a_bounded_penalty() -> None:
    cfg = load_config(None, ["filter.mode=penalize", "filter.void_penalty=0.5"])
    assert (cfg.filter.mode, cfg.filter.void_penalty) == ("penalize", 0.5)
    with pytest.raises(ConfigError, match="void_penalty"):
        load_config(None, ["filter.void_penalty=-1"])
