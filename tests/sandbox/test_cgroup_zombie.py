"""The memory cgroup's membership check (``MemoryCgroup.outside``) on live and exited processes.

Real cgroup, real child processes (root with a writable memory hierarchy; skipped elsewhere). The
sandbox asks ``outside(pid)`` of its PID 1 right after bwrap reports it; a fast command has often
exited by then, and an exited, unreaped process (a zombie) reads as the root cgroup in
``/proc/<pid>/cgroup``. Before the fix that was "outside": the run was killed as unjoined and the
swe-lite episode ended with ``error`` (measured: 3 of 32 expert episodes on the loaded machine).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tirl.sandbox._cgroup import MemoryCgroup


@pytest.fixture
def cgroup() -> Iterator[MemoryCgroup]:
    made = MemoryCgroup.create(256)
    if made is None:
        pytest.skip("no writable memory cgroup here")
    yield made
    made.remove()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_live_process_is_inside_only_when_it_joined(cgroup: MemoryCgroup) -> None:
    joined = subprocess.Popen(["sleep", "5"], preexec_fn=cgroup.join)
    plain = subprocess.Popen(["sleep", "5"])
    try:
        assert cgroup.outside(joined.pid) is False
        assert cgroup.outside(plain.pid) is True  # the guard still catches a caller that forgot preexec
    finally:
        for p in (joined, plain):
            p.kill()
            p.wait()


def test_an_exited_unreaped_process_is_not_outside(cgroup: MemoryCgroup) -> None:
    proc = subprocess.Popen(["true"], preexec_fn=cgroup.join)
    try:
        deadline = time.monotonic() + 10
        while _state(proc.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(proc.pid) == "Z"
        assert cgroup.outside(proc.pid) is False  # before the fix: True (a zombie reads as the root cgroup)
    finally:
        proc.wait()
