"""Fixtures of the sandbox attack suite: one backend per parameter, and a host audit after each test.

Backends: ``bwrap`` (fresh interpreter per run), ``pool`` (warm fork servers inside bwrap),
``process`` and ``pool-process`` (the documented no-isolation fallbacks: fresh, and warm).
bwrap cases are skipped, with the reason, only when bubblewrap cannot run here at all.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tirl.sandbox import BwrapSandbox, ExecResult, ProcessSandbox, WarmPool
from tirl.sandbox.bwrap import bwrap_problem

BACKENDS = ["bwrap", "pool", "process", "pool-process"]
# Every long-lived process an attack starts carries this in its command line. The test session's pid makes it
# unique, so two sessions on one machine never count (or kill) each other's attack processes.
MARKER = f"tirlattack{os.getpid()}x"


def make(backend: str, **kw: Any) -> Any:
    if backend in ("bwrap", "pool") and bwrap_problem() is not None:
        pytest.skip(f"bubblewrap cannot run on this machine: {bwrap_problem()}")
    if backend == "bwrap":
        return BwrapSandbox(**kw)
    if backend == "pool":
        return WarmPool(isolate=True, size=kw.pop("size", 1), **kw)
    if backend == "pool-process":
        return WarmPool(isolate=False, size=kw.pop("size", 1), warn=False, **kw)
    kw.pop("disk_mb", None)
    return ProcessSandbox(warn=False, **kw)


def marked_pids() -> list[int]:
    """Host processes whose command line carries MARKER (the attack's leftovers)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if MARKER.encode() in cmd and state != "Z":
            found.append(int(name))
    return found


def pids_of_uids(uids: set[int]) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        if int(uid_line.split()[1]) in uids and "State:\tZ" not in status:
            found.append(int(name))
    return found


def settled(probe: Callable[[], list[int]], wait_s: float = 3.0) -> list[int]:
    """``probe()`` once it is empty, or its last value after ``wait_s`` (namespaces die asynchronously)."""
    end = time.monotonic() + wait_s
    while (found := probe()) and time.monotonic() < end:
        time.sleep(0.05)
    return found


def kill_marked() -> None:
    for pid in marked_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Runner:
    """Runs code on one backend (a fresh sandbox object per call) and audits the host afterwards."""

    def __init__(self, backend: str, request: pytest.FixtureRequest) -> None:
        self.backend = backend
        self.request = request
        self.uids: set[int] = set()

    def gap(self, *backends: str, reason: str) -> None:
        """A documented gap of these backends: the test must fail there (strict xfail)."""
        if self.backend in backends:
            self.request.applymarker(pytest.mark.xfail(strict=True, reason=reason))

    def __call__(self, code: str, **kw: Any) -> ExecResult:
        return asyncio.run(self.many([code], **kw))[0]

    async def many(self, codes: list[str], concurrency: int = 1, size: int = 1, **kw: Any) -> list[ExecResult]:
        ctor = {k: kw.pop(k) for k in ("timeout_s", "memory_mb", "max_output_chars", "disk_mb") if k in kw}
        if self.backend.startswith("pool"):
            ctor["size"] = size
        sb = make(self.backend, **ctor)
        sem = asyncio.Semaphore(concurrency)

        async def one(code: str) -> ExecResult:
            async with sem:
                result: ExecResult = await sb.run(code, **kw)
                return result

        try:
            return list(await asyncio.gather(*(one(c) for c in codes)))
        finally:
            await sb.close()
            self.uids |= getattr(sb, "uids", set())


#: where pytest puts every session's temp directories (read before any test moves ``tempfile.tempdir``)
PYTEST_ROOT = Path(tempfile.gettempdir()).resolve() / f"pytest-of-{getpass.getuser()}"


def host_mounts(own: Path | None = None) -> list[str]:
    """The host's mount table, less what other tests mount on purpose at the same time.

    Left out: swe-lite workspaces (tmpfs ``tirl-workspace``, mounted as root) and any mount point inside
    another test's pytest temp directory (``/tmp/pytest-of-USER/...``, but not inside ``own``, this test's
    own ``tmp_path``): a parallel worker or a second test session mounts a small tmpfs there (the full-disk
    tests). A mount anywhere else, or inside ``own``, still counts.
    """
    lines = Path("/proc/self/mountinfo").read_text().splitlines()

    def others(line: str) -> bool:
        fields = line.split()
        point = Path(fields[4]) if len(fields) > 4 else Path("/")
        mine = own is not None and point.is_relative_to(own)
        return point.is_relative_to(PYTEST_ROOT) and not mine

    return [line for line in lines if " - tmpfs tirl-workspace " not in line and not others(line)]


@pytest.fixture
def host_audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """Private host temp root for the backends; after the test: no leftover process, mount or temp dir."""
    root = tmp_path / "hosttmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    mounts = host_mounts(tmp_path)
    yield lambda: None
    try:
        assert settled(marked_pids) == [], "an attack process outlived its execution"
        assert os.listdir(root) == [], f"temporary directories left behind: {os.listdir(root)}"
        assert host_mounts(tmp_path) == mounts, "the host's mounts changed"
    finally:
        kill_marked()


@pytest.fixture(params=BACKENDS)
def run(request: pytest.FixtureRequest, host_audit: Callable[[], None]) -> Iterator[Runner]:
    runner = Runner(request.param, request)
    yield runner
    # Every process of the sandbox's own uids is gone once the sandbox is closed.
    assert settled(lambda: pids_of_uids(runner.uids)) == [], "sandbox processes left behind"
