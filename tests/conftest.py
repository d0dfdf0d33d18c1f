"""Shared fixtures, the installed-parts rule, and the check that the suite leaves no threads or processes behind.

Installed parts: parts that ``make install`` provides never skip under ``make test``.

A plain ``pytest`` run skips a test whose part is missing (bubblewrap, Ray,
Chromium, the shipped checkpoint, peft, TRL, wandb, verifiers, skyrl-gym) with
its reason, so a partial developer machine still runs the rest. ``make test``
sets ``TIRL_REQUIRE_PARTS=1`` (and CI sets ``CI=true``; either takes ``1``,
``true`` or ``yes``): then such a skip is a failure naming the part, so a
broken install cannot pass, on a laptop as in CI. Other skips (a GPU, vLLM,
root-only cases) stay skips everywhere.

Leftovers: the session ends with no more Python threads and child processes
than it began with (after a grace period of :data:`GRACE_S` for threads that
are already stopping), else the last test's teardown errors, naming each
leftover and the test during which it appeared. A long ``make test`` once ran
out of threads (``RuntimeError: can't start new thread``) late in the process.
Slack: the daemon threads that a library starts once and keeps for the life of
the process (:data:`LIBRARY_DAEMONS`: tqdm's monitor, huggingface_hub's
telemetry worker, the OpenTelemetry exporters that verifiers and wandb start);
tirl's own math-verify worker (``tirl.answers``, a process-lifetime pool) is
stopped first, as the process's exit would.
Parallel runs: ``make test`` runs pytest with ``-n 2`` (pytest-xdist, one
worker per core). xdist sets ``COLUMNS=80`` and ``LINES=24`` in its workers;
this module removes them there, so a test sees what a user's pipe gives (the
CLI's piped width, see ``tirl.diagnostics.render``), as in a one-process run.
Each worker checks its own leftovers. ``make test`` (``--dist load``) sends single tests to the workers, except
that a module with a module-scoped fixture (a served model, a trained run directory) goes to one worker whole, so
its fixture is built once, and the multi-node Ray module (SAME_WORKER) is collected first
(:func:`pytest_xdist_make_scheduler`).
Not covered: OS threads without a Python ``Thread`` (torch's intra-op pools,
Ray's gRPC threads: process-lifetime pools of a fixed size) and processes that
detach from the test process (``ray start`` daemons; the Ray cluster fixture
stops its own).
"""

from __future__ import annotations

import gc
import os
import re
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tirl.types import Message, Role

# part -> a pattern of the skip reasons that mean "this part is missing"
INSTALLED_PARTS: dict[str, re.Pattern[str]] = {
    "bubblewrap (make sysdeps)": re.compile(r"bubblewrap|\bbwrap\b", re.IGNORECASE),
    "Ray (make install: the ray extra)": re.compile(
        r"could not import 'ray(\.[\w.]+)?'|\bray\b.*(missing|not installed)", re.I
    ),  # ray.train.torch too (Ray Train ranks)
    "Chromium (make sysdeps)": re.compile(r"chromium", re.IGNORECASE),
    "the shipped checkpoint (src/tirl/assets/tiny-tir)": re.compile(r"built-in checkpoint", re.IGNORECASE),
    "peft (make install: the lora extra)": re.compile(r"could not import 'peft'"),
    "TRL (make install: the integrations extra)": re.compile(r"could not import 'trl'"),
    "wandb (make install: the wandb extra)": re.compile(r"could not import 'wandb'"),
    "verifiers (make install: the integrations extra)": re.compile(r"could not import 'verifiers'"),
    "skyrl-gym (make install: the integrations extra)": re.compile(r"could not import 'skyrl_gym'"),
}
REQUIRE_VARS = ("TIRL_REQUIRE_PARTS", "CI")  # make test sets the first, CI services the second

if os.environ.get("PYTEST_XDIST_WORKER"):  # xdist's terminal size, not the user's (see the module docstring)
    for _var in ("COLUMNS", "LINES"):
        os.environ.pop(_var, None)


def asst(text: str | None, **kw: object) -> Message:
    return Message(role=Role.ASSISTANT, content=text, **kw)  # type: ignore[arg-type]


def parts_required() -> str | None:
    """The variable (``TIRL_REQUIRE_PARTS`` or ``CI``) set to true, 1 or yes, else None."""
    for var in REQUIRE_VARS:
        if os.environ.get(var, "").strip().lower() in ("true", "1", "yes"):
            return var
    return None


def missing_part(reason: str) -> str | None:
    """The install part a skip reason says is missing, or None for any other skip."""
    for part, pattern in INSTALLED_PARTS.items():
        if pattern.search(reason):
            return part
    return None


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_if_part_missing(report: Any) -> None:
    var = parts_required() if report.skipped and not hasattr(report, "wasxfail") else None
    if var is None:
        return
    reason = _skip_reason(report)
    part = missing_part(reason)
    if part is not None:
        report.outcome = "failed"
        setting = f"{var}={os.environ[var]}"
        report.longrepr = f"{setting}: {part} is missing, and make install provides it; the test would skip: {reason}"


#: Modules that run on one xdist worker together (the value names their unit), collected first: each starts its own
#: local Ray cluster, and two at once on two cores starve each other past their timeouts. Today one module holds
#: every multi-node Ray test, so that one cluster start serves them all.
SAME_WORKER = {"tests/distributed/test_ray_cluster.py": "ray"}
_TESTS = Path(__file__).resolve().parent
_SHARED_FIXTURE = re.compile(r"@pytest\.fixture\([^)]*scope=\"(module|class|package)\"")
_SHARED_SCOPES = frozenset({"module", "class", "package"})


def modules_with_shared_fixtures(root: Path = _TESTS) -> frozenset[str]:
    """Test modules (paths relative to the repository) that define a module-, class- or package-scoped fixture."""
    return frozenset(
        p.relative_to(root.parent).as_posix()
        for p in root.rglob("test_*.py")
        if _SHARED_FIXTURE.search(p.read_text(encoding="utf-8"))
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist load``: each test is its own work unit, except that a module with a module-scoped fixture
    is one unit (its fixture is built once, not once per worker) and :data:`SAME_WORKER`'s modules are one unit.

    Not ``--dist loadgroup`` with ``xdist_group`` marks: pytest-xdist 3.8 tags a grouped test by rewriting
    ``item._nodeid``, which pytest 9.2 no longer reads, so the marks are silently ignored. The controller does not
    collect, so the modules are found by reading their source (:func:`modules_with_shared_fixtures`); each worker
    checks the result against its collected items (:func:`pytest_collection_modifyitems`).
    """
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    shared = modules_with_shared_fixtures(Path(str(config.rootpath)) / "tests")

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SAME_WORKER.get(path) or (path if path in shared else nodeid)

    config.option.loadscopereorder = False  # keep the collection order: the Ray unit first
    return UnitScheduling(config, log)


def _uses_a_shared_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope in _SHARED_SCOPES for ds in defs for d in ds)


_UNSCHEDULED = pytest.StashKey[str]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Collect :data:`SAME_WORKER`'s modules first (their unit is the longest: a worker takes it at once), and
    fail each test of a module whose module-scoped fixture the scheduler's source scan missed (one error naming
    the module and the fix, at its set-up: :func:`pytest_runtest_setup`)."""
    shared = modules_with_shared_fixtures(Path(str(config.rootpath)) / "tests")
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path.startswith("tests/") and path not in shared and _uses_a_shared_fixture(item):
            item.stash[_UNSCHEDULED] = (
                f"{path}: uses a module-scoped fixture defined outside it; define it in the module as "
                '`@pytest.fixture(scope="module")` so that tests/conftest.py schedules the module as one unit'
            )
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in SAME_WORKER)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """Turn a skip for a missing install part into a failure under ``TIRL_REQUIRE_PARTS`` or ``CI``."""
    outcome = yield
    _fail_if_part_missing(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    """The same for module-level skips (``pytest.importorskip("ray")``)."""
    outcome = yield
    _fail_if_part_missing(outcome.get_result())


#: Library threads that live for the whole process once started: not leaks of a test (see the module docstring).
LIBRARY_DAEMONS = re.compile(
    r"^tqdm_monitor$|\(_telemetry_worker\)$|^Otel(PeriodicExportingMetricReader|BatchLogRecordProcessor)$"
)
GRACE_S = float(os.environ.get("TIRL_LEFTOVER_GRACE_S", "10"))  # seconds for stopping threads to finish
_APPEARED_IN: dict[int, str] = {}  # thread ident -> the test during which it appeared
_PROC_APPEARED_IN: dict[int, str] = {}  # direct child pid -> the test during which it appeared


def _threads() -> dict[int, str]:
    return {t.ident: t.name for t in threading.enumerate() if t.ident is not None}


def _children() -> dict[int, str]:
    """This process's descendants (pid -> command line), read from /proc; empty where there is no /proc."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":  # a zombie is gone already (its parent has not reaped it yet)
                parent[int(entry)] = int(fields[1])
    mine, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier and pid not in mine}
        mine |= frontier
    out = {}
    for pid in sorted(mine):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out[pid] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
        except OSError:
            continue
    return out


def _direct_children() -> set[int]:
    """This process's direct children, from ``/proc/self/task/*/children`` (cheap: no walk of ``/proc``)."""
    out: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as f:
                out.update(int(pid) for pid in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def leftovers(threads_before: dict[int, str], children_before: dict[int, str]) -> list[str]:
    """Threads and child processes that were not there before (library daemons excepted), one line each."""
    lines = [f"thread {name!r} (appeared in {_APPEARED_IN.get(ident, 'a fixture or the session set-up')})"
             for ident, name in _threads().items()
             if ident not in threads_before and not LIBRARY_DAEMONS.search(name)]  # fmt: skip
    lines += [f"process {pid} (appeared in {_PROC_APPEARED_IN.get(pid, 'a fixture or a child process')}): {cmd}"
              for pid, cmd in _children().items() if pid not in children_before]  # fmt: skip
    return lines


def _note_new_threads(item: pytest.Item) -> Generator[None, Any, None]:
    before, children = set(_threads()), _direct_children()
    yield
    for ident in _threads().keys() - before:
        _APPEARED_IN.setdefault(ident, item.nodeid)
    for pid in _direct_children() - children:
        _PROC_APPEARED_IN.setdefault(pid, item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, None]:
    """Fail a test that :func:`pytest_collection_modifyitems` found unschedulable, before its fixtures run;
    remember during which test's set-up (its fixtures) each new thread appeared, for the leftover report."""
    if _UNSCHEDULED in item.stash:
        pytest.fail(item.stash[_UNSCHEDULED], pytrace=False)
    yield from _note_new_threads(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    """Remember during which test each new thread appeared, for the leftover report."""
    yield from _note_new_threads(item)


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_threads_or_processes() -> Generator[None, None, None]:
    """The session ends with no more threads and child processes than it began with (see the module docstring)."""
    threads, children = _threads(), _children()
    yield
    answers = sys.modules.get("tirl.answers")
    if answers is not None:  # tirl's math-verify worker lives until exit by design: stop it as exit would
        answers.shutdown_default_pool()
    deadline = time.monotonic() + GRACE_S
    while (left := leftovers(threads, children)) and time.monotonic() < deadline:
        gc.collect()  # an unreferenced executor's workers exit once it is collected
        time.sleep(0.2)
    if left:
        pytest.fail(f"the test session left {len(left)} thread(s)/process(es) running: " + "; ".join(left),
                    pytrace=False)  # fmt: skip
