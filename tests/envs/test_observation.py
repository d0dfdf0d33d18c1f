"""The fixed observation format."""

from __future__ import annotations

from tirl.envs.observation import clip, compact_traceback, format_observation, observation_text
from tirl.parsing import judge_text
from tirl.sandbox.base import ExecResult

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "<string>", line 1, in <module>\n'
    "NameError: name 'prnt' is not defined\n"
)


def test_stdout_in_output_fence() -> None:
    assert format_observation(ExecResult("10063\n", "", 0)) == "```output\n10063\n```"


def test_empty_output_is_marked() -> None:
    assert format_observation(ExecResult("", "", 0)) == "```output\n[no output]\n```"


def test_traceback_compacted_to_last_line() -> None:
    result = ExecResult("", TRACEBACK, 1)
    assert format_observation(result) == "```output\nNameError: name 'prnt' is not defined\n```"
    assert "Traceback" in format_observation(result, compact_errors=False)
    assert compact_traceback("plain warning\n") == "plain warning"


def test_markers() -> None:
    text = observation_text(ExecResult("partial\n", "", -9, timed_out=True), show_status=True)
    assert text == "partial\n[timed out]"  # the status is explained by the timeout marker
    assert observation_text(ExecResult("", "boom\n", 2), show_status=True) == "boom\n[exit status 2]"
    assert observation_text(ExecResult("", "", None, error="bwrap missing")) == "[sandbox error: bwrap missing]"
    assert observation_text(ExecResult("", "", -9, memory_exceeded=True)) == "[memory limit exceeded]"


def test_clip_keeps_head_and_tail_within_budget() -> None:
    text = "".join(str(i % 10) for i in range(1000))
    out = clip(text, 200)
    assert len(out) <= 200
    assert out.startswith(text[:50])
    assert out.endswith(text[-50:])
    assert "characters cut" in out
    assert clip("short", 200) == "short"


def test_observation_is_never_executable_code() -> None:
    # the tool output fence language is "output", which the void rule never treats as code
    verdict = judge_text(format_observation(ExecResult("print(1)\n", "", 0)))
    assert verdict.is_void
