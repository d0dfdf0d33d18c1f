"""Run one function over a few jobs in forked children, results in job order, errors as in a serial run.

:func:`map_forked` runs ``jobs[0]`` in this process and each later job in a
child made with :func:`os.fork` (it shares this process's memory, so an input
held or mapped here is not copied). A child sends its result back pickled
through a pipe. A child that fails for any reason (an exception, a crash, a
kill) sends nothing, and a child that cannot be made (no process or
descriptor left) is not made; either way its job is run here, in order: an
input error is therefore raised here exactly as a serial run would raise it,
and no exception object ever has to cross a process boundary.

Forking is skipped (every job runs here, in order) where it is unsafe or
useless: one job, no ``os.fork`` (not POSIX), or other threads alive in this
process (a lock one of them holds would stay locked in the child forever).

Not covered: results that cannot be pickled (the job then runs here again).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from tirl.answers import shutdown_default_pool

__all__ = ["can_fork", "map_forked", "usable_cpus"]

J = TypeVar("J")
R = TypeVar("R")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    """Whether forking a worker is safe here: POSIX fork, and this thread is the only one alive."""
    return hasattr(os, "fork") and sys.platform != "darwin" and threading.active_count() == 1


def _child(fn: Callable[[J], R], job: J, write_fd: int) -> None:
    """The body of a forked child: run the job, send the pickled result, and leave without cleanup handlers."""
    status = 1
    try:
        data = pickle.dumps(fn(job), protocol=pickle.HIGHEST_PROTOCOL)
        with memoryview(data) as view:
            while view:
                view = view[os.write(write_fd, view) :]
        status = 0
    except BaseException:  # the parent redoes the job, raising what it raises
        pass
    finally:
        try:
            shutdown_default_pool()  # a math-verify worker this child started for answers_match
        finally:
            os._exit(status)


def _start(fn: Callable[[J], R], job: J) -> tuple[int, int] | None:
    """Fork a child for ``job``; returns (pid, read end of its pipe), or None when no child can be made now."""
    try:
        read_fd, write_fd = os.pipe()
    except OSError:  # out of descriptors: the job runs here
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:  # a process limit or no memory: the job runs here
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # the child
        os.close(read_fd)
        _child(fn, job, write_fd)
    os.close(write_fd)
    return pid, read_fd


def _collect(pid: int, read_fd: int) -> tuple[bool, object]:
    """Read a child's result to the end of its pipe and reap it; (False, None) when it failed."""
    chunks: list[bytes] = []
    try:
        while chunk := os.read(read_fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return False, None
    try:
        return True, pickle.loads(b"".join(chunks))
    except Exception:  # a truncated result: the job is redone here
        return False, None


def _stop(children: list[tuple[int, int] | None]) -> None:
    """Kill and reap children whose results are no longer wanted (this process is raising)."""
    for child in children:
        if child is None:
            continue
        pid, read_fd = child
        os.close(read_fd)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)


def map_forked(fn: Callable[[J], R], jobs: Sequence[J]) -> list[R]:
    """``[fn(job) for job in jobs]``, the jobs after the first in forked children (see the module doc)."""
    if len(jobs) <= 1 or not can_fork():
        return [fn(job) for job in jobs]
    children: list[tuple[int, int] | None] = []
    try:
        for job in jobs[1:]:
            children.append(_start(fn, job))
        results = [fn(jobs[0])]
    except BaseException:
        _stop(children)
        raise
    for k, child in enumerate(children):
        try:
            ok, value = _collect(*child) if child is not None else (False, None)
            if not ok:  # the child failed or was never made: its job runs here, in order
                value = fn(jobs[k + 1])
        except BaseException:
            _stop(children[k + 1 :])
            raise
        results.append(value)  # type: ignore[arg-type]
    return results
