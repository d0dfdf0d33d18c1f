"""Where swe-lite episodes go wrong: does the agent's first edit land in the function the issue names.

A swe-lite issue names the broken function (```count_over_score([5, 12], 6)` returns 1, but it should
return 2``), and the bug is on one of that function's lines. An agent that has not learned to *locate* it
edits another function of the same file — and RL cannot reward a fix it never samples in the right place.
:func:`edit_locality` reads each trajectory's messages and sorts it into one of :data:`PLACES`:

* ``inside``: its first line edit (``sed -i 'N s/…/…/'``, ``sed -i 'Nd'``…) is on a line of the named
  function;
* ``outside``: the first line edit is on another line of the file;
* ``beyond_listing``: the listings showed the function's start but not its end, and the edit is after the
  last line shown;
* ``unlisted``: it edited by line number, but no listing with line numbers (``cat -n``, ``grep -n``, ``nl``)
  that shows the function's ``def`` line came back before that edit;
* ``no_line_edit``: no ``sed -i`` with a line number (a ``python3`` rewrite, a pattern-only ``sed``, no edit).

A function's lines run from its ``def`` line to the line before the next line at the left margin (``def``,
``class`` or other module-level code), as the listings before the edit show them (the model sees no more
either); the output of ``sed -n 'A,Bp'`` counts as lines A… . When no listed line after the ``def`` is at the
left margin (``grep -n -A4`` may cut the function short), the span is open: an edit after its last listed
line is ``beyond_listing`` (it may be in the function or not), so neither ``inside`` nor ``outside`` is
overstated. Counted per
policy version (the training step's weights) and per bug class (read from swe-lite's task ids,
``swec-<package>-<function>-<class>-<line>``, ``swes-…`` for the spec curriculum), with the solved count of
each cell.

Not covered: edits by other tools (``python3`` scripts, ``patch``, ``ed``), files other than the one the
listing showed, and task files whose prompts name no function (a user's own repositories: the trajectory
counts under ``no_target``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tirl.envs.tasks.swe_curriculum import ID_PREFIXES
from tirl.envs.tasks.swe_templates import BUG_KINDS
from tirl.types import Role, Trajectory

PLACES: tuple[str, ...] = ("inside", "outside", "beyond_listing", "unlisted", "no_line_edit")
_TARGET = re.compile(r"`([A-Za-z_]\w*)\(")  # the first call the issue quotes
# line numbers of at most 9 digits: a hostile file's 5,000-digit "line number" is not one (int() would refuse it)
_LISTED = re.compile(r"^\s*(\d{1,9})(?:\t|:|-)(.*)$", re.M)  # cat -n (N<TAB>), grep -n (N: / N-), nl
_LINE_EDIT = re.compile(r"sed\s+-i\s+(?:-e\s+)?['\"]?(\d{1,9})\s*[sdcai]")
_DEF = re.compile(r"(?:async\s+)?def\s+(\w+)\s*\(|class\s+(\w+)\b")
_SED_PRINT = re.compile(r"sed\s+-n\s+['\"]?(\d{1,9})(?:,(\d{1,9}))?p")


@dataclass(frozen=True, slots=True)
class Span:
    """A function's lines in a listing: ``start`` (its ``def``) to ``end``.

    ``closed`` when a later left-margin line was listed; else ``end`` is only the last line shown.
    """

    start: int
    end: int
    closed: bool

    def place(self, line: int) -> str:
        """``inside``, ``outside`` or ``beyond_listing`` for an edit at ``line``."""
        if self.start <= line <= self.end:
            return "inside"
        return "beyond_listing" if line > self.end and not self.closed else "outside"


@dataclass(frozen=True, slots=True)
class EditPlace:
    """One trajectory: the named function, where its first line edit landed, whether it was solved."""

    id: str
    target: str | None
    place: str  # one of PLACES, or "no_target"
    first_edit_line: int | None
    span: Span | None  # the named function's lines as listed before the edit
    correct: bool


def _spans(listing: dict[int, str]) -> dict[str, Span]:
    """Each top-level function's :class:`Span` in a numbered listing."""
    spans: dict[str, Span] = {}
    current: str | None = None
    for number in sorted(listing):
        text = listing[number]
        if current is not None and (not text.strip() or text[:1].isspace()):
            spans[current] = Span(spans[current].start, number, closed=False)  # still open: its last line shown
            continue
        if current is not None:
            spans[current] = Span(spans[current].start, number - 1, closed=True)  # a left-margin line closes it
            current = None
        found = _DEF.match(text)
        if found and text.startswith(("def", "async", "class")):
            current = found.group(1) or found.group(2)
            spans[current] = Span(number, number, closed=False)
    return spans


def _sed_print_range(command: str) -> tuple[int, int] | None:
    """``(A, B)`` of a ``sed -n 'A,Bp'`` (or ``'Ap'``) command, else None."""
    found = _SED_PRINT.search(command)
    if found is None:
        return None
    first = int(found.group(1))
    return first, int(found.group(2) or first)


def place_of(traj: Trajectory) -> EditPlace:
    """Sort one trajectory into :data:`PLACES` (see the module docstring)."""
    prompt = next((m.content or "" for m in traj.messages if m.role is Role.USER), "")
    named = _TARGET.search(prompt)
    correct = bool(traj.correct)
    if named is None:
        return EditPlace(traj.id, None, "no_target", None, None, correct)
    target = named.group(1)
    listing: dict[int, str] = {}
    printed: tuple[int, int] | None = None  # the last command's sed -n range: its output's line numbers
    for message in traj.messages:
        if message.role is Role.TOOL:
            content = message.content or ""
            numbered = _LISTED.findall(content)
            if numbered:
                for number, text in numbered:
                    listing[int(number)] = text
            elif printed is not None:
                body = _output_lines(content)
                for offset, text in enumerate(body[: printed[1] - printed[0] + 1]):
                    listing[printed[0] + offset] = text
        elif message.role is Role.ASSISTANT:
            command = message.content or ""
            edit = _LINE_EDIT.search(command)
            printed = _sed_print_range(command)
            if edit is None:
                continue
            line = int(edit.group(1))
            span = _spans(listing).get(target)
            if span is None:
                return EditPlace(traj.id, target, "unlisted", line, None, correct)
            return EditPlace(traj.id, target, span.place(line), line, span, correct)
    return EditPlace(traj.id, target, "no_line_edit", None, None, correct)


def _output_lines(content: str) -> list[str]:
    """A tool message's output lines, without tirl's fence and status lines."""
    lines = content.split("\n")
    if lines and lines[0].startswith("```"):
        lines = lines[1:]
    if lines and lines[-1].startswith("```"):
        lines = lines[:-1]
    return [line for line in lines if not (line.startswith("[exit status") or line == "[no output]")]


def bug_class(traj: Trajectory) -> str | None:
    """The planted bug's class from a swe-lite task id in the trajectory's group (None for other tasks)."""
    group = traj.group or ""
    if not any(prefix in group for prefix in ID_PREFIXES):
        return None
    return next((kind for kind in BUG_KINDS if f"-{kind}-" in group), None)


@dataclass(slots=True)
class _Cell:
    places: Counter[str] = field(default_factory=Counter)
    solved: Counter[str] = field(default_factory=Counter)

    def add(self, item: EditPlace) -> None:
        self.places[item.place] += 1
        self.solved[item.place] += item.correct

    def to_dict(self) -> dict[str, Any]:
        order = [*PLACES, "no_target"]
        return {
            "trajectories": sum(self.places.values()),
            "solved": sum(self.solved.values()),
            **{p: {"count": self.places[p], "solved": self.solved[p]} for p in order if self.places[p]},
        }


def edit_locality(trajectories: list[Trajectory]) -> dict[str, Any] | None:
    """The ``edits`` section of ``tirl audit``: places in all, per policy version, per bug class.

    ``None`` when no trajectory names a function (not a swe-lite-style file). ``outside_share`` is
    ``outside / (inside + outside)``: of the first edits whose place is known, the share in the wrong function.
    """
    items = [(traj, place_of(traj)) for traj in trajectories]
    if all(item.place == "no_target" for _, item in items):
        return None
    total = _Cell()
    by_version: dict[int, _Cell] = defaultdict(_Cell)
    by_class: dict[str, _Cell] = defaultdict(_Cell)
    examples: dict[str, list[str]] = defaultdict(list)
    for traj, item in items:
        total.add(item)
        by_version[traj.policy_version].add(item)
        by_class[bug_class(traj) or "unknown"].add(item)
        if len(examples[item.place]) < 3:
            examples[item.place].append(item.id)
    known = total.places["inside"] + total.places["outside"]
    return {
        **total.to_dict(),
        "outside_share": round(total.places["outside"] / known, 4) if known else None,
        "by_policy_version": {str(v): by_version[v].to_dict() for v in sorted(by_version)},
        "by_bug_class": {k: by_class[k].to_dict() for k in sorted(by_class)},
        "examples": dict(examples),
    }


__all__ = ["PLACES", "EditPlace", "Span", "bug_class", "edit_locality", "place_of"]
