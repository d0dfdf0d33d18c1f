"""One writer per run directory: an exclusive ``fcntl.flock`` on ``RUN_DIR/.lock``.

``tirl train`` holds the lock from the moment it has a run directory until it
exits, so a second ``tirl train --resume`` of a run that is being written is
refused with one error line naming the holder's pid, instead of two processes
rewriting the same metrics and checkpoints. The kernel drops the lock when the
holder exits for any reason (``kill -9`` included), so a stale ``.lock`` file
never blocks a later resume; the file itself stays (deleting it would let two
processes lock two different files).

Holding is re-entrant within one process (the command and the recipe it runs
both hold it); the lock file is opened with ``O_NOFOLLOW`` and close-on-exec,
so a link planted at ``.lock`` is refused and child processes (ranks,
sandboxes) never keep it alive.

Not covered: network file systems where ``flock`` is not shared between hosts.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tirl.errors import InputError
from tirl.trainer import run_files

LOCK_NAME = run_files.LOCK
_held: dict[str, list[int]] = {}  # lock path -> [fd, depth]: flock is per open file, so one fd per process


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "pid unknown"
    return f"pid {text}" if text.isdigit() else "pid unknown"


def _acquire(run_dir: Path, path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        problem = f"cannot be opened as the run's lock file ({exc.strerror})"
        raise InputError(str(path), None, problem, "remove it if it is not a plain file; check permissions") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _holder(fd)
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise InputError(str(path), None, f"cannot be locked ({exc.strerror})", "use a local disk") from None
        fix = "wait for it to finish or stop it: a run directory has one writer at a time"
        raise InputError(str(run_dir), None, f"is being written by another tirl train ({holder})", fix) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


@contextmanager
def hold_run_dir(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's lock for the block; :class:`~tirl.errors.InputError` when another process has it."""
    run_dir = Path(run_dir)
    path = run_dir / LOCK_NAME
    key = os.path.realpath(path)
    entry = _held.get(key)
    if entry is None:
        entry = _held[key] = [_acquire(run_dir, path), 0]
    entry[1] += 1
    try:
        yield
    finally:
        entry[1] -= 1
        if entry[1] == 0:
            del _held[key]
            os.close(entry[0])  # closing the only descriptor releases the flock
