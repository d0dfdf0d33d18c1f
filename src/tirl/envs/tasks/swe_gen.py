"""swe-lite tasks: a planted-bug generator, a JSONL loader of local repositories, scripted fixes.

Generated task ``data``: ``files`` (repository files, path -> text),
``hidden_tests`` (test files, path -> text, never copied into the workspace
before evaluation), ``module`` (the file with the bug), ``mutation`` (kind,
original, mutated). The prompt is an issue report that quotes a call whose
result is wrong, computed by running the correct and the buggy code
in-process (our own code, not the model's).

JSONL task file, one object per line::

    {"id": "calc-1", "repo": "/abs/path/to/repo", "prompt": "Fix ...", "hidden_tests": "/abs/path/to/tests"}

``repo`` and ``prompt`` are required, and ``hidden_tests`` (a directory of
pytest files) or ``test_command`` or both. Hidden tests without a command are
run by the judge (:mod:`tirl.envs.scorer`), whose verdict the agent's code
cannot forge; a ``test_command`` runs with bash in the workspace (after
``hidden_tests`` is copied there under its own name) and its verdict is only as
trustworthy as the command. ``id`` is optional. Relative paths are relative to
the JSONL file. ``hidden_tests`` inside ``repo`` (or ``repo`` inside it) is refused: the
workspace is a copy of the repository. So is a judged repository whose package the judge imports from
its own copy (``tomli``, ``statistics``: the standard library, pytest and its dependencies).
:func:`repo_fields` makes these checks (SkyRL-style rows reuse them: :mod:`tirl.integrations.skyrl_swe`).
"""

from __future__ import annotations

import functools
import random
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.envs.base import Task
from tirl.envs.tasks.jsonl import read_jsonl, require_str
from tirl.envs.tasks.swe_programs import MUTATION_KINDS, PROGRAMS, Mutation, Program
from tirl.errors import InputError

KIND = "swe-lite"


def _load(program: Program, source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"{program.package}.core"}
    exec(compile(source, program.module_path, "exec"), namespace)
    return namespace


def _describe_call(program: Program, source: str, call: str) -> str:
    try:
        value = eval(call, _load(program, source))
    except Exception as exc:
        return f"raises {type(exc).__name__}({str(exc)!r})"
    return f"returns {value!r}"


@functools.cache  # a pure function of two frozen values; the 33 built-in cases repeat across every task drawn
def issue_text(program: Program, mutation: Mutation) -> str:
    """The bug report for ``mutation`` of ``program`` (runs both versions of the program once per case)."""
    buggy = program.source.replace(mutation.original, mutation.mutated, 1)
    got = _describe_call(program, buggy, mutation.example)
    want = _describe_call(program, program.source, mutation.example)
    return (
        f"Bug in the `{program.package}` package ({program.module_path}): `{mutation.example}` {got}, "
        f"but it should {want.replace('returns', 'return').replace('raises', 'raise')}. Fix the code."
    )


def run_hidden_in_process(program: Program, source: str) -> tuple[int, int]:
    """Run the hidden tests against ``source`` in this process: ``(passed, failed)`` (for self-checks)."""
    package = types.ModuleType(program.package)
    core = types.ModuleType(f"{program.package}.core")
    saved = {name: sys.modules.get(name) for name in (program.package, core.__name__)}
    passed = failed = 0
    try:
        exec(compile(source, program.module_path, "exec"), core.__dict__)
        package.__dict__.update({k: v for k, v in core.__dict__.items() if not k.startswith("__")})
        sys.modules[program.package] = package
        sys.modules[core.__name__] = core
        tests: dict[str, Any] = {}
        exec(compile(program.tests, "test_hidden.py", "exec"), tests)
        for name, fn in tests.items():
            if name.startswith("test_") and callable(fn):
                try:
                    fn()
                    passed += 1
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException:  # pytest.fail / DID NOT RAISE derive from BaseException
                    failed += 1
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return passed, failed


def _anchored_patch(source: str, buggy: str, mutation: Mutation) -> tuple[str, str]:
    """``(old, new)`` texts that undo the mutation: the mutated text with enough preceding context to be unique."""
    idx = source.index(mutation.original)
    start = idx
    while True:
        old = buggy[start : idx + len(mutation.mutated)]
        if old.strip() and buggy.count(old) == 1:
            return old, source[start : idx + len(mutation.original)]
        if start == 0:
            raise ValueError(f"cannot anchor the fix of {mutation!r}")
        start = source.rfind("\n", 0, start - 1) + 1


def make_task(program: Program, mutation: Mutation, task_id: str) -> Task:
    """The task of one planted bug."""
    if program.source.count(mutation.original) != 1:
        raise ValueError(f"{program.package}: mutation site {mutation.original!r} is not unique")
    buggy = program.source.replace(mutation.original, mutation.mutated, 1)
    patch_old, patch_new = _anchored_patch(program.source, buggy, mutation)
    files = {
        f"{program.package}/__init__.py": f"from {program.package}.core import *  # noqa: F403\n",
        program.module_path: buggy,
        "README.md": f"# {program.package}\n\n{issue_text(program, mutation)}\n",
    }
    return Task(
        id=task_id,
        prompt=issue_text(program, mutation),
        kind=KIND,
        data={
            "files": files,
            "hidden_tests": {"test_hidden.py": program.tests},
            "module": program.module_path,
            "program": program.package,
            "mutation": {
                "kind": mutation.kind,
                "original": mutation.original,
                "mutated": mutation.mutated,
                "patch_old": patch_old,  # the buggy text with unique context; patch_new is its fix
                "patch_new": patch_new,
            },
        },
    )


def all_cases(kinds: tuple[str, ...] | None = None) -> list[tuple[Program, Mutation]]:
    """Every (program, mutation) pair, optionally only of the given kinds."""
    if kinds is not None:
        unknown = set(kinds) - set(MUTATION_KINDS)
        if unknown:
            raise ValueError(f"unknown mutation kinds {sorted(unknown)}; choose from {', '.join(MUTATION_KINDS)}")
    return [(p, m) for p in PROGRAMS for m in p.mutations if kinds is None or m.kind in kinds]


def generate_swe_tasks(n: int, *, seed: int = 0, kinds: tuple[str, ...] | None = None) -> list[Task]:
    """``n`` planted-bug tasks, deterministic in ``seed``; cycles through all cases before repeating."""
    cases = all_cases(kinds)
    rng = random.Random(f"swe-lite/{seed}")
    tasks: list[Task] = []
    order: list[int] = []
    for i in range(n):
        if not order:
            order = list(range(len(cases)))
            rng.shuffle(order)
        program, mutation = cases[order.pop()]
        tasks.append(make_task(program, mutation, f"swe-s{seed}-{i}-{program.package}-{mutation.kind}"))
    return tasks


@dataclass(frozen=True, slots=True)
class RepoFields:
    """A user repository task's checked paths and command (``hidden_tests`` alone: judged by the scorer)."""

    repo: Path
    hidden_tests: Path | None
    test_command: str | None

    def data(self) -> dict[str, Any]:
        """The swe-lite ``Task.data`` of these fields (what :func:`tirl.envs.workspace.materialise` reads)."""
        hidden = None if self.hidden_tests is None else str(self.hidden_tests)
        return {"repo": str(self.repo), "test_command": self.test_command, "hidden_tests": hidden}


def repo_fields(
    obj: dict[str, Any], path: str | Path, line: int | None, *, prefix: str = "", at: str = ""
) -> RepoFields:
    """Check ``repo``, ``hidden_tests`` and ``test_command`` of one task object (paths relative to ``path``).

    ``prefix`` names where the fields sit in the row (``"extra_info."`` for a SkyRL-style row) and ``at``
    prefixes the problem (``"row 3: "`` for parquet); every problem is an :class:`InputError` naming the
    file, the line and the field. Refused besides a missing or wrong field: hidden tests inside the
    repository (or the repository inside them), since the workspace is a copy of the whole repository and
    the agent would read them; and, for hidden tests without a command, a repository package that the
    judge imports from its own copy (:func:`shadow_problem`), since the judge would test that copy.
    """
    base = Path(path).parent
    where = (str(path), line)

    def text(key: str) -> str:
        if key not in obj:
            fix = f'add "{key}": ... to this object' if not prefix else f'add "{key}": ... to the row\'s {prefix[:-1]}'
            raise InputError(*where, f"{at}missing the field {prefix + key!r}", fix)
        value = obj[key]
        if not isinstance(value, str) or not value.strip():
            raise InputError(*where, f"{at}field {prefix + key!r} must be a non-empty string, got {value!r}",
                             f"set {prefix + key!r} to a non-empty string")  # fmt: skip
        return value

    def directory(key: str, what: str) -> Path:
        found = base / text(key)
        if not found.is_dir():
            raise InputError(*where, f"{at}{prefix + key} {str(found)!r} is not a directory",
                             f"give an existing local path to {what} (relative to the file, or absolute)")  # fmt: skip
        return found.resolve()

    repo = directory("repo", "a checkout of the repository (tirl clones nothing)")
    # without a test_command the hidden tests go to the judge (tirl.envs.scorer), which the agent cannot forge
    # null is absent (a parquet struct column holds every row's keys, null where a row has none)
    judged = obj.get("hidden_tests") is not None and obj.get("test_command") is None
    command = None if judged else text("test_command")
    hidden = None
    if obj.get("hidden_tests") is not None:
        hidden = directory("hidden_tests", "a directory of pytest files")
        if hidden == repo or repo in hidden.parents or hidden in repo.parents:
            where_repo = f"{prefix}repo {str(repo)!r}"
            raise InputError(*where, f"{at}{prefix}hidden_tests {str(hidden)!r} is inside {where_repo} (or holds "
                             "it): the workspace is a copy of the repository, so the agent would read the hidden "
                             "tests", "move the hidden tests to a directory outside the repository")  # fmt: skip
        if judged:
            from tirl.envs.scorer import shadowed_modules  # here: it imports the sandbox, which filters never need

            if shadowed := shadowed_modules(repo, hidden):
                raise InputError(*where, f"{at}{shadow_problem(shadowed)}", SHADOW_FIX)
    return RepoFields(repo, hidden, command)


SHADOW_FIX = "rename the repository's package, or give the task a test_command (run in the workspace instead)"


def shadow_problem(names: list[str]) -> str:
    """Why a repository that provides a module the judge imports itself cannot be judged.

    ``names``: what :func:`~tirl.envs.scorer.shadowed_modules` found.
    """
    return (
        f"the hidden tests import {', '.join(map(repr, names))}, which the repository provides but the judge "
        "imports from its own copy (the standard library, or pytest and its dependencies): every episode would "
        "be judged on that copy, not on the agent's code"
    )


def load_swe_tasks(path: str | Path) -> list[Task]:
    """Load a JSONL of local repositories (see the module docstring); errors name the file and line."""
    tasks: list[Task] = []
    for lineno, obj in read_jsonl(path):
        fields = repo_fields(obj, path, lineno)
        prompt = require_str(obj, "prompt", path, lineno)
        task_id = str(obj.get("id", f"{Path(path).stem}-{lineno}"))
        tasks.append(Task(id=task_id, prompt=prompt, kind=KIND, data=fields.data()))
    if not tasks:
        raise InputError(
            str(path), None, "no tasks in the file", 'add lines like {"repo": ..., "prompt": ..., "test_command": ...}'
        )
    return tasks


def bash_turn(command: str) -> str:
    """An assistant turn that runs a shell command."""
    return f"```bash\n{command}\n```"


SUBMIT_TURN = bash_turn("submit")


def expert_solution(task: Task) -> list[str]:
    """Scripted assistant turns that fix a *generated* task: look, patch with python3, submit.

    A curriculum task (``env.difficulty=2``) gets :func:`~tirl.envs.tasks.swe_experts.curriculum_expert_solution`.
    """
    if "curriculum" in task.data:
        from tirl.envs.tasks.swe_experts import curriculum_expert_solution

        return curriculum_expert_solution(task)
    mutation = task.data.get("mutation")
    module = task.data.get("module")
    if not isinstance(mutation, dict) or not isinstance(module, str):
        raise ValueError(f"task {task.id!r} has no planted bug to undo (only generated swe-lite tasks do)")
    patch = (
        "python3 - <<'EOF'\n"
        "from pathlib import Path\n"
        f"p = Path({module!r})\n"
        "s = p.read_text()\n"
        f"assert s.count({mutation['patch_old']!r}) == 1\n"
        f"p.write_text(s.replace({mutation['patch_old']!r}, {mutation['patch_new']!r}))\n"
        "print('patched')\n"
        "EOF"
    )
    return [bash_turn(f"cat {module}"), bash_turn(patch), SUBMIT_TURN]
