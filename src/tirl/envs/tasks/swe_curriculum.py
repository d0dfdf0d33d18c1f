"""The swe-lite curriculum: generated packages with one planted bug each, in three disjoint splits.

A *program* is a one-module package ``<pkg>/core.py`` of three functions drawn
from :data:`~tirl.envs.tasks.swe_templates.TEMPLATES` (names and constants at
random). A *task* plants one bug in one function: one of
:data:`~tirl.envs.tasks.swe_templates.BUG_KINDS` — wrong operator,
off-by-one, swapped arguments, wrong constant, inverted condition, missing
return. The workspace holds the package and a visible ``check.py`` (plain
asserts, one per function, runnable with ``python3 check.py``: pytest is not
in the sandbox) whose assert on the buggy function fails; the hidden tests
(``test_hidden.py``: six calls per function and its ``probes``, so that no bug
shows on the prompt's quoted call alone; expected values computed by running
the correct code) are only ever in the template's ``hidden`` directory, which
the judge stages after the episode.

Every site is checked when the pool is built, by running the correct and the
buggy code in this process (our own code, not the model's): the correct code
passes the check and the hidden tests, the buggy code fails both, and the
issue text (the prompt) quotes the failing call with what it returned and what
it should return. A site that fails any of this is left out.

Splits: :data:`POOL_PROGRAMS` programs are built from fixed seeds; program
``i`` goes to ``heldout`` when ``i % 10`` is 0 or 1, ``validation`` when it
is 2 or 3, else ``train``. A held-out or validation task whose buggy
function (text and bug) also occurs in an earlier split is dropped, so the
splits are disjoint by program and by bug. :func:`split_for_seed` maps the
trainer's evaluation and validation seeds (:mod:`tirl.trainer.wiring`) to
their splits and every other seed (training steps, SFT) to ``train``.

The spec curriculum (``env.difficulty=3``, ``pools(spec=True)``): the same programs, bugs, splits and
prompts, with one docstring line in each function that quotes the correct text of its bug sites
(:func:`~tirl.envs.tasks.swe_templates.with_spec`); the bug never touches it, so every class's fix can be
read in the file (in the plain curriculum a wrong constant or operator cannot: the value is nowhere).

Expert scripts: :mod:`tirl.envs.tasks.swe_experts`.

Not covered: bugs that need more than one edit, several modules, programs
other than the templates' (the pool is a fixed, finite set; sizes are in
docs/envs.md).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, replace
from typing import Any, Literal

from tirl.envs.base import Task
from tirl.envs.tasks.swe_templates import BUG_KINDS, TEMPLATES, Func, Site, with_spec

KIND = "swe-lite"
#: ``env.difficulty`` from which swe-lite draws the spec curriculum (2: the plain one; 1: the 33 planted bugs)
SPEC_DIFFICULTY = 3
#: The task-id prefixes of the plain and the spec curriculum
ID_PREFIXES = ("swec-", "swes-")
POOL_PROGRAMS = 300
FUNCS_PER_PROGRAM = 3
Split = Literal["train", "heldout", "validation"]
SPLITS: tuple[Split, ...] = ("train", "heldout", "validation")

#: Suffixes and syllables of the generated names (the copy curriculum, :mod:`tirl.sft_swe_copy`, draws fresh
#: names from the same alphabet).
SUFFIXES = ("", "_total", "_value", "_score", "_count", "_item", "_data", "_price", "_size", "_level")
SYLLABLES = ("ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "za", "bo", "de", "fi", "gu", "ha", "jo")


@dataclass(frozen=True, slots=True)
class Program:
    """A generated package: its name, its three correct functions, and its split."""

    index: int
    package: str
    funcs: tuple[Func, ...]
    split: Split

    @property
    def module_path(self) -> str:
        """The module that holds the functions, relative to the repository root."""
        return f"{self.package}/core.py"

    def source(self, buggy: tuple[int, Site] | None = None) -> str:
        """The module's text, with ``buggy = (function index, site)`` planted when given."""
        out = [f'"""Helpers of the {self.package} package."""', ""]
        for i, func in enumerate(self.funcs):
            lines = list(func.lines)
            if buggy is not None and buggy[0] == i:
                at = func.site_line(buggy[1])
                if buggy[1].kind == "missing_return":
                    del lines[at]
                else:
                    lines[at] = lines[at].replace(buggy[1].old, buggy[1].new, 1)
            out += ["", *lines, ""]
        return "\n".join(out)


@dataclass(frozen=True, slots=True)
class Bug:
    """Where a task's bug is, for the expert: the 1-based line in the buggy module and the texts.

    ``line`` holds ``new`` (the buggy text), which ``old`` fixes; for ``missing_return`` ``line`` is the
    line *after which* ``old`` (the whole return line) goes back, and ``new`` is empty.
    """

    kind: str
    function: str
    line: int
    old: str
    new: str
    decoy: str | None
    first_line: int  # the function's ``def`` line
    length: int  # the function's line count in the buggy module


def _package_name(r: random.Random, taken: set[str]) -> str:
    while True:
        name = "".join(r.choice(SYLLABLES) for _ in range(3))
        if name not in taken:
            taken.add(name)
            return name


def _split_of(index: int) -> Split:
    return "heldout" if index % 10 < 2 else ("validation" if index % 10 < 4 else "train")


@functools.lru_cache(maxsize=1)
def programs() -> tuple[Program, ...]:
    """The :data:`POOL_PROGRAMS` programs of the pool (fixed: the same on every machine)."""
    taken: set[str] = set()
    out = []
    for i in range(POOL_PROGRAMS):
        r = random.Random(f"swe-curriculum/{i}")
        package = _package_name(r, taken)
        funcs = tuple(
            template(r, r.choice(names) + r.choice(SUFFIXES))
            for template, names in r.sample(TEMPLATES, FUNCS_PER_PROGRAM)
        )
        out.append(Program(i, package, funcs, _split_of(i)))
    return tuple(out)


def _call(ns: dict[str, Any], expr: str) -> tuple[bool, Any]:
    """``(True, value)`` of ``expr`` in ``ns``, or ``(False, 'raises X')``."""
    try:
        return True, eval(expr, ns)
    except Exception as exc:
        return False, f"raises {type(exc).__name__}"


def _namespace(source: str, package: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": f"{package}.core"}
    exec(compile(source, f"{package}/core.py", "exec"), ns)
    return ns


def _show(outcome: tuple[bool, Any]) -> str:
    return repr(outcome[1]) if outcome[0] else outcome[1]


def check_script(program: Program, calls: list[str], expected: list[Any]) -> str:
    """The visible ``check.py``: one assert per function (its failure message is the value it got)."""
    names = ", ".join(f.name for f in program.funcs)
    lines = [f"from {program.package}.core import {names}", ""]
    lines += [f"assert {c} == {e!r}, {c}" for c, e in zip(calls, expected, strict=True)]
    return "\n".join([*lines, 'print("all checks passed")', ""])


def hidden_tests(program: Program, ns: dict[str, Any]) -> str:
    """``test_hidden.py``: one test per function, its six calls and its probes against the correct code's values."""
    names = ", ".join(f.name for f in program.funcs)
    out = [f"from {program.package} import {names}", ""]
    for func in program.funcs:
        out += ["", f"def test_{func.name}():"]
        for case in (*func.cases, *func.probes):
            call = f"{func.name}({case})"
            out.append(f"    assert {call} == {eval(call, ns)!r}")
    return "\n".join([*out, ""])


def _bug(program: Program, fi: int, site: Site, buggy: str) -> Bug:
    func = program.funcs[fi]
    lines = buggy.split("\n")
    first = lines.index(func.lines[0]) + 1
    at = first + func.site_line(site)  # 1-based line of the site in the buggy module
    length = len(func.lines) - (1 if site.kind == "missing_return" else 0)
    if site.kind == "missing_return":
        return Bug(site.kind, func.name, at - 1, site.old, "", None, first, length)
    return Bug(site.kind, func.name, at, site.old, site.new, site.decoy, first, length)


def _task(program: Program, fi: int, site: Site, ns: dict[str, Any], prefix: str = ID_PREFIXES[0]) -> Task | None:
    """The task of one site, or None when the check or the hidden tests would not catch it."""
    func = program.funcs[fi]
    buggy = program.source((fi, site))
    try:
        bad = _namespace(buggy, program.package)
    except SyntaxError:
        return None
    calls = [f"{func.name}({case})" for case in func.cases]
    wrong = [c for c in calls if _call(bad, c) != _call(ns, c)]
    if not wrong:
        return None
    visible = [wrong[0] if i == fi else f"{f.name}({f.cases[0]})" for i, f in enumerate(program.funcs)]
    expected = [eval(c, ns) for c in visible]
    got, want = _show(_call(bad, wrong[0])), repr(expected[fi])
    if site.decoy is not None:
        decoyed = buggy.split("\n")
        b = _bug(program, fi, site, buggy)
        decoyed[b.line - 1] = decoyed[b.line - 1].replace(site.new, site.decoy, 1)
        decoy_ns = _namespace("\n".join(decoyed), program.package)
        if _call(decoy_ns, wrong[0]) == _call(ns, wrong[0]):  # the wrong fix must visibly stay wrong
            site = Site(site.kind, site.old, site.new, None)
    bug = _bug(program, fi, site, buggy)
    prompt = (
        f"`python3 check.py` fails in the `{program.package}` package: `{wrong[0]}` returns {got}, "
        f"but it should return {want}. Fix the bug in {program.module_path}, then submit."
    )
    if got.startswith("raises"):
        prompt = prompt.replace(f"returns {got}", got)
    files = {
        f"{program.package}/__init__.py": f"from {program.package}.core import *  # noqa: F403\n",
        program.module_path: buggy,
        "check.py": check_script(program, visible, expected),
    }
    return Task(
        id=f"{prefix}{program.package}-{func.name}-{site.kind}-{func.site_line(site)}",
        prompt=prompt,
        kind=KIND,
        data={
            "files": files,
            "hidden_tests": {"test_hidden.py": hidden_tests(program, ns)},
            "module": program.module_path,
            "program": program.package,
            "curriculum": program.split,
            "bug": {
                "kind": bug.kind,
                "function": bug.function,
                "line": bug.line,
                "old": bug.old,
                "new": bug.new,
                "decoy": bug.decoy,
                "first_line": bug.first_line,
                "length": bug.length,
            },
        },
    )


def program_task(program: Program, fi: int, site: Site) -> Task | None:
    """The task of one bug site of any program (the pool's or one made elsewhere), or None when the checks miss it.

    The same construction as the pool's tasks (:func:`pools`); :mod:`tirl.sft_swe_copy` makes its
    synthetic programs with fresh names through it.
    """
    return _task(program, fi, site, _namespace(program.source(), program.package))


def bug_of(task: Task) -> Bug:
    """The :class:`Bug` of a curriculum task (``ValueError`` for any other task)."""
    data = task.data.get("bug")
    if not isinstance(data, dict) or "curriculum" not in task.data:
        raise ValueError(f"task {task.id!r} is not a swe-lite curriculum task (no planted bug recorded)")
    return Bug(**data)


def _bug_key(task: Task) -> tuple[str, str]:
    """What makes a bug the same bug: the buggy function's text and the bug kind."""
    bug = bug_of(task)
    lines = task.data["files"][task.data["module"]].split("\n")
    return "\n".join(lines[bug.first_line - 1 : bug.first_line - 1 + bug.length]), bug.kind


def spec_program(program: Program) -> Program:
    """``program`` with a spec docstring in each function (:func:`~tirl.envs.tasks.swe_templates.with_spec`)."""
    return replace(program, funcs=tuple(with_spec(f) for f in program.funcs))


@functools.lru_cache(maxsize=2)
def pools(spec: bool = False) -> dict[Split, tuple[Task, ...]]:
    """Every task of the curriculum by split (built once per process and variant; about a second).

    ``spec``: the spec curriculum (``env.difficulty=3``): the same programs and bugs, each function with a
    docstring quoting the correct text of its bug sites; task ids start ``swes-`` instead of ``swec-``.
    """
    out: dict[Split, list[Task]] = {s: [] for s in SPLITS}
    seen: set[tuple[str, str]] = set()
    prefix = ID_PREFIXES[spec]
    for split in SPLITS:  # train first: a later split drops what an earlier one has
        for program in (spec_program(p) if spec else p for p in programs() if p.split == split):
            ns = _namespace(program.source(), program.package)
            prompts: set[str] = set()
            for fi, func in enumerate(program.funcs):
                for site in func.sites:
                    task = _task(program, fi, site, ns, prefix)
                    if task is None or task.prompt in prompts or (split != "train" and _bug_key(task) in seen):
                        continue
                    prompts.add(task.prompt)
                    out[split].append(task)
        seen |= {_bug_key(t) for t in out[split]}
    return {s: tuple(v) for s, v in out.items()}


def generate_curriculum(
    n: int, *, seed: int = 0, split: Split = "train", kinds: tuple[str, ...] | None = None, spec: bool = False
) -> list[Task]:
    """``n`` tasks of ``split``, deterministic in ``seed``; cycles through the split before repeating.

    ``spec``: the spec curriculum's tasks (:func:`pools`); the same seed draws the same bugs in the same order.
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    if kinds is not None and set(kinds) - set(BUG_KINDS):
        raise ValueError(f"unknown bug kinds {sorted(set(kinds) - set(BUG_KINDS))}; choose from {', '.join(BUG_KINDS)}")
    pool = [t for t in pools(spec)[split] if kinds is None or t.data["bug"]["kind"] in kinds]
    rng = random.Random(f"swe-curriculum/{split}/{seed}")
    tasks: list[Task] = []
    order: list[int] = []
    for i in range(n):
        if not order:
            order = list(range(len(pool)))
            rng.shuffle(order)
        t = pool[order.pop()]
        tasks.append(Task(id=f"{t.id}-s{seed}-{i}", prompt=t.prompt, answer=None, kind=KIND, data=t.data))
    return tasks


def split_for_seed(seed: int, env_seed: int = 0) -> Split:
    """The split the trainer means by a generation seed: its held-out and validation seeds, else ``train``."""
    from tirl.envs.seeds import eval_seed, validation_seed

    if seed == eval_seed(env_seed):
        return "heldout"
    if seed == validation_seed(env_seed):
        return "validation"
    return "train"


__all__ = [
    "ID_PREFIXES",
    "KIND",
    "POOL_PROGRAMS",
    "SPEC_DIFFICULTY",
    "SPLITS",
    "SUFFIXES",
    "SYLLABLES",
    "Bug",
    "Program",
    "bug_of",
    "generate_curriculum",
    "pools",
    "program_task",
    "programs",
    "spec_program",
    "split_for_seed",
]
