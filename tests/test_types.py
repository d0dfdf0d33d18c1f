"""Trajectory's typed facts survive the JSONL round trip, and files written before they were typed still read."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.types import FieldError, Message, Role, Trajectory, fields_ok, trajectory_fields


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


WRONG_TYPES = [
    ("info", 5, "an object or null", "5"),
    ("info", [1], "an object or null", "a list"),
    ("info", "x", "an object or null", "'x'"),
    ("error", {"m": 1}, "a string or null", "an object"),
    ("void", "false", "true, false or null", "'false'"),
    ("void", 0, "true, false or null", "0"),
    # each of these was read as something else (the comment) before
    ("id", None, "a string or an integer", "null"),  # the id "None"
    ("id", True, "a string or an integer", "true"),  # "True"
    ("id", 1.5, "a string or an integer", "1.5"),  # "1.5" (1e2 became "100.0")
    ("group", [1], "a string, an integer or null", "a list"),  # "[1]"
    ("reward", True, "a finite number or null", "true"),  # 1.0
    ("reward", "1", "a finite number or null", "'1'"),
    ("reward", float("nan"), "a finite number or null", "NaN"),  # NaN, into every reader's statistics
    ("reward", float("inf"), "a finite number or null", "Infinity"),  # also what 1e400 reads as
    ("reward", float("-inf"), "a finite number or null", "-Infinity"),
    ("answer", [1], "a string, a finite number or null", "a list"),  # "[1]"
    ("answer", False, "a string, a finite number or null", "false"),  # "False"
    ("termination", "nope", "one of answered, submitted, void", "'nope'"),  # no termination
    ("termination", 3, "one of answered, submitted, void", "3"),  # no termination
    ("correct", "yes", "true, false or null", "'yes'"),  # no verdict
    ("correct", 1, "true, false or null", "1"),  # no verdict
    ("policy_version", 2.5, "an integer >= 0 or null", "2.5"),  # 2
    ("policy_version", True, "an integer >= 0 or null", "true"),  # 1
    ("policy_version", "3", "an integer >= 0 or null", "'3'"),  # 0
    ("policy_version", -1, "an integer >= 0 or null", "-1"),
    ("void_turns", "1", "a list of integers >= 0 or null", "'1'"),  # []
    ("void_turns", [0, "1"], "a list of integers >= 0 or null", "'1' at [1]"),  # [0]
    ("void_turns", [True], "a list of integers >= 0 or null", "true at [0]"),  # [True]
    ("loss_weight", "x", "a finite number >= 0 or null", "'x'"),  # 1.0
    ("loss_weight", False, "a finite number >= 0 or null", "false"),  # 0.0
    ("loss_weight", -1, "a finite number >= 0 or null", "-1"),  # out of the loss, as 0
    ("loss_weight", -0.5, "a finite number >= 0 or null", "-0.5"),
    ("loss_weight", float("nan"), "a finite number >= 0 or null", "NaN"),  # out of the loss, as 0
    ("loss_weight", float("inf"), "a finite number >= 0 or null", "Infinity"),  # in the loss, as 1
]


@pytest.mark.parametrize(("field", "value", "expected", "got"), WRONG_TYPES)
def test_an_optional_field_of_the_wrong_type_is_refused(field: str, value: object, expected: str, got: str) -> None:
    """Every field has one type: ``"info": 5`` crashed the audit (AttributeError: 'int' ... 'get'), ``"void":
    "false"`` was read as void, ``"id": null`` was the id "None", ``"reward": true`` the reward 1.0, and a
    ``correct``, ``policy_version``, ``void_turns`` or ``loss_weight`` of another type was ignored."""
    with pytest.raises(FieldError, match=None) as exc:
        Trajectory.from_dict({"id": "x", "messages": [], field: value})
    assert str(exc.value).startswith(f"'{field}' must be {expected}") and str(exc.value).endswith(f"got {got}")
    assert exc.value.fix


@pytest.mark.parametrize("field", ["correct", "policy_version", "void_turns", "loss_weight", "void"])
def test_a_legacy_info_field_of_the_wrong_type_is_refused_by_its_place(field: str) -> None:
    """Files written before the typed facts keep them in ``info``: the error names ``info.FIELD``."""
    with pytest.raises(FieldError, match=f"^'info.{field}' must be "):
        Trajectory.from_dict({"id": "x", "messages": [], "info": {field: "yes"}})


def test_every_typed_field_reads_its_own_type() -> None:
    good = {"id": 7, "group": 3, "reward": 1, "answer": 0.75, "termination": "void", "correct": False,
            "policy_version": 4, "void": True, "void_turns": [0, 2], "loss_weight": 0}  # fmt: skip
    traj = Trajectory.from_dict({"messages": [], **good})
    assert (traj.id, traj.group, traj.reward, traj.answer, traj.termination) == ("7", "3", 1.0, "0.75", "void")
    assert (traj.correct, traj.policy_version, traj.void, traj.void_turns, traj.loss_weight) == (
        False, 4, True, [0, 2], 0.0)  # fmt: skip
    nulls = Trajectory.from_dict({"messages": [], **{k: None for k in good if k != "id"}}, default_id="line-3")
    assert (nulls.id, nulls.reward, nulls.policy_version, nulls.void_turns, nulls.loss_weight) == (
        "line-3", None, 0, [], 1.0)  # fmt: skip


@pytest.mark.parametrize("calls", ["{}", '""', "0", "false", '{"name": "f"}'])
def test_tool_calls_must_be_a_list_or_null(calls: str) -> None:
    """A falsy ``tool_calls`` that is not a list (``{}``, ``""``, ``0``, ``false``) was read as no calls."""
    message = json.loads('{"role": "assistant", "content": "x", "tool_calls": ' + calls + "}")
    with pytest.raises(ValueError, match="tool_calls must be a list or null, got "):
        Message.from_dict(message)
    for ok in (None, []):
        assert Message.from_dict({**message, "tool_calls": ok}).tool_calls == ()


def test_null_or_absent_info_and_error_read_as_empty() -> None:
    for extra in ({}, {"info": None, "error": None}, {"info": {}}):
        traj = Trajectory.from_dict({"id": "x", "messages": [], **extra})
        assert traj.info == {} and traj.error is None


_ODD = [None, True, False, 0, -1, 3, 2.5, -0.5, -0.0, 1e300, float("nan"), float("inf"), float("-inf"), 10**400, "",
        "x", "void", [], [0], [True], [-1], {}, {"a": 1}]  # fmt: skip
_NAMES = ["id", "group", "reward", "answer", "termination", "error", "info", "void", "correct", "policy_version",
          "void_turns", "loss_weight", "extra"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    top=st.dictionaries(st.sampled_from(_NAMES), st.sampled_from(_ODD), max_size=5),
    legacy=st.dictionaries(st.sampled_from(_NAMES), st.sampled_from(_ODD), max_size=3),
    with_info=st.booleans(),
)
def test_fields_ok_agrees_with_the_reader(top: dict[str, object], legacy: dict[str, object], with_info: bool) -> None:
    """The filter's fast path asks :func:`fields_ok`; the reference reader is :func:`trajectory_fields`."""
    data = {**top, "info": legacy} if with_info else top
    try:
        trajectory_fields(data, "line-1")
    except FieldError:
        accepted = False
    else:
        accepted = True
    assert fields_ok(data) is accepted, data


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"reward": math.nan}, "reward is NaN"),
        ({"loss_weight": -math.inf}, "loss_weight is -Infinity"),
        ({"info": {"eval": {"step_rewards": [0.5, math.inf]}}}, "info.eval.step_rewards[1] is Infinity"),
    ],
)
def test_to_json_never_writes_nan_or_infinity(fields: dict[str, object], where: str) -> None:
    """``json.dumps`` wrote ``NaN``/``Infinity``: not JSON, refused by other tools and now by tirl's own reader."""
    traj = Trajectory(id="s1-t0-g0", messages=[], **fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=rf"^trajectory 's1-t0-g0': {re.escape(where)}, which JSON cannot hold"):
        traj.to_json()
