r"""The swe-lite copy curriculum: short expert episodes on synthetic packages with fresh names.

``tirl sft --env swe-lite --copy-steps N`` trains on these before the
demonstrations (:func:`tirl.sft_recipe._copy_warmup` picks this curriculum
for swe-lite, :func:`tirl.sft.copy_curriculum` for the others). The skill
they drill is the one the demonstrations alone did not teach tiny-tir
(docs/training.md, "The SWE job"): copying identifiers and numbers from the
context into a command, not recalling them. Each episode is a generated
package (:class:`~tirl.envs.tasks.swe_curriculum.Program`: three functions
from the real templates, one bug planted and checked by
:func:`~tirl.envs.tasks.swe_curriculum.program_task`) whose package and
function names are **fresh**: words with the curriculum's suffixes, never a
name of the pool (any split), so a name can only be copied. Half of the words
are uniformly random letters (:data:`RANDOM_LETTERS`), the others syllable
words: with syllable words alone tiny-tir copied a name's first one or two
characters and then wrote a word of its own (0/24 validation locate turns in a
short-context drill), with random letters in the mix it copied whole names
(8/24 exact, every one of the 8 greedy turns inspected a right command of
another of the expert's ways; docs/training.md). No fresh name is a Python
keyword, a builtin or a standard-library module (:func:`reserved_names`: a
package called ``json`` would shadow the real one in the workspace). The
episode is a prefix of the expert's script in the swe-lite chat format (the
env's system prompt, the issue text, ```` ```bash ```` turns, tool outputs
as the env writes them), ending at one of two copy turns:

* **locate** — from the issue text: ``grep -n "def <func>(" <pkg>/core.py``,
  ``grep -n -A<k> …`` or ``cat -n <pkg>/core.py``;
* **fix** — from the numbered lines a locate turn printed: ``sed -n 'a,bp'``
  after a bare grep, then the ``sed -i '<line>s/<bug>/<fix>/'`` edit (or the
  expert's small ``python3`` rewrite of the line).

Half of the episodes (:data:`SHORT_SHARE`) are **short**: the issue text, then
the locate turn, with no system prompt and no tool output (:func:`short_ids`).
A third of the others first run ``python3 check.py`` and read its
traceback. Loss mask 1 on the assistant turns only. The tool outputs are
computed here, not run (a test compares them with the real env's); a
traceback of a call that raises is not simulated, so such sites are skipped.

:func:`copy_check` measures the skill: on validation tasks (real pool names,
never trained on), whether greedy decoding would write each of the expert's
copy turns exactly, given the episode up to it (teacher forced: one forward
pass per turn). ``tirl sft --env swe-lite`` logs it before and after the warm-up, with the share of
the turns' tokens predicted right (each given the true tokens before it): the
skill shows there before whole turns come out exact.

Not covered: the detours of the expert script (pytest first, a wrong first
guess), the turns after the fix (check, submit) — the demonstrations teach those.
"""

from __future__ import annotations

import builtins
import functools
import keyword
import random
import string
import sys
from dataclasses import dataclass, field
from typing import Any

from tirl import ast_lock
from tirl.envs.base import Task
from tirl.envs.observation import NO_OUTPUT
from tirl.envs.tasks.swe_curriculum import SUFFIXES, SYLLABLES, Program, bug_of, program_task, programs
from tirl.envs.tasks.swe_experts import bash_turn, fix_command
from tirl.envs.tasks.swe_templates import TEMPLATES
from tirl.models.chat_format import ChatFormat
from tirl.types import Message, Role, Trajectory

#: English-like stems no template uses, so that fresh names are not all syllable words.
_STEMS = ("blend", "shift", "merge", "spread", "nudge", "twist", "crop", "grow", "mark", "pick", "sort_by",
          "join", "wrap", "lift", "skim", "tilt", "bump", "fuse", "stack", "probe")  # fmt: skip


@functools.lru_cache(maxsize=1)
def pool_names() -> frozenset[str]:
    """Every package and function name of the swe-lite pool (all splits): never used by the copy curriculum."""
    names = {p.package for p in programs()} | {f.name for p in programs() for f in p.funcs}
    names |= {name for _, stems in TEMPLATES for name in stems}
    return frozenset(names)


#: The share of fresh words that are uniformly random letters (the rest: syllable words).
RANDOM_LETTERS = 0.5


@functools.lru_cache(maxsize=1)
def reserved_names() -> frozenset[str]:
    """Python's keywords, soft keywords, builtins and standard-library modules: never a fresh name.

    A function named ``len`` would change what the module's other functions compute, a package named
    ``json`` would shadow the real module in the workspace. The module list is the running interpreter's
    (``sys.stdlib_module_names``; tirl pins CPython 3.11, so the curriculum is the same on every machine).
    """
    return frozenset({*keyword.kwlist, *keyword.softkwlist, *dir(builtins), *sys.stdlib_module_names})


def _word(r: random.Random, lo: int, hi: int) -> str:
    """A word of ``lo``-``hi`` syllables, or (with :data:`RANDOM_LETTERS`) of 3-9 uniformly random letters."""
    if r.random() < RANDOM_LETTERS:
        return "".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(3, 9)))
    return "".join(r.choice(SYLLABLES) for _ in range(r.randint(lo, hi)))


def _fresh(name: str) -> bool:
    return name.isidentifier() and name not in pool_names() and name not in reserved_names()


def fresh_package(r: random.Random) -> str:
    """A package name (3-4 syllables or random letters) that is no pool name and no reserved name."""
    while True:
        name = _word(r, 3, 4)
        if _fresh(name):
            return name


def fresh_function(r: random.Random, taken: set[str]) -> str:
    """A function name in the pool's style (a stem and a suffix) that is no pool name and not in ``taken``."""
    while True:
        style = r.randrange(4)
        stem = r.choice(_STEMS) if style == 0 else _word(r, 1, 3)
        if style == 2:
            stem = f"{stem}_{_word(r, 1, 2)}"
        name = stem + r.choice(SUFFIXES)
        if style == 3:
            name = "is_" + name
        if _fresh(name) and name not in taken:
            taken.add(name)
            return name


def fresh_program(r: random.Random) -> Program:
    """A package of three template functions under fresh names."""
    taken: set[str] = set()
    funcs = tuple(template(r, fresh_function(r, taken)) for template, _ in r.sample(TEMPLATES, 3))
    return Program(-1, fresh_package(r), funcs, "train")


def _numbered(text: str) -> list[str]:
    """The module's lines as ``cat -n`` and ``grep -n`` count them (no line after the final newline)."""
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")


def check_traceback(check: str, fi: int, got: str) -> str:
    """What ``python3 check.py`` prints when function ``fi``'s assert fails with value ``got`` (its ``str``)."""
    line = check.split("\n")[2 + fi]
    body = line[len("assert ") :]  # "<call> == <expected>, <call>"
    cut = next(i for i in range(len(body)) if body[i:].startswith(" == ") and body.endswith(", " + body[:i]))
    compared = body[: len(body) - cut - 2]
    return (
        f'Traceback (most recent call last):\n  File "/work/check.py", line {3 + fi}, in <module>\n'
        f"    {line}\n           {'^' * len(compared)}\nAssertionError: {got}\n[exit status 1]"
    )


def locate_output(lines: list[str], function: str, after: int | None) -> str:
    """``grep -n [-A<after>] "def <function>(" FILE``'s output (one match)."""
    first = next(i for i, text in enumerate(lines) if text.startswith(f"def {function}("))
    out = [f"{first + 1}:{lines[first]}"]
    for i in range(first + 1, min(len(lines), first + 1 + (after or 0))):
        out.append(f"{i + 1}-{lines[i]}")
    return "\n".join(out)


def cat_output(lines: list[str]) -> str:
    """``cat -n FILE``'s output."""
    return "\n".join(f"{i + 1:6d}\t{text}" for i, text in enumerate(lines))


def expert_turns(task: Task, way: int, *, check: bool, python: bool) -> list[tuple[str, str]]:
    """The expert's turns up to its fix with the outputs the env shows: ``[(assistant turn, tool output), ...]``.

    ``way``: 0 ``cat -n``, 1 a bare ``grep -n`` then ``sed -n 'a,bp'``, 2 ``grep -n -A<k>`` (the expert's
    three ways to locate); ``check``: run ``python3 check.py`` first (its call must return, not raise);
    ``python``: the fix as the expert's ``python3`` rewrite instead of ``sed -i``. The fix's output is last.
    """
    bug = bug_of(task)
    module = str(task.data["module"])
    lines = _numbered(task.data["files"][module])
    turns: list[tuple[str, str]] = []
    if check:
        shown = task.prompt.split(" returns ", 1)[1].split(", but it should return ", 1)[0]
        got = str(ast_lock.literal_eval(shown))  # the prompt shows the repr, the AssertionError its str
        asserts = task.data["files"]["check.py"].split("\n")[2:]
        fi = next(i for i, text in enumerate(asserts) if text.startswith(f"assert {bug.function}("))
        turns.append((bash_turn("python3 check.py"), check_traceback(task.data["files"]["check.py"], fi, got)))
    last = bug.first_line + bug.length - 1
    if way == 0:
        turns.append((bash_turn(f"cat -n {module}"), cat_output(lines)))
    elif way == 1:
        turns.append((bash_turn(f'grep -n "def {bug.function}(" {module}'), locate_output(lines, bug.function, 0)))
        sed_n = "\n".join(lines[bug.first_line - 1 : last])
        turns.append((bash_turn(f"sed -n '{bug.first_line},{last}p' {module}"), sed_n))
    else:
        shown = locate_output(lines, bug.function, bug.length - 1)
        turns.append((bash_turn(f'grep -n -A{bug.length - 1} "def {bug.function}(" {module}'), shown))
    turns.append((bash_turn(fix_command(bug, module, python=python)), "fixed" if python else NO_OUTPUT))
    return turns


def copy_episode(r: random.Random) -> tuple[Task, list[tuple[str, str]]]:
    """One synthetic task and its episode: the expert's turns (:func:`expert_turns`) up to a copy turn.

    Half end at the locate turn (a bare grep: at its ``sed -n``), half at the fix; the last pair's
    output is not part of the episode.
    """
    while True:
        program = fresh_program(r)
        fi = r.randrange(3)
        task = program_task(program, fi, r.choice(program.funcs[fi].sites))
        if task is not None and " returns " in task.prompt:  # a raising call's traceback is not simulated
            break
    way = r.randrange(3)
    turns = expert_turns(task, way, check=r.random() < 1 / 3, python=r.random() < 0.25)
    if r.random() < 0.5:  # a locate episode
        turns = turns[:-1]
    return task, turns


def episode_ids(chat: ChatFormat, issue: str, turns: list[tuple[str, str]]) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of ``[system, user: issue]`` then the turns, as the agent loop writes them.

    Every turn but the last is followed by its tool output; loss mask 1 on the assistant turns only.
    """
    from tirl.envs.observation import wrap_output
    from tirl.envs.swe_lite import DEFAULT_SYSTEM_PROMPT

    ids = chat.prompt_ids(
        [Message(role=Role.SYSTEM, content=DEFAULT_SYSTEM_PROMPT), Message(role=Role.USER, content=issue)]
    )
    mask = [0] * len(ids)
    for i, (turn, output) in enumerate(turns):
        turn_ids = chat.assistant_ids(turn)
        ids += turn_ids
        mask += [1] * len(turn_ids)
        if i < len(turns) - 1:
            obs = chat.observation_ids([Message(role=Role.TOOL, content=wrap_output(output))], turn_ids)
            ids += obs
            mask += [0] * len(obs)
    return ids, mask


#: The share of copy episodes that are short: the issue, then the locate turn, nothing else (:func:`short_ids`).
SHORT_SHARE = 0.5


def short_ids(chat: ChatFormat, issue: str, turn: str) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of ``[user: issue]`` then one assistant ``turn`` (no system prompt, no tool output).

    The short episodes are where tiny-tir learned to copy a whole name (a scratch drill of them took validation
    locate turns from 0/24 to 8/24 exact, docs/training.md): a name copy per ~220 characters instead of per
    ~700, with nothing between the name and its copy.
    """
    ids = chat.prompt_ids([Message(role=Role.USER, content=issue)])
    turn_ids = chat.assistant_ids(turn)
    return ids + turn_ids, [0] * len(ids) + [1] * len(turn_ids)


def locate_turn(turns: list[tuple[str, str]]) -> str:
    """The expert's locate turn of ``turns`` (the first turn after an optional ``python3 check.py``)."""
    return turns[1][0] if turns[0][0] == bash_turn("python3 check.py") else turns[0][0]


def swe_copy_curriculum(
    n: int, chat: ChatFormat, *, seed: int = 0, short_share: float = SHORT_SHARE
) -> list[Trajectory]:
    """``n`` synthetic swe-lite copy episodes as token ids, loss mask 1 on the assistant turns (deterministic).

    ``short_share`` of them (default :data:`SHORT_SHARE`; 1 = a short-context drill) are short
    (:func:`short_ids`), the others the episode prefixes of :func:`copy_episode` in the env's full format
    (:func:`episode_ids`). The same ``seed`` draws the same tasks whatever the share.
    """
    if not 0.0 <= short_share <= 1.0:
        raise ValueError(f"short_share={short_share}: use a value in 0..1")
    rng = random.Random(f"swe-copy/{seed}")
    out: list[Trajectory] = []
    for i in range(n):
        task, turns = copy_episode(rng)
        traj = Trajectory(id=f"swe-copy-{i}", messages=[])
        if rng.random() < short_share:
            traj.token_ids, traj.loss_mask = short_ids(chat, task.prompt, locate_turn(turns))
        else:
            traj.token_ids, traj.loss_mask = episode_ids(chat, task.prompt, turns)
        traj.logprobs = [0.0] * len(traj.token_ids)
        out.append(traj)
    return out


def greedy_hits(logits: Any, ids: list[int], start: int) -> int:
    """How many of ``ids[start:]`` greedy decoding gets right when fed the true tokens before each (teacher forced).

    ``logits`` has one row per position of ``ids``; row ``i - 1`` predicts token ``i``, so this counts the
    ``i >= start`` where the argmax of row ``i - 1`` is ``ids[i]``. All of them right: greedy decoding from
    ``ids[:start]`` writes exactly ``ids[start:]``.
    """
    import torch

    want = torch.tensor(ids[start:], device=logits.device)
    return int((logits[start - 1 : len(ids) - 1].argmax(-1) == want).sum())


#: The copy turns :func:`copy_check` asks for: the locate turn (from the issue), a bare grep's ``sed -n``, the fix.
COPY_KINDS = ("locate", "sed -n", "fix")


@dataclass
class CopyCheck:
    """:func:`copy_check`'s counts per turn kind: (written exactly, asked) and (tokens right, tokens)."""

    counts: dict[str, list[int]] = field(default_factory=lambda: {k: [0, 0] for k in COPY_KINDS})
    tokens: dict[str, list[int]] = field(default_factory=lambda: {k: [0, 0] for k in COPY_KINDS})

    def rate(self, kind: str) -> float:
        """The share of ``kind``'s turns written exactly (0 when none was asked)."""
        hit, asked = self.counts[kind]
        return hit / asked if asked else 0.0

    def token_rate(self, kind: str) -> float:
        """The share of ``kind``'s turn tokens predicted right, each given the true tokens before it."""
        hit, total = self.tokens[kind]
        return hit / total if total else 0.0

    def line(self) -> str:
        """One log line: ``locate 3/12 (tokens 91%) · sed -n 0/4 (tokens 80%) · fix 1/12 (tokens 75%)``."""
        return " · ".join(f"{k} {h}/{n} (tokens {self.token_rate(k):.0%})" for k, (h, n) in self.counts.items())


#: The validation draw of :func:`copy_check` that ``tirl sft`` logs, whatever the run's ``--seed``.
COPY_CHECK_SEED = 0


def copy_check(model: Any, chat: ChatFormat, n: int = 12, *, seed: int = COPY_CHECK_SEED) -> CopyCheck:
    """Teacher-forced greedy exact match of the expert's copy turns on ``n`` validation tasks.

    Task ``k`` follows the expert's way ``k % 3`` (``cat -n``, a bare grep then ``sed -n``, ``grep -n -A``),
    half of them after ``python3 check.py``; every turn after the check is asked, given the episode before it
    (the tool outputs as :func:`expert_turns` computes them). The locate turn may be any of the three ways (the
    expert picks one at random, so none is the right one): it counts as exact when one of them is, and its
    tokens are the best way's. Only tasks whose issue shows a return value (the simulated traceback needs one).
    The model runs in eval mode under ``no_grad``; its mode is restored.
    """
    import torch

    from tirl.envs.tasks.swe_curriculum import generate_curriculum

    tasks = [t for t in generate_curriculum(max(4 * n, 40), seed=seed, split="validation") if " returns " in t.prompt]
    result = CopyCheck()
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device

    def asked(turns: list[tuple[str, str]], j: int, issue: str) -> tuple[int, int]:
        ids, _ = episode_ids(chat, issue, turns[: j + 1])
        start = len(ids) - len(chat.assistant_ids(turns[j][0]))
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0]
        return greedy_hits(logits, ids, start), len(ids) - start

    def count(kind: str, hits: int, total: int) -> None:
        result.counts[kind][0] += hits == total
        result.counts[kind][1] += 1
        result.tokens[kind][0] += hits
        result.tokens[kind][1] += total

    try:
        with torch.no_grad():
            for k, task in enumerate(tasks[:n]):
                check = k % 2 == 1
                first = 1 if check else 0
                ways = [expert_turns(task, way, check=check, python=False) for way in range(3)]
                count("locate", *max((asked(w, first, task.prompt) for w in ways), key=lambda h: h[0] / h[1]))
                turns = ways[k % 3]
                for j in range(first + 1, len(turns)):
                    count("fix" if j == len(turns) - 1 else "sed -n", *asked(turns, j, task.prompt))
    finally:
        model.train(was_training)
    return result


__all__ = [
    "COPY_CHECK_SEED",
    "COPY_KINDS",
    "RANDOM_LETTERS",
    "SHORT_SHARE",
    "CopyCheck",
    "check_traceback",
    "copy_check",
    "copy_episode",
    "episode_ids",
    "expert_turns",
    "fresh_program",
    "greedy_hits",
    "locate_turn",
    "pool_names",
    "reserved_names",
    "short_ids",
    "swe_copy_curriculum",
]
