"""A trajectory field of the wrong type is one ``FILE:LINE`` error naming the field, in every reader.

``tirl filter`` and ``tirl audit`` refuse the file (exit 2, one ``error:`` line, no verdicts file written);
``tirl report`` leaves the file out with one warning line and reports the rest (exit 0). Each case was read as
something else before: the comment says what.
"""

from __future__ import annotations

import json

import pytest
from cli_run import TRAJ, assert_refused, run_cli

CASES = {
    "id null": ('"id": null', "'id' must be a string or an integer, got null"),  # the id "None"
    "reward true": ('"reward": true', "'reward' must be a finite number or null, got true"),  # the reward 1.0
    "reward NaN": ('"reward": NaN', "'reward' must be a finite number or null, got NaN"),  # accepted
    "reward 1e400": ('"reward": 1e400', "'reward' must be a finite number or null, got Infinity"),  # accepted
    "reward -Infinity": ('"reward": -Infinity', "'reward' must be a finite number or null, got -Infinity"),
    "correct a string": ('"correct": "yes"', "'correct' must be true, false or null, got 'yes'"),  # ignored
    "policy_version a float": ('"policy_version": 2.5', "'policy_version' must be an integer >= 0"),  # 2
    "void_turns a string": ('"void_turns": "1"', "'void_turns' must be a list of integers >= 0"),  # ignored
    "loss_weight a string": ('"loss_weight": "x"', "'loss_weight' must be a finite number >= 0 or null, got 'x'"),
    "loss_weight negative": ('"loss_weight": -1', "'loss_weight' must be a finite number >= 0 or null, got -1"),  # 0
    "legacy loss_weight Infinity": ('"info": {"loss_weight": Infinity}', "'info.loss_weight' must be a finite number"),
    "legacy correct a number": ('"info": {"correct": 1}', "'info.correct' must be true, false or null"),  # ignored
    "termination unknown": ('"termination": "voided"', "'termination' must be one of answered"),  # ignored
}


def _run_dir(tmp_path, field: str):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "trajectories.jsonl"
    path.write_text(json.dumps(TRAJ) + "\n" + json.dumps(TRAJ)[:-1] + f", {field}}}\n", encoding="utf-8")
    return run, path


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["filter", "audit"])
def test_a_wrong_field_type_is_refused_naming_file_line_and_field(capsys, tmp_path, case, command):
    field, problem = CASES[case]
    _, path = _run_dir(tmp_path, field)
    verdicts = tmp_path / "v.jsonl"
    argv = ["filter", path, "--verdicts", verdicts] if command == "filter" else ["audit", path]
    out = run_cli(capsys, *argv)
    assert_refused(out, f"error: {path}:2: {problem}", " — ")  # the place, the field, then the fix
    assert not verdicts.exists()


@pytest.mark.parametrize("case", ["id null", "reward true", "correct a string"])
def test_the_report_leaves_a_file_with_a_wrong_field_out_and_says_where(capsys, tmp_path, case):
    field, problem = CASES[case]
    run, path = _run_dir(tmp_path, field)
    out = run_cli(capsys, "report", run)
    assert out.code == 0 and "Traceback" not in out.err, out.err
    lines = out.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: {path}:2: {problem}"), lines


def test_a_falsy_tool_calls_that_is_not_a_list_is_refused(capsys, tmp_path):
    """``"tool_calls": {}`` was read as no calls (``or ()``), on both of the filter's paths."""
    row = {**TRAJ, "messages": [*TRAJ["messages"][:-1], {**TRAJ["messages"][-1], "tool_calls": {}}]}
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(TRAJ) + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    for argv in (["filter", path, "--verdicts", tmp_path / "v.jsonl"], ["audit", path]):
        assert_refused(run_cli(capsys, *argv), f"{path}:2: messages[3]: tool_calls must be a list or null, got ")
    assert not (tmp_path / "v.jsonl").exists()
