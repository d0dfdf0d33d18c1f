"""A memory cgroup per sandbox: one limit on all the memory a sandbox holds, and its OOM kills counted.

The address-space rlimit counts one process's mappings. Memory that is not mapped escapes it: a memfd
filled with ``write()``, files in the sandbox's tmpfs (``/work``, ``/tmp``, ``/dev/shm``), SysV shared
memory segments that outlive their ``shmdt``, kernel buffers, and N processes each up to the limit. A
memory cgroup charges all of these (and the page cache the sandbox brings in) to the sandbox, and the
kernel's OOM killer kills a process of the sandbox when the total passes the limit.

:class:`MemoryCgroup` is created below the cgroup tirl itself runs in (never elsewhere in the
hierarchy), one per fresh sandbox or per warm-pool server, named ``tirl-sbx-<tirl pid>-<n>``, and removed
when the sandbox is gone. The sandbox's first process joins it before it executes anything (see
:meth:`MemoryCgroup.join`), so everything the sandbox starts is inside. Either hierarchy works, whichever
holds the memory controller:

- **v1** (``/sys/fs/cgroup/memory/...``): ``memory.limit_in_bytes`` and, when swap accounting exists,
  ``memory.memsw.limit_in_bytes`` set to the same value (no swap beyond the limit); OOM kills are
  counted in ``memory.oom_control`` (``oom_kill``);
- **v2**: ``memory.max``, ``memory.swap.max`` = 0; OOM kills in ``memory.events``. The memory controller
  must be enabled for tirl's own cgroup's children (``cgroup.subtree_control``); tirl tries to enable
  it, which the kernel refuses while tirl's cgroup has processes of its own and is not the root (the
  "no internal processes" rule): such a host has no usable hierarchy.

Not covered: a host where tirl cannot write a hierarchy (not root, or a read-only ``/sys/fs/cgroup``,
as in most containers): :func:`memory_parent` is then None and the sandbox falls back to the seccomp
refusals documented in :mod:`tirl.sandbox._seccomp`. The v2 path is written to the kernel's
documentation but was not run here (the development machine mounts memory on v1).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path

PREFIX = "tirl-sbx-"
_UNLIMITED = 1 << 40  # MB
_COUNTER = itertools.count()
# Cgroups whose processes were still exiting when their sandbox ended; removed by a later create().
_PENDING: set[Path] = set()


_PF_EXITING = 0x4  # the flags field of /proc/<pid>/stat: the process is in do_exit


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def locate(cgroup_text: str, mountinfo_text: str, v2_controllers: Callable[[Path], str]) -> tuple[Path, int] | None:
    """(our own memory cgroup's directory, hierarchy version) from ``/proc/self/cgroup`` and ``mountinfo``.

    v1 when a v1 hierarchy holds the ``memory`` controller, else v2 when the unified hierarchy offers it
    (``v2_controllers(dir)`` returns that directory's ``cgroup.controllers``), else None.
    """
    v1_path = v2_path = None
    for line in cgroup_text.splitlines():
        ident, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if ident == "0" and controllers == "":
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    mounts: list[tuple[str, str, str, list[str]]] = []  # (fstype, root, mount point, super options)
    for line in mountinfo_text.splitlines():
        head, _, tail = line.partition(" - ")
        parts, fs = head.split(" "), tail.split(" ")  # fs: type, source, super options
        if len(parts) >= 5 and len(fs) >= 3:
            mounts.append((fs[0], parts[3], parts[4], fs[2].split(",")))
    for fstype, root, point, options in mounts:
        if v1_path is not None and fstype == "cgroup" and "memory" in options:
            return _under(point, root, v1_path), 1
    for fstype, root, point, _ in mounts:
        if v2_path is not None and fstype == "cgroup2":
            here = _under(point, root, v2_path)
            if "memory" in v2_controllers(here).split():
                return here, 2
    return None


def _under(point: str, root: str, path: str) -> Path:
    """The directory of cgroup ``path`` in a hierarchy mounted at ``point`` from its ``root``."""
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return Path(point) / path.lstrip("/")


def _events(version: int) -> str:
    """The file that counts OOM kills (an ``oom_kill N`` line) in a hierarchy of ``version``."""
    return "memory.oom_control" if version == 1 else "memory.events"


def _oom_count(data: bytes) -> int:
    """The ``oom_kill N`` line's N (0 if there is none)."""
    for line in data.splitlines():
        key, _, value = line.partition(b" ")
        if key == b"oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def oom_kills(path: Path, version: int) -> int:
    """How many processes the OOM killer has killed in the cgroup at ``path`` (0 if unreadable)."""
    try:
        return _oom_count((path / _events(version)).read_bytes())
    except OSError:
        return 0


def _probe() -> tuple[tuple[Path, int] | None, str]:
    """Find our memory hierarchy and check that a child cgroup with a limit can be made there."""
    found = locate(
        _read(Path("/proc/self/cgroup")),
        _read(Path("/proc/self/mountinfo")),
        lambda here: _read(here / "cgroup.controllers"),
    )
    if found is None:
        return None, "no cgroup hierarchy with the memory controller is mounted for this process"
    parent, version = found
    if str(os.getpid()) not in _read(parent / "cgroup.procs").split():
        # A hierarchy mounted from outside our cgroup namespace, say: the path does not lead to our cgroup.
        return None, f"{parent} is not the cgroup this process runs in"
    if version == 2 and "memory" not in _read(parent / "cgroup.subtree_control").split():
        try:
            (parent / "cgroup.subtree_control").write_text("+memory")
        except OSError as exc:
            return None, f"cannot enable the memory controller for children of {parent} ({exc.strerror})"
    probe = parent / f"{PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
    except OSError as exc:
        return None, f"cannot create a cgroup below {parent} ({exc.strerror})"
    try:
        (probe / ("memory.limit_in_bytes" if version == 1 else "memory.max")).write_text(str(1 << 30))
    except OSError as exc:
        return None, f"cannot set a memory limit in {probe} ({exc.strerror})"
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    _remove_stale(parent)
    return found, ""


def _remove_stale(parent: Path) -> None:
    """Remove the empty cgroups of tirl processes that are gone (a ``kill -9`` of tirl leaves them)."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            owner = entry.name[len(PREFIX) :].split("-")[0]
            if entry.name.startswith(PREFIX) and owner.isdigit() and not Path(f"/proc/{owner}").exists():
                with contextlib.suppress(OSError):
                    entry.rmdir()


@functools.cache
def _found() -> tuple[tuple[Path, int] | None, str]:
    return _probe()


def memory_parent() -> tuple[Path, int] | None:
    """(the cgroup tirl runs in, hierarchy version) when sandboxes can get memory cgroups here, else None."""
    return _found()[0]


def why_not() -> str:
    """Why :func:`memory_parent` is None ("" when it is not)."""
    return _found()[1]


class MemoryCgroup:
    """One sandbox's memory cgroup: create, join (in the child), limit, count OOM kills, remove."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version
        self.limit_mb = _UNLIMITED  # a new cgroup's limit: the first one set is lower
        self._procs = -1  # cgroup.procs, opened by tirl (its credentials decide the move) and written by the child
        self._events = -1  # the OOM kill counter's file, kept open: a pread per run costs ~3 us, an open ~30 us

    @classmethod
    def create(cls, memory_mb: int) -> MemoryCgroup | None:
        """A new cgroup limited to ``memory_mb`` below our own, or None.

        None where there is no usable hierarchy, or when this one cannot be made (the caller then falls
        back to the seccomp refusals).
        """
        found = memory_parent()
        if found is None:
            return None
        for stale in list(_PENDING):
            with contextlib.suppress(OSError):
                stale.rmdir()
                _PENDING.discard(stale)
        parent, version = found
        path = parent / f"{PREFIX}{os.getpid()}-{next(_COUNTER)}"
        try:
            path.mkdir()
        except OSError:  # e.g. the hierarchy's limit on descendants: the sandbox gets the seccomp refusals
            return None
        cgroup = cls(path, version)
        try:
            if version == 2:
                with contextlib.suppress(OSError):  # absent without swap accounting
                    (path / "memory.swap.max").write_text("0")
            cgroup.set_limit(memory_mb)
            cgroup._procs = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
            cgroup._events = os.open(path / _events(version), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            cgroup.remove(wait_s=0.0)
            return None
        return cgroup

    def set_limit(self, memory_mb: int) -> None:
        """Limit the cgroup to ``memory_mb`` MB in all (memory + swap on v1; no swap on v2)."""
        if memory_mb == self.limit_mb:
            return
        value = str(memory_mb << 20)
        if self.version == 2:
            (self.path / "memory.max").write_text(value)
        else:
            # memsw may never be below the memory limit: raise it first, lower it last.
            files = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
            if memory_mb > self.limit_mb:
                files.reverse()
            for name in files:
                try:
                    (self.path / name).write_text(value)
                except FileNotFoundError:  # no swap accounting: memory alone
                    pass
        self.limit_mb = memory_mb

    @property
    def procs_path(self) -> Path:
        """The cgroup's ``cgroup.procs``: writing "0" there moves the writer in (what :meth:`join` does)."""
        return self.path / "cgroup.procs"

    def join(self) -> None:
        """Move the calling process into the cgroup (call in the child, between fork and exec).

        Writes "0" (the writer itself) on the descriptor tirl opened; the kernel checks the opener's
        credentials, so this works after the child dropped to the sandbox's uid.
        """
        os.write(self._procs, b"0")

    def outside(self, pid: int) -> bool:
        """Whether process ``pid`` is known to be in another cgroup of this hierarchy (False if it is gone).

        A process that is exiting (``PF_EXITING``, set before the kernel moves it out of its cgroup) or
        has exited and is not yet reaped (a zombie, whose cgroup reads as the root) counts as gone: its
        cgroup is no longer where it ran. The state is read *after* the cgroup, so a cgroup read from a
        process that was still running is trusted and one read during or after its exit is not.
        """
        text = _read(Path(f"/proc/{pid}/cgroup"))
        stat = _read(Path(f"/proc/{pid}/stat")).rsplit(")", 1)[-1].split()
        if len(stat) < 7 or stat[0] in ("Z", "X") or int(stat[6]) & _PF_EXITING:
            return False
        for line in text.splitlines():
            ident, _, rest = line.partition(":")
            controllers, _, path = rest.partition(":")
            if (self.version == 2 and ident == "0" and controllers == "") or (
                self.version == 1 and "memory" in controllers.split(",")
            ):
                return not path.rstrip("/").endswith("/" + self.path.name)
        return False

    def oom_kills(self) -> int:
        """OOM kills in this cgroup so far."""
        try:
            return _oom_count(os.pread(self._events, 4096, 0))
        except OSError:
            return 0

    def remove(self, wait_s: float = 2.0) -> None:
        """Close our descriptor and remove the cgroup once its processes are gone (else leave it for later)."""
        for fd in (self._procs, self._events):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._procs = self._events = -1
        end = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= end:
                    _PENDING.add(self.path)
                    return
                time.sleep(0.005)
