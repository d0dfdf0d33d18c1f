"""Trajectory's typed facts survive the JSONL round trip, and files written before they were typed still read."""

from __future__ import annotations

import json

import pytest

from tirl.types import Message, Role, Trajectory


def test_typed_facts_round_trip() -> None:
    traj = Trajectory(
        id="s1-t0-g0",
        messages=[Message(role=Role.USER, content="q")],
        policy_version=3,
        correct=True,
        void=True,
        void_turns=[1],
        loss_weight=0.0,
        info={"step": 1},
    )
    data = json.loads(traj.to_json())
    assert {k: data[k] for k in ("policy_version", "correct", "void", "void_turns", "loss_weight")} == {
        "policy_version": 3,
        "correct": True,
        "void": True,
        "void_turns": [1],
        "loss_weight": 0.0,
    }
    back = Trajectory.from_dict(data)
    facts = (back.policy_version, back.correct, back.void, back.void_turns, back.loss_weight)
    assert facts == (3, True, True, [1], 0.0)
    assert back.info == {"step": 1}


def test_defaults_are_not_written_and_legacy_info_keys_are_read() -> None:
    plain = json.loads(Trajectory(id="x", messages=[]).to_json())
    assert "correct" not in plain and "void" not in plain and "loss_weight" not in plain
    assert plain["policy_version"] == 0
    info = {"correct": False, "policy_version": 7, "void": True, "loss_weight": 0}
    legacy = {"id": "y", "messages": [], "info": info}
    old = Trajectory.from_dict(legacy)
    assert (old.correct, old.policy_version, old.void, old.loss_weight) == (False, 7, True, 0.0)
    odd = Trajectory.from_dict({"id": "z", "messages": [], "correct": "yes", "void_turns": "1", "loss_weight": "x"})
    assert (odd.correct, odd.void_turns, odd.loss_weight) == (None, [], 1.0)  # wrong types: ignored, not trusted


@pytest.mark.parametrize(
    ("field", "value"),
    [("info", 5), ("info", [1]), ("info", "x"), ("error", {"m": 1}), ("void", "false"), ("void", 0)],
)
def test_an_optional_field_of_the_wrong_type_is_refused(field: str, value: object) -> None:
    """``"info": 5`` was kept as the info "dict" and crashed the audit (AttributeError: 'int' ... 'get');
    ``"void": "false"`` was read as void (``bool("false")``)."""
    with pytest.raises(ValueError, match=f"'{field}' must be"):
        Trajectory.from_dict({"id": "x", "messages": [], field: value})


def test_null_or_absent_info_and_error_read_as_empty() -> None:
    for extra in ({}, {"info": None, "error": None}, {"info": {}}):
        traj = Trajectory.from_dict({"id": "x", "messages": [], **extra})
        assert traj.info == {} and traj.error is None
