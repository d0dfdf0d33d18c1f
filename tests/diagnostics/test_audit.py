"""`tirl audit` on a realistic trajectory file: reasons, detector-too-eager rate, distributions, tool errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tirl.cli import main
from tirl.diagnostics.audit import audit_file, tool_error

U = {"role": "user", "content": "What is 17*23? Use Python."}
CODE = {"role": "assistant", "content": "I'll compute it.\n```python\nprint(17*23)\n```"}
OK = {"role": "tool", "content": "```output\n391\n```"}
ANS = {"role": "assistant", "content": "The product is \\boxed{391}."}


def traj(id_: str, *msgs: dict, answer: str | None = "391", **extra) -> dict:
    return {"id": id_, "group": "g0", "messages": [U, *msgs], "answer": answer, **extra}


ROWS = [
    traj("ok-1", CODE, OK, ANS),
    traj("ok-2", CODE, OK, {"role": "assistant", "content": "<answer>391</answer>"}),
    traj("ok-wrong", CODE, OK, {"role": "assistant", "content": "\\boxed{392}"}),
    # void, and still correct at the end: the detector-too-eager case
    traj("eager-1", {"role": "assistant", "content": "Let me double-check the multiplication."}, ANS),
    traj("eager-2", {"role": "assistant", "content": "我再确认一下"}, CODE, OK, ANS),
    traj("unclosed", {"role": "assistant", "content": "```python\nprint(17*23)"}),
    traj("textblock", {"role": "assistant", "content": "```text\n17*23\n```"}, ANS),
    traj("blank", {"role": "assistant", "content": "```python\n   \n```"}),
    traj("placeholder", {"role": "assistant", "content": "So the answer is \\boxed{}"}),
    traj("empty", {"role": "assistant", "content": ""}),
    traj(
        "badcall",
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "python", "arguments": "{x"}}]},
    ),
    # the tool pasted code back: that is not the model's code, the next turn is void
    traj(
        "pasted",
        CODE,
        {"role": "tool", "content": "```python\nprint(1)\n```"},
        {"role": "assistant", "content": "Hmm, interesting output."},
    ),
    traj(
        "truncated",
        CODE,
        OK,
        {"role": "assistant", "content": "Now let me think step by step about the carry digits and"},
        turns=[
            {"index": 0, "action": "code", "sampled_tokens": 12, "observation_tokens": 4, "gen_s": 0.1, "env_s": 0.1},
        ],
        termination="overlong",
    ),
    traj("err-name", CODE, {"role": "tool", "content": "```output\nNameError: name 'prnt' is not defined\n```"}, ANS),
    traj("err-timeout", CODE, {"role": "tool", "content": "```output\n[timed out]\n```"}, ANS),
    traj("err-exit", CODE, {"role": "tool", "content": "```output\n[exit status 3]\n```"}, ANS),
    traj("no-truth", {"role": "assistant", "content": "thinking..."}, ANS, answer=None),
]


@pytest.fixture
def traj_file(tmp_path: Path) -> Path:
    p = tmp_path / "trajectories.jsonl"
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS), encoding="utf-8")
    return p


def test_void_reasons_and_examples(traj_file: Path) -> None:
    data = audit_file(traj_file).to_dict()
    assert data["trajectories"] == len(ROWS)
    void_ids = {"eager-1", "eager-2", "unclosed", "textblock", "blank", "placeholder", "empty", "badcall"}
    void_ids |= {"pasted", "truncated", "no-truth"}
    assert data["void"] == len(void_ids) and data["valid"] == len(ROWS) - len(void_ids)
    reasons = {k: set(v["examples"]) for k, v in data["void_reasons"].items()}
    assert reasons["prose_only"] == {"eager-1", "eager-2", "pasted", "no-truth"}
    assert reasons["unclosed_fence"] == {"unclosed"}
    assert reasons["non_exec_code"] == {"textblock"}
    assert reasons["blank_code"] == {"blank"}
    assert reasons["placeholder_answer"] == {"placeholder"}
    assert reasons["empty"] == {"empty"}
    assert reasons["malformed_tool_call"] == {"badcall"}
    assert reasons["truncated"] == {"truncated"}
    assert data["first_void_turn"] == {"0": 9, "1": 2}


def test_detector_too_eager_rate(traj_file: Path) -> None:
    vc = audit_file(traj_file).to_dict()["void_correct"]
    # void with a ground truth: all void ids but no-truth (10); correct at the end: eager-1, eager-2, textblock
    assert vc["with_ground_truth"] == 10
    assert sorted(vc["examples"]) == ["eager-1", "eager-2", "textblock"]
    assert vc["rate"] == pytest.approx(0.3)
    # valid ones: ok-1, ok-2, ok-wrong, 3 tool-error ones (all answer 391 but ok-wrong)
    assert vc["valid_accuracy"] == pytest.approx(5 / 6, abs=1e-4)


def test_distributions_and_tool_errors(traj_file: Path) -> None:
    data = audit_file(traj_file).to_dict()
    assert data["turns"]["max"] == 3 and data["turns"]["min"] == 1
    te = data["tool_errors"]
    assert data["tool_messages"] == 9
    assert te["by_kind"]["exception"]["examples"] == ["err-name"]
    assert te["by_kind"]["timeout"]["examples"] == ["err-timeout"]
    assert te["by_kind"]["nonzero_exit"]["examples"] == ["err-exit"]
    assert te["total"] == 3 and te["rate"] == pytest.approx(3 / 9, abs=1e-4)
    assert data["terminations"] == {"overlong": 1}


def test_tool_error_kinds() -> None:
    assert tool_error("```output\n391\n```") is None
    assert tool_error("Traceback (most recent call last):\n  File ...\nZeroDivisionError: division by zero") == (
        "exception"
    )
    assert tool_error("[sandbox error: bwrap missing]") == "sandbox_error"
    assert tool_error("[memory limit exceeded]") == "memory"
    assert tool_error("The word Error appears in prose") is None


def test_cli_json_and_table(traj_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    assert main(["audit", str(traj_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["void_correct"]["correct"] == 3
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["audit", str(traj_file)]) == 0
    out = capsys.readouterr().out
    assert "detector-too-eager check: 3 of 10" in out and "unclosed_fence" in out
    # the rule options are those of `tirl filter`: with text as executable, textblock is no longer void
    assert main(["audit", str(traj_file), "--json", "--exec-langs", "python,text"]) == 0
    assert json.loads(capsys.readouterr().out)["void"] == 10


def test_bad_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": "a", "messages": []}\n{"id": "b"}\n', encoding="utf-8")
    assert main(["audit", str(p)]) == 2
    assert f"{p}:2" in capsys.readouterr().err


def test_info_correct_is_the_fallback_ground_truth(tmp_path: Path) -> None:
    rows = [
        # as the trainer writes them: no "answer" field, the evaluator's verdict in info
        {"id": "v1", "messages": [U, {"role": "assistant", "content": "hmm"}, ANS], "info": {"correct": True}},
        {"id": "v2", "messages": [U, {"role": "assistant", "content": "hmm"}], "info": {"correct": False}},
        {"id": "ok", "messages": [U, CODE, OK, ANS], "info": {"correct": True}},
    ]
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    vc = audit_file(p).to_dict()["void_correct"]
    # v2 wrote no answer: it is not counted either way
    assert (vc["with_ground_truth"], vc["correct"], vc["examples"]) == (1, 1, ["v1"])
    assert vc["truth_source"] == {"info.correct": 2} and vc["valid_accuracy"] == 1.0
