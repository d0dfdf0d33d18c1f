"""The host side of the swe-lite scorer: stage the evaluation, run the judge in the sandbox, read its verdict.

The judge (:mod:`tirl.envs.scorer_runner`) runs the hidden tests in a process that never imports
the workspace's code; the code under test runs in a separate subject process per test, and only
values cross back (see that module's docstring for the order of the steps and what they stop).
This module:

* :func:`stage` writes the evaluation directory ``.tirl_eval/`` into the workspace (after
  removing whatever the agent left there): a fresh per-run secret (``secret``, mode 0600), the
  pytest bundle (``pytest.zip``) and the hidden tests (``tests/``). The judge reads and deletes
  all three before any code of the workspace runs, so the agent's code never sees them;
* :func:`judge` runs the judge with the workspace as the sandbox's working directory, and
  :func:`read_verdict` accepts only a line signed with the secret (an HMAC; the secret is never sent).

Failures the episode causes are the episode's (reward 0, with the reason in
:attr:`Judgement.failure`), never an infrastructure error: a workspace too full to stage the
evaluation (``workspace_full``), or that breaks it otherwise (``staging_failed``), and a judge that
ends without a verdict (``no_verdict``: the code under test killed it, or it ran past the sandbox's
timeout: ``timed_out``). A sandbox ``error`` (the sandbox itself broke) is raised as
:class:`~tirl.envs.base.EnvError`, which the pipeline records as ``eval_failed``.

Not covered: tasks with their own ``test_command`` (JSONL tasks) do not go through the judge; their
verdict is as trustworthy as that command (docs/sandbox.md, "The swe-lite scorer").
"""

from __future__ import annotations

import errno
import hmac
import json
import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tirl import ast_lock
from tirl.envs import scorer_bundle, scorer_runner, scorer_wire
from tirl.envs.base import EnvError
from tirl.envs.workspace import PYTEST_MODULES, clear_path
from tirl.sandbox.base import ExecResult, Sandbox

EVAL_DIR = ".tirl_eval"
_COUNTS = ("passed", "failed", "errors", "skipped")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the judge reports: counts per outcome, whether its deadline cut a test, the failing names."""

    passed: int
    failed: int
    errors: int
    skipped: int
    timed_out: bool = False
    failures: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Judgement:
    """One evaluation: the verdict (None when there is none), why not, and the judge's run."""

    verdict: Verdict | None
    failure: str | None  # None, "workspace_full", "staging_failed", "no_verdict", "timed_out"
    result: ExecResult | None
    detail: str = ""


def _top_names(root: Path) -> set[str]:
    """The top-level module and package names under ``root`` (``x.py`` and directories)."""
    return {p.name.removesuffix(".py") for p in root.iterdir() if p.is_dir() or p.suffix == ".py"}


def _hidden_imports(hidden: Path) -> set[str]:
    """The top-level names the hidden tests import (a file that does not parse is left to the judge)."""
    imported: set[str] = set()
    for path in sorted(hidden.rglob("*.py")):
        try:
            source = path.read_text(encoding="utf-8")
            with ast_lock.LOCK:  # the pipeline's workers read hidden tests at once (tirl.ast_lock)
                imported |= scorer_bundle.imported_names([source])
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
    return imported


def hidden_helpers(repo: Path, hidden: Path) -> list[str]:
    """The modules the hidden tests import from their own directory (``from helpers import CASES``).

    The judge imports these itself, from the hidden tests, before they are deleted. They used to go to the
    subject like the repository's modules, where the agent could write them: a ``helpers.py`` in the
    workspace root that set the expected values earned reward 1.0 with the bug in place. A name the
    repository has too (``repo/calc`` and ``hidden/calc/test_core.py``) stays the repository's.
    """
    return sorted((_hidden_imports(hidden) & _top_names(hidden)) - _top_names(repo))


def shadowed_modules(repo: Path, hidden: Path) -> list[str]:
    """The modules the hidden tests import that ``repo`` provides but the judge imports from its own copy.

    The judge resolves a name itself when it can (the standard library, pytest and its dependencies in the
    bundle, ``pygments``); only the others go to the subject. A repository whose top level holds such a
    package or module (``tomli/``, ``statistics.py``) would be judged on the judge's copy, whatever the
    agent did. ``repo`` and ``hidden`` are the task's own directories (never the workspace); a test file
    that does not parse is left to the judge (a collection error).
    """
    own = {n.removesuffix(".py") for n in PYTEST_MODULES} | {"pygments"} | set(sys.stdlib_module_names)
    return sorted(_hidden_imports(hidden) & _top_names(repo) & own)


def staging_failure(exc: OSError) -> str:
    """``workspace_full`` for a full file system or inode table (ENOSPC, EDQUOT), else ``staging_failed``."""
    return "workspace_full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "staging_failed"


def stage(workspace: Path, hidden: Path, bundle: Path) -> str:
    """Write ``.tirl_eval/`` (secret, bundle, tests) into ``workspace``; returns the secret.

    Raises ``OSError`` when the workspace cannot take it (the agent filled or broke it).
    """
    eval_dir = workspace / EVAL_DIR
    clear_path(eval_dir)  # a link, a file or a deep tree the agent left there: removed, never followed
    eval_dir.mkdir()
    secret = secrets.token_hex(16)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(eval_dir / scorer_runner.SECRET_FILE, flags, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secret)
    shutil.copyfile(bundle, eval_dir / scorer_runner.BUNDLE_FILE)
    tests = eval_dir / scorer_runner.TESTS_DIR
    shutil.copytree(hidden, tests, symlinks=False)
    (tests / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return secret


def judge_code(budget_s: float, helpers: tuple[str, ...] = ()) -> str:
    """The program the sandbox runs: the wire's source (each subject starts from it), the judge's, its main."""
    wire = Path(scorer_wire.__file__).read_text(encoding="utf-8")
    bundle = Path(scorer_bundle.__file__).read_text(encoding="utf-8")
    runner = Path(scorer_runner.__file__).read_text(encoding="utf-8")
    return (
        f"_WIRE = {wire!r}\n"
        "exec(compile(_WIRE, '<tirl-wire>', 'exec'))\n"
        f"exec(compile({bundle!r}, '<tirl-bundle>', 'exec'))\n"
        f"exec(compile({runner!r}, '<tirl-judge>', 'exec'))\n"
        f"judge_main(_WIRE, {EVAL_DIR!r}, {budget_s!r}, {list(helpers)!r})\n"
    )


def read_verdict(stdout: str, secret: str) -> Verdict | None:
    """The verdict on the last line whose tag is the judge's MAC of its JSON under ``secret``, or None.

    The secret itself is never on the line: a process that reads the judge's output on its way here (as
    the code under test can, where the sandbox runs as the host's uid) must not learn what signs a verdict.
    """
    for line in reversed(stdout.splitlines()):
        tag, _, payload = line.partition(" ")
        if not hmac.compare_digest(
            tag.encode("utf-8", "surrogatepass"), scorer_bundle.verdict_mac(secret, payload).encode()
        ):
            continue
        try:
            data = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        counts = [data.get(k) for k in _COUNTS]
        failures = data.get("failures", [])
        if not all(type(c) is int and c >= 0 for c in counts) or type(data.get("timed_out")) is not bool:
            return None
        if not isinstance(failures, list) or not all(isinstance(f, str) for f in failures):
            return None
        passed, failed, errors, skipped = (int(c or 0) for c in counts)
        return Verdict(passed, failed, errors, skipped, timed_out=data["timed_out"], failures=tuple(failures))
    return None


async def judge(
    sandbox: Sandbox, workspace: Path, hidden: Path, bundle: Path, timeout_s: float, helpers: tuple[str, ...] = ()
) -> Judgement:
    """Stage, run the judge under ``timeout_s`` with the workspace bound, and read the verdict.

    ``helpers``: :func:`hidden_helpers` of the task (imported by the judge from the hidden tests).
    """
    try:
        secret = stage(workspace, hidden, bundle)
    except OSError as exc:
        return Judgement(None, staging_failure(exc), None, f"staging the evaluation failed: {exc}")
    budget = max(timeout_s - min(5.0, 0.25 * timeout_s), 0.5)  # the judge's own deadline, inside the sandbox's
    result = await sandbox.run(judge_code(budget, helpers), lang="python", timeout_s=timeout_s, workdir=workspace)
    if result.error is not None:
        raise EnvError(f"sandbox error while running the hidden tests: {result.error}")
    verdict = read_verdict(result.stdout, secret)
    if verdict is None:
        return Judgement(None, "timed_out" if result.timed_out else "no_verdict", result, "the judge gave no verdict")
    return Judgement(verdict, None, result)
