"""Judging a whole trajectory JSONL file with the void-turn rule, fast: what ``tirl filter`` runs.

:func:`judge_file` reads the file as bytes (a memory map for a regular file,
one read for a pipe), slices each line straight out of it, and judges it on
one of two paths:

* **the fast path** decodes the line with ``orjson`` and judges straight from
  the decoded dicts (:func:`tirl.parsing.turn_acts`, the rule of
  :func:`~tirl.parsing.judge_content` without its verdict object), building no
  :class:`~tirl.types.Trajectory` or :class:`~tirl.types.Message`; the last
  answer of a trajectory is searched only when the audit uses it (a void
  trajectory with an ``answer``), from the last turn back. It takes
  only lines it can vouch for: a line that is a JSON object once ASCII
  whitespace is stripped, that ``orjson`` decodes, whose fields have the
  common types (``id`` and ``answer`` a string, an integer or absent; every
  message an object with a known role, string or null ``content`` and
  ``tool_call_id``, a list of ``tool_calls`` or null; every other field of
  the type :func:`tirl.types.trajectory_fields` requires: :func:`tirl.types.fields_ok`)
  and whose nesting stays within :data:`tirl.jsonl.MAX_DEPTH`; the assistant messages among the first
  ``prompt_messages`` (the prompt's demonstrations) are not judged, as the reference path does;
* **the reference path** takes every other line: :func:`tirl.jsonl.jsonl_line`
  and :func:`tirl.jsonl.to_trajectory` (the one JSONL reader) and
  :func:`~tirl.filters.judge_trajectory`. Its value, or its error, is the
  answer for that line; so a bad line gives the same ``error:`` as the
  reference reader, naming the file, the line and the fix.

Why those limits make the fast path exact: ``orjson`` refuses everything
:func:`tirl.jsonl.parse_json` refuses except nesting (checked here) and
returns the same values except integers beyond 64 bits, which it turns into
floats; a float is never taken where the output depends on the value (``id``,
``answer``), and the other numbers are only checked for type, finiteness and
sign, which such a float keeps. ``orjson`` refuses
some text that :func:`json.loads` accepts (``NaN``, ``1e400``, lone surrogate
escapes): those lines take the reference path. Tests compare both paths on
generated and hand-written lines (``tests/filters/test_stream.py``).

Output lines are byte-identical to the reference loop (:func:`reference_part`):
a verdict line is what ``json.dumps`` writes for ``{"id", "void",
"void_turns"}``, and a kept line is the input line, stripped, copied as bytes
(runs of kept lines as one slice of the input).

``workers > 1`` splits the file at line boundaries and judges the parts in
forked children (:func:`tirl.filters.forked.map_forked`), merged in input
order; a child that fails for any reason is redone in the parent, so an input
error is raised as a serial run raises it. Not covered: an input file
truncated while it is read (the memory map faults).
"""

from __future__ import annotations

import itertools
import json
import mmap
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii  # what json.dumps uses for a str (ensure_ascii)
from pathlib import Path
from typing import IO, Any

import orjson

from tirl.answers import answers_match
from tirl.filters.forked import map_forked, usable_cpus
from tirl.filters.void_turn import judge_trajectory
from tirl.jsonl import JSONProblem, check_depth, jsonl_line, open_input, read_trajectory_lines, to_trajectory
from tirl.parsing import ParseRules, Unsearched, answer_of, turn_acts
from tirl.types import TerminationReason, ToolCall, fields_ok

__all__ = ["PARALLEL_BYTES", "FilePart", "JudgedFile", "judge_file", "judge_range", "reference_part"]

PARALLEL_BYTES = 4 << 20  # automatic workers: one per this many bytes of input, up to the usable CPUs
_OTHER_ROLES = frozenset({"system", "user", "tool"})
_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id"})
_VOID = TerminationReason.VOID.value
_ABSENT = object()

Buffer = bytes | mmap.mmap
Kept = tuple[int, int] | bytes  # a slice of the input, or a line's bytes


@dataclass(slots=True)
class FilePart:
    """What the judging of some lines produced, in input order (one part per worker, then merged)."""

    trajectories: int = 0
    void: int = 0
    with_answer: int = 0
    void_correct: list[str] = field(default_factory=list)  # ids of void trajectories whose last answer is right
    verdicts: list[str] = field(default_factory=list)  # verdict lines, each ending in a newline
    kept: list[Kept] = field(default_factory=list)  # the kept lines, each ending in a newline

    def extend(self, other: FilePart) -> None:
        """Append ``other``, the part that follows this one in the file."""
        self.trajectories += other.trajectories
        self.void += other.void
        self.with_answer += other.with_answer
        self.void_correct.extend(other.void_correct)
        self.verdicts.extend(other.verdicts)
        self.kept.extend(other.kept)

    def record(self, tid: str, void_turns: list[int], final: str | None, answer: str | None) -> bool:
        """Count one judged trajectory and add its verdict line; returns whether it is void."""
        self.trajectories += 1
        if answer is not None:
            self.with_answer += 1
        if not void_turns:
            self.verdicts.append(f'{{"id": {encode_basestring_ascii(tid)}, "void": false, "void_turns": []}}\n')
            return False
        turns = ", ".join(map(str, void_turns))
        self.verdicts.append(f'{{"id": {encode_basestring_ascii(tid)}, "void": true, "void_turns": [{turns}]}}\n')
        self.void += 1
        if final is not None and answer is not None and answers_match(final, answer):
            self.void_correct.append(tid)
        return True


@dataclass(slots=True)
class JudgedFile:
    """The judged file: counts, the verdict lines and the kept lines (slices of ``source``)."""

    part: FilePart
    source: Buffer

    def write_verdicts(self, fh: IO[bytes]) -> None:
        """Write the verdict lines (one per trajectory, input order)."""
        fh.write("".join(self.part.verdicts).encode("ascii"))

    def write_kept(self, fh: IO[bytes]) -> None:
        """Write the kept (non-void) input lines, unchanged apart from surrounding whitespace."""
        with memoryview(self.source) as view:
            for item in self.part.kept:
                fh.write(item if isinstance(item, bytes) else view[item[0] : item[1]])


@contextmanager
def _source(path: Path) -> Iterator[Buffer]:
    """The input's bytes: a read-only memory map of a regular file, else everything read (a pipe)."""
    with open_input(path) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            yield fh.read()
            return
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mm
        finally:
            try:
                mm.close()
            except BufferError:  # a slice still referenced by a traceback: unmapped when it goes; keep the error
                pass


def _ranges(buf: Buffer, workers: int) -> list[tuple[int, int]]:
    """``workers`` byte ranges of about equal size, each ending just after a newline (the last at the end)."""
    size = len(buf)
    cuts = [0]
    for k in range(1, workers):
        nl = buf.find(b"\n", max(cuts[-1], size * k // workers))
        if nl < 0 or nl + 1 >= size:
            break
        cuts.append(nl + 1)
    cuts.append(size)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


@contextmanager
def judge_file(
    path: str | Path, rules: ParseRules, *, keep: bool = False, workers: int | None = None
) -> Iterator[JudgedFile]:
    """Judge every line of a trajectory JSONL file (see the module doc); the first bad line raises InputError.

    ``keep``: collect the kept lines (:meth:`JudgedFile.write_kept`, valid while the context is open).
    ``workers``: processes to use (``None``: one per :data:`PARALLEL_BYTES` of input, up to the usable CPUs).
    """
    p = Path(path)
    with _source(p) as buf:
        if workers is None:
            workers = min(usable_cpus(), max(1, len(buf) // PARALLEL_BYTES))
        jobs = _ranges(buf, max(1, workers))

        def run(job: tuple[int, int]) -> FilePart:
            return judge_range(p, buf, job[0], job[1], rules, keep=keep)

        part = FilePart()
        for done in map_forked(run, jobs):
            part.extend(done)
        yield JudgedFile(part, buf)


def judge_range(path: Path, buf: Buffer, lo: int, hi: int, rules: ParseRules, *, keep: bool = False) -> FilePart:
    """Judge the lines in ``buf[lo:hi]`` (``lo`` at a line start); line numbers count from the start of ``buf``.

    The hot loop of the module: one line at a time, sliced straight out of ``buf`` (a memory map: no block
    copies, no list of lines).
    """
    part = FilePart()
    loads, fast, record, kept, find = orjson.loads, _fast_verdict, part.record, part.kept, buf.find
    number = _newlines(buf, lo)
    run_lo = run_hi = -1  # the current run of kept lines, as one slice of the input
    pos = lo
    while pos < hi:
        nl = find(b"\n", pos, hi)  # -1 only on the file's last line when it has no newline
        start, end = pos, hi if nl < 0 else nl
        pos = end + 1
        number += 1
        line = buf[start:end]
        text = line if line[:1] == b"{" and line[-1:] == b"}" else line.strip()
        got = None
        if text[:1] == b"{" and text[-1:] == b"}":
            try:
                got = fast(loads(text), number, rules)
            except orjson.JSONDecodeError:
                pass
        if got is None:
            ref = _reference_line(path, number, buf[start:pos], rules)  # the raw line, with its newline
            if ref is None:
                continue
            got, text = ref
        if record(*got) or not keep:
            continue
        if text is line and nl >= 0:  # the line and its newline, as they are in the input
            if start != run_hi:
                if run_hi > run_lo:
                    kept.append((run_lo, run_hi))
                run_lo = start
            run_hi = pos
            continue
        if run_hi > run_lo:
            kept.append((run_lo, run_hi))
        run_lo = run_hi = -1
        kept.append(text + b"\n")
    if run_hi > run_lo:
        kept.append((run_lo, run_hi))
    return part


def _newlines(buf: Buffer, end: int) -> int:
    """The newlines in ``buf[:end]`` (the lines before a range), counted a block at a time (mmap has no count)."""
    if isinstance(buf, bytes):
        return buf.count(b"\n", 0, end)
    step = 1 << 20
    return sum(buf[k : min(end, k + step)].count(b"\n") for k in range(0, end, step))


Verdict = tuple[str, list[int], str | None, str | None]  # id, void turns, last final answer, the 'answer' field


def _reference_line(path: Path, number: int, raw: bytes, rules: ParseRules) -> tuple[Verdict, bytes] | None:
    """One line through the reference reader and judge; None for a blank line. Raises its InputError."""
    got = jsonl_line(path, number, raw)
    if got is None:
        return None
    traj = to_trajectory(path, number, got[0])
    verdict = judge_trajectory(traj, rules)
    return (traj.id, list(verdict.void_turns), verdict.final_answer, traj.answer), got[1].encode("utf-8")


def _shallow(value: Any, depth: int) -> bool:
    """Whether ``value``, sitting at level ``depth`` of a document, nests no deeper than MAX_DEPTH."""
    try:
        check_depth(value, depth)
    except JSONProblem:
        return False
    return True


def _fast_verdict(obj: Any, number: int, rules: ParseRules) -> Verdict | None:
    """The verdict of one decoded line, or None when the fast path cannot vouch for it (see the module doc)."""
    if type(obj) is not dict:
        return None
    messages = obj.get("messages")
    if type(messages) is not list:
        return None
    for value in obj.values():
        kind = type(value)
        if (kind is dict or kind is list) and value is not messages and not _shallow(value, 2):
            return None
    prompt = obj.get("prompt_messages")
    if prompt is None:
        prompt = 0
    elif type(prompt) is not int or not 0 <= prompt <= len(messages):
        return None  # the reference reader names the field
    void_turns: list[int] = []
    answers: list[str | Unsearched | None] = []  # per policy turn; the last answer is read only when needed
    given = 0  # the prompt's assistant messages: not judged, counted in the indexes of void_turns
    for k, m in enumerate(messages):
        if type(m) is not dict:
            return None
        role = m.get("role")
        content = m.get("content")
        if type(content) is not str:
            if content is not None:
                return None
            calls = _checked_calls(m)
        elif len(m) == 2 and role is not None:  # exactly role and content: the common message
            calls = ()
        else:
            calls = _checked_calls(m)
        if calls is None:
            return None
        if role == "assistant":
            if k < prompt:
                given += 1
                continue
            acts, answer = turn_acts(content, calls, rules)
            if not acts:
                void_turns.append(given + len(answers))
            answers.append(answer)
        elif type(role) is not str or role not in _OTHER_ROLES:
            return None
    return _fields(obj, number, void_turns, answers, given + len(answers), rules)


def _last_answer(answers: list[str | Unsearched | None], rules: ParseRules) -> str | None:
    """The last answer of a trajectory's assistant turns, searching the turns left unsearched from the end."""
    for answer in reversed(answers):
        if type(answer) is tuple:
            answer = answer_of(answer, rules)
        if answer is not None:
            return answer  # type: ignore[return-value]
    return None


def _checked_calls(m: dict[str, Any]) -> tuple[ToolCall, ...] | None:
    """A message's tool calls; None when the fast path cannot take the message.

    That is: extra keys nested too deep, a ``tool_call_id`` that is not a string or null, or ``tool_calls``
    neither null nor a list within the depth limit (``{}`` included: the reference reader refuses it).
    """
    if not m.keys() <= _MESSAGE_KEYS and not _shallow(m, 3):
        return None
    cid = m.get("tool_call_id")
    if cid is not None and type(cid) is not str:
        return None
    calls = m.get("tool_calls")
    if calls is None:
        return ()
    if type(calls) is not list or not (_flat_calls(calls) or _shallow(calls, 4)):
        return None
    return tuple([ToolCall.from_dict(c) for c in calls])


def _flat_calls(calls: list[Any]) -> bool:
    """True when every call is an object whose values are scalars or objects of scalars (the OpenAI shape).

    Such a list nests 3 levels deep, 6 counted from the document (within MAX_DEPTH); anything else is False
    and :func:`_shallow` decides, so this is only a faster way to the same answer.
    """
    for call in calls:
        if type(call) is not dict:
            return False
        for value in call.values():
            kind = type(value)
            if kind is list:
                return False
            if kind is dict:
                for inner in value.values():
                    if type(inner) is dict or type(inner) is list:
                        return False
    return True


def _fields(
    obj: dict[str, Any],
    number: int,
    void_turns: list[int],
    answers: list[str | Unsearched | None],
    assistant: int,
    rules: ParseRules,
) -> Verdict | None:
    """The top-level fields the verdict uses, when their decoded value is exact (else None: reference path).

    The last final answer is searched only where the verdict uses it: a void trajectory that has an ``answer``.
    """
    if not fields_ok(obj):  # a field of the wrong type: the reference reader refuses the line, naming the field
        return None
    if obj.get("termination") == _VOID and not void_turns:
        void_turns = [max(assistant - 1, 0)]  # the environment ended the episode as void (judge_trajectory)
    tid = obj.get("id", _ABSENT)
    if tid is _ABSENT:
        tid = f"line-{number}"
    elif type(tid) is int:
        tid = str(tid)
    elif type(tid) is not str:
        return None
    answer = obj.get("answer")
    if answer is not None and type(answer) is not str:
        if type(answer) is not int:
            return None
        answer = str(answer)
    final = _last_answer(answers, rules) if void_turns and answer is not None else None
    return tid, void_turns, final, answer


def reference_part(path: str | Path, rules: ParseRules, *, keep: bool = False) -> FilePart:
    """The plain loop that :func:`judge_file` must match: the one reader, typed objects, ``json.dumps`` lines."""
    part = FilePart()
    for _, traj, text in read_trajectory_lines(path):
        verdict = judge_trajectory(traj, rules)
        line = {"id": traj.id, "void": verdict.void, "void_turns": list(verdict.void_turns)}
        part.trajectories += 1
        part.verdicts.append(json.dumps(line) + "\n")
        part.with_answer += traj.answer is not None
        if verdict.void:
            part.void += 1
            if answers_match(verdict.final_answer, traj.answer):
                part.void_correct.append(traj.id)
        elif keep:
            part.kept.append((text + "\n").encode("utf-8"))
    return part
