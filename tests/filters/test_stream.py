"""The fast file judge (``tirl filter``'s engine) against the plain reference loop, line for line and byte for byte.

``reference_part`` is the old path: the one JSONL reader, typed
``Trajectory`` objects, ``judge_trajectory`` and ``json.dumps`` verdict lines.
``judge_file`` must produce the same verdict lines, the same kept bytes, the
same counts and audit ids, and on a bad line the same ``InputError`` text, in
one process and split over forked workers.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tirl.errors import InputError
from tirl.filters.stream import FilePart, judge_file, reference_part
from tirl.parsing import ACTION_RULES, DEFAULT_RULES, ParseRules

CONTENTS = [
    "```python\nprint(1)\n```",
    "So the answer is \\boxed{\\frac{3}{4}}.",
    "<answer> 42 </answer> and $a<b$, p>q",
    "let me think about \\le and x^{2} first",
    "```text\nno\n```\nstill thinking",
    "```python\nprint(2)\n",  # unclosed fence
    "caf\u00e9 \u2028 \U0001f600 \\boxed{\u00bd}",
    "\\boxed{} \\boxed{{unbalanced",
    "#### 17",
    "<sql>SELECT 1</sql> <search>q</search> <solution>3</solution>",
    "~~~py\nprint(3)\n~~~",
    "",
    None,
]
BIG = 10**30


def _message(rng: random.Random, role: str) -> dict[str, Any]:
    m: dict[str, Any] = {"role": role, "content": rng.choice(CONTENTS)}
    if role == "assistant" and rng.random() < 0.2:
        args = rng.choice(['{"code": "print(1)"}', '{"code": print(1)', {"code": "x"}, 7, "[" * 70 + "]" * 70])
        call = {"type": "function", "function": {"name": rng.choice(["python", "", None, 3]), "arguments": args}}
        m["tool_calls"] = rng.choice([[call], [call, "junk"], [], None])
    if rng.random() < 0.1:
        m["tool_call_id"] = rng.choice(["c1", None])
    if rng.random() < 0.1:
        m["extra"] = rng.choice([{"nested": [[1, {"a": BIG}]]}, [BIG, -BIG, 1.5e300], "x"])
    return m


def _pick(rng: random.Random, choices: tuple[list[Any], list[Any]]) -> Any:
    """A common value, or (one time in ten) an odd one that sends the line to the reference path."""
    return rng.choice(choices[1] if rng.random() < 0.1 else choices[0])


def valid_record(rng: random.Random, i: int) -> dict[str, Any]:
    """One trajectory that both paths accept, with the field types and values where they could differ."""
    roles = ["system", "user"] + [
        rng.choice(["assistant", "assistant", "tool", "user"]) for _ in range(rng.randint(0, 7))
    ]
    rec: dict[str, Any] = {"messages": [_message(rng, r) for r in roles]}
    ids = ([f"t{i}", f't\u00e9"\\{i}\n', i, -i, "\U0001f600", 2**64 - 1], [BIG + i, -BIG - i, ""])
    if rng.random() < 0.9:
        rec["id"] = _pick(rng, ids)
    answers = (["3/4", "42", 42, None, "\\frac{3}{4}", "17", -(2**63)], [BIG, 0.75, 1e300, -0.0])
    if rng.random() < 0.8:
        rec["answer"] = _pick(rng, answers)
    for key, values in {
        "reward": [0.0, 1, BIG, -BIG, None, 1e300, -0.0, -1.5e308],
        "termination": ["void", "answered", "max_turns", "error", None, "void"],
        "group": ["g", BIG, 7, None],
        "info": [{}, {"loss_weight": BIG}, {"deep": [[[[{"a": 1}]]]]}, None],
        "error": ["env.step failed", "", None],
        "loss_weight": [1.0, 0, BIG, None, -0.0, 0.5],
        "policy_version": [3, BIG, 0, None],
        "correct": [True, False, None],
        "void": [True, False, None],
        "void_turns": [[0], [], [BIG], None],
    }.items():
        if rng.random() < 0.3:
            rec[key] = rng.choice(values)
    if rng.random() < 0.3:  # the prompt's assistant messages are not judged, on both paths
        rec["prompt_messages"] = rng.choice([None, 0, rng.randint(0, len(roles)), len(roles)])
    return rec


def _line(rng: random.Random, rec: Any) -> str:
    """The record as a JSON line in one of the ways a writer may have written it."""
    text = json.dumps(rec, ensure_ascii=rng.random() < 0.5, separators=rng.choice([(",", ":"), (", ", ": ")]))
    pad = _pick(rng, (["", "", "", "", " ", "\t", "\r", "\x0c"], ["\u3000", "\x1c", "\u2028"]))
    return rng.choice([text, pad + text, text + pad, pad + text + pad])


def write_lines(path: Path, lines: list[str], *, final_newline: bool = True) -> Path:
    data = "\n".join(lines) + ("\n" if final_newline else "")
    path.write_bytes(data.encode("utf-8", "surrogatepass"))
    return path


def generated_file(path: Path, seed: int, n: int) -> Path:
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        lines.append(_line(rng, valid_record(rng, i)))
        if rng.random() < 0.05:
            lines.append(rng.choice(["", "   ", "\t\r", "\u3000", "\x1c"]))  # blank once stripped: skipped
    lines.append(json.dumps({"messages": [{"role": "assistant", "content": "\\boxed{1}"}], "reward": 1.7e308}))
    lines.append(json.dumps({"id": "min", "messages": [], "reward": -5e-324, "loss_weight": 5e-324}))
    lines.append(json.dumps({"id": 10**400, "messages": []}))  # too large for orjson: the reference path
    return write_lines(path, lines, final_newline=seed % 2 == 0)


def outcome(path: Path, rules: ParseRules, workers: int | None) -> tuple[FilePart, bytes, bytes]:
    """The fast path's part and the bytes it writes for the verdicts and the kept lines."""

    class Sink:
        def __init__(self) -> None:
            self.data = bytearray()

        def write(self, b: Any) -> None:
            self.data += b

    verdicts, kept = Sink(), Sink()
    with judge_file(path, rules, keep=True, workers=workers) as judged:
        judged.write_verdicts(verdicts)  # type: ignore[arg-type]
        judged.write_kept(kept)  # type: ignore[arg-type]
    return judged.part, bytes(verdicts.data), bytes(kept.data)


def assert_same(path: Path, rules: ParseRules = DEFAULT_RULES, workers: int | None = 1) -> FilePart:
    ref = reference_part(path, rules, keep=True)
    part, verdicts, kept = outcome(path, rules, workers)
    assert verdicts == "".join(ref.verdicts).encode("ascii")
    assert kept == b"".join(k for k in ref.kept if isinstance(k, bytes))
    assert (part.trajectories, part.void, part.with_answer) == (ref.trajectories, ref.void, ref.with_answer)
    assert part.void_correct == ref.void_correct
    return ref


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rule", ["tir", "gsm8k", "sql"])
def test_generated_files_match_the_reference(tmp_path: Path, seed: int, rule: str) -> None:
    ref = assert_same(generated_file(tmp_path / "in.jsonl", seed, 300), ACTION_RULES[rule])
    assert ref.trajectories >= 300 and 0 < ref.void < ref.trajectories  # both kinds of verdict are exercised


def test_hand_written_tricky_lines_match_the_reference(tmp_path: Path) -> None:
    msgs = '[{"role": "assistant", "content": "\\\\boxed{7}"}]'
    lines = [
        '{"id": "a", "messages": ' + msgs + ', "answer": 7}',
        '{"id":"b","messages":' + msgs + ',"answer":"7","termination":"void"}',  # void by the env's verdict
        '{"id": "c\\u00e9\\ud83d\\ude00\\"\\\\\\/", "messages": []}',  # escapes in the id
        '{"messages": [], "id": 12345678901234567890123}',  # an int id beyond 64 bits
        '{"messages": [], "answer": 98765432109876543210, "id": "big-answer"}',
        '{"messages": [], "info": {"x": NaN}, "id": "nan"}',  # json.loads accepts NaN, orjson does not; info is free
        '{"messages": [], "extra": 1e400, "id": "inf"}',  # an unknown field is not looked into
        '{"messages": [], "id": "dup", "id": "dup2"}',  # the last duplicate key wins in both
        '  {"messages": []}  ',
        '{"messages": []}\r',
        '{"messages": [{"role": "tool", "content": null, "tool_call_id": "x"}], "info": {"a": [[[]]]}}',
        '{"messages": [{"role": "assistant", "content": "hi", "tool_calls": [{"function": {"name": "f", '
        '"arguments": {"deep": [[[[1]]]]}}}]}]}',
        "",
        '{"messages": [{"role": "assistant", "content": "x", "tool_calls": []}]}',
        '{"messages": [{"role": "assistant", "content": "x", "tool_calls": null}], "info": {"correct": true}}',
    ]
    assert_same(write_lines(tmp_path / "in.jsonl", lines))
    assert_same(write_lines(tmp_path / "torn.jsonl", lines[:3], final_newline=False))


def _deep(n: int) -> str:
    return "[" * n + "]" * n


BAD = {
    "not json": "{not json",
    "not an object": "[1, 2]",
    "no messages": '{"id": "x"}',
    "messages not a list": '{"messages": {}}',
    "bad role": '{"messages": [{"role": "robot", "content": "x"}]}',
    "list role": '{"messages": [{"role": ["assistant"], "content": "x"}]}',
    "int content": '{"messages": [{"role": "assistant", "content": 5}]}',
    "big int content": '{"messages": [{"role": "assistant", "content": 123456789012345678901234}]}',
    "tool_calls not a list": '{"messages": [{"role": "assistant", "content": "x", "tool_calls": "c"}]}',
    "bad tool_call_id": '{"messages": [{"role": "tool", "content": "x", "tool_call_id": 3}]}',
    "message not an object": '{"messages": ["hi"]}',
    "reward a string": '{"messages": [], "reward": "1"}',
    "unhashable termination": '{"messages": [], "termination": ["void"]}',
    "info a number": '{"messages": [], "info": 5}',
    "info a list": '{"messages": [], "info": [1]}',
    "info a string": '{"messages": [], "info": "x"}',
    "error not a string": '{"messages": [], "error": {"msg": "x"}}',
    "void a string": '{"messages": [], "void": "false"}',
    "void in info a number": '{"messages": [], "info": {"void": 0}}',
    "reward too large for a float": '{"messages": [], "reward": ' + "9" * 400 + "}",
    "loss_weight too large for a float": '{"messages": [], "loss_weight": ' + "9" * 400 + "}",
    "id null": '{"messages": [], "id": null}',
    "id true": '{"messages": [], "id": true}',
    "id a float": '{"messages": [], "id": 1e2}',
    "id beyond 64 bits as a float": '{"messages": [], "id": 1e30}',
    "group a list": '{"messages": [], "group": [1]}',
    "reward true": '{"messages": [], "reward": true}',
    "answer a list": '{"messages": [], "answer": [1]}',
    "answer false": '{"messages": [], "answer": false}',
    "termination unknown": '{"messages": [], "termination": "nope"}',
    "termination a number": '{"messages": [], "termination": 3}',
    "correct a string": '{"messages": [], "correct": "yes"}',
    "correct in info a number": '{"messages": [], "info": {"correct": 1}}',
    "policy_version a float": '{"messages": [], "policy_version": 2.5}',
    "policy_version true": '{"messages": [], "policy_version": true}',
    "policy_version negative": '{"messages": [], "policy_version": -1}',
    "policy_version in info a string": '{"messages": [], "info": {"policy_version": "3"}}',
    "void_turns a string": '{"messages": [], "void_turns": "1"}',
    "void_turns holding true": '{"messages": [], "void_turns": [0, true]}',
    "loss_weight a string": '{"messages": [], "loss_weight": "x"}',
    "loss_weight false": '{"messages": [], "loss_weight": false}',
    "reward NaN": '{"messages": [], "reward": NaN}',  # json.loads reads it; orjson refuses: the reference path
    "reward Infinity": '{"messages": [], "reward": Infinity}',
    "reward -Infinity": '{"messages": [], "reward": -Infinity}',
    "reward 1e400": '{"messages": [], "reward": 1e400}',  # Infinity to json.loads
    "loss_weight NaN": '{"messages": [], "loss_weight": NaN}',
    "loss_weight negative": '{"messages": [], "loss_weight": -1}',  # orjson reads it: the fast path must refuse
    "loss_weight negative float": '{"messages": [], "loss_weight": -0.25}',
    "loss_weight in info negative": '{"messages": [], "info": {"loss_weight": -2}}',
    "loss_weight in info -Infinity": '{"messages": [], "info": {"loss_weight": -Infinity}}',
    "prompt_messages beyond the messages": '{"messages": [{"role": "user", "content": "x"}], "prompt_messages": 2}',
    "prompt_messages negative": '{"messages": [], "prompt_messages": -1}',
    "prompt_messages true": '{"messages": [], "prompt_messages": true}',
    "prompt_messages a float": '{"messages": [], "prompt_messages": 1.0}',
    "tool_calls an empty object": '{"messages": [{"role": "assistant", "content": "x", "tool_calls": {}}]}',
    "tool_calls an empty string": '{"messages": [{"role": "assistant", "content": null, "tool_calls": ""}]}',
    "too many digits": '{"messages": [], "x": ' + "9" * 5000 + "}",
    "deep in an extra field": '{"messages": [], "extra": ' + _deep(64) + "}",
    "deep in a message": '{"messages": [{"role": "user", "content": "x", "meta": ' + _deep(62) + "}]}",
    "deep in arguments": '{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": '
    '{"name": "f", "arguments": ' + _deep(59) + "}}]}]}",
    "byte order mark": '\ufeff{"messages": []}',
    "lone surrogate": '{"messages": [{"role": "user", "content": "\\ud800"}]}',
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_line_gives_the_reference_error(tmp_path: Path, name: str) -> None:
    rng = random.Random(len(name))
    good = [json.dumps(valid_record(rng, i)) for i in range(40)]
    path = write_lines(tmp_path / "in.jsonl", [*good[:25], BAD[name], *good[25:], BAD[name]])
    with pytest.raises(InputError) as ref:
        reference_part(path, DEFAULT_RULES, keep=True)
    assert ref.value.line == 26
    for workers in (1, 3):
        with pytest.raises(InputError) as fast, judge_file(path, DEFAULT_RULES, keep=True, workers=workers):
            pass
        assert str(fast.value) == str(ref.value)


def test_depth_at_the_limit_is_accepted(tmp_path: Path) -> None:
    lines = [
        '{"messages": [], "extra": ' + _deep(63) + "}",
        '{"messages": [{"role": "user", "content": "x", "meta": ' + _deep(61) + "}]}",
    ]
    assert assert_same(write_lines(tmp_path / "in.jsonl", lines)).trajectories == 2


def test_invalid_utf8_names_the_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"messages": []}\n{"messages": [], "id": "\xe3\x81"}\n\xff\n')
    with pytest.raises(InputError) as ref:
        reference_part(path, DEFAULT_RULES)
    with pytest.raises(InputError) as fast, judge_file(path, DEFAULT_RULES):
        pass
    assert str(fast.value) == str(ref.value) and ":2: not UTF-8" in str(fast.value)


def test_empty_and_blank_files(tmp_path: Path) -> None:
    for name, data in {"empty": b"", "blank": b"\n \n\t\n", "no-newline": b'{"messages": []}'}.items():
        path = tmp_path / name
        path.write_bytes(data)
        assert_same(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), workers=st.integers(1, 4))
def test_any_split_into_workers_matches(tmp_path: Path, seed: int, workers: int) -> None:
    """Ranges cut at line boundaries (forked here when no other thread runs, else in order) agree with one pass."""
    assert_same(generated_file(tmp_path / f"in{seed}.jsonl", seed, 30), workers=workers)


FORK_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from tirl.filters import forked
    from tirl.filters.stream import judge_file
    from tirl.parsing import DEFAULT_RULES
    assert forked.can_fork()
    parent = os.getpid()
    real = forked._child
    def flaky(fn, job, fd):  # the second child dies before sending anything: its job is redone in the parent
        if job == "die" or (isinstance(job, tuple) and job[0] > 0 and sys.argv[2] == "kill"):
            os._exit(9)
        real(fn, job, fd)
    forked._child = flaky
    if sys.argv[2] == "nofork":  # fork fails (a process limit): every job runs here, in order
        def no_fork():
            raise OSError(11, "Resource temporarily unavailable")
        os.fork = no_fork
    got = forked.map_forked(lambda j: (j, os.getpid() != parent), [1, 2, "die"])
    assert got == [(1, False), (2, sys.argv[2] != "nofork"), ("die", False)], got
    with judge_file(Path(sys.argv[1]), DEFAULT_RULES, keep=True, workers=3) as judged:
        sys.stdout.write("".join(judged.part.verdicts))
    """
)


@pytest.mark.parametrize("mode", ["ok", "kill", "nofork"])
def test_forked_workers_in_a_fresh_process(tmp_path: Path, mode: str) -> None:
    """A real fork (a fresh process has no other threads): results in order; a dead child's job is redone, and
    a fork that fails runs its job here."""
    path = generated_file(tmp_path / "in.jsonl", 7, 400)
    res = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, str(path), mode], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == "".join(reference_part(path, DEFAULT_RULES).verdicts)


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_an_unreadable_input_gives_the_reference_error(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nope.jsonl"
    if kind == "directory":
        path.mkdir()
    with pytest.raises(InputError) as ref:
        reference_part(path, DEFAULT_RULES)
    with pytest.raises(InputError) as fast, judge_file(path, DEFAULT_RULES):
        pass
    assert str(fast.value) == str(ref.value) and str(path) in str(fast.value)


def test_flat_calls_is_a_faster_way_to_the_same_depth_answer() -> None:
    """``_flat_calls`` may say True only where the full depth check (``_shallow``) says True."""
    from tirl.filters.stream import _flat_calls, _shallow

    flat = [{"id": "c1", "type": "function", "function": {"name": "python", "arguments": '{"a": 1}'}}]
    assert _flat_calls(flat) and _shallow(flat, 4)
    assert _flat_calls([{"name": "f", "arguments": {"x": 1}}])  # arguments already decoded, one level
    for odd in ([{"function": {"arguments": {"x": [1]}}}], [{"a": [1]}], [[1]], ["x"]):
        assert not _flat_calls(odd)  # left to the full check
    deep: object = 1
    for _ in range(70):
        deep = {"x": deep}
    assert not _flat_calls([{"function": deep}]) and not _shallow([{"function": deep}], 4)
