"""How a bubblewrap sandbox is started, and how all of it is killed (used by the fresh backend and the pool).

:func:`prepare` builds the command line and the descriptors it needs:

- ``--seccomp FD``: the filter of :mod:`tirl.sandbox._seccomp`, in a memfd;
- ``--info-fd FD``: bwrap writes the host pid of the sandbox's PID 1 there. :class:`Launch` reads it
  and opens a pidfd on it; :meth:`Launch.kill_namespace` SIGKILLs that process, and the kernel then
  kills every process of the sandbox's PID namespace, including ones that left the run's process
  tree, changed session or cleared their parent-death signal;
- when tirl runs as root (and the kernel lets it mount), the writable places (``/work``, ``/tmp``,
  ``/dev/shm``) are one tmpfs with a size **and an inode** cap. bwrap (0.8) can cap only the size, so
  the command runs ``unshare --mount`` + ``mount -t tmpfs -o size=..,nr_inodes=..`` over the empty
  host directory :data:`MOUNT_POINT` in a private mount namespace (the host's mount table does not
  change, and the tmpfs dies with the sandbox), then ``setpriv`` drops to the sandbox's uid and
  executes bwrap, which binds the three directories. Without root, bwrap's own size-capped tmpfs are
  used and the number of files is not limited (documented in :mod:`tirl.sandbox.bwrap`);
- a memory cgroup (:mod:`tirl.sandbox._cgroup`) where the host has a writable one: the first process
  joins it between fork and exec (:meth:`Launch.preexec`, the ``preexec_fn`` of the caller's
  ``Popen``), so all of the sandbox's memory is charged there (:meth:`Launch.read_info` kills a sandbox
  whose PID 1 is not in it: a caller that forgot ``preexec``); :meth:`Launch.finish` removes it. Without
  one, the seccomp filter refuses the calls whose memory nothing else would count.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

from tirl.sandbox._cgroup import MemoryCgroup
from tirl.sandbox._seccomp import filter_fd

MOUNT_POINT = "/run/tirl-sandbox"
DEFAULT_INODES = 16384

_WRAP = (
    'u=$1 s=$2 n=$3 m=$4; shift 4; mount -t tmpfs -o "size=$s,nr_inodes=$n,mode=0755,uid=$u,gid=$u" tirl "$m" '
    '&& mkdir -m 0755 "$m/work" "$m/tmp" "$m/shm" && chown "$u:$u" "$m/work" "$m/tmp" "$m/shm" '
    '&& exec setpriv --reuid="$u" --regid="$u" --clear-groups -- "$@"'
)


def wrapper(uid: int, size_bytes: int, inodes: int) -> list[str]:
    """The root-only prefix that mounts the capped tmpfs in a private mount namespace, then becomes ``uid``."""
    sh = ["/bin/sh", "-c", _WRAP, "sh", str(uid), str(size_bytes), str(inodes), MOUNT_POINT]
    return [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--", *sh]


@functools.cache
def can_mount() -> bool:
    """Whether this process may build the inode-capped tmpfs (root, and a kernel that lets it mount)."""
    if os.geteuid() != 0 or not all(shutil.which(b) for b in ("unshare", "setpriv", "mount")):
        return False
    try:
        os.makedirs(MOUNT_POINT, mode=0o755, exist_ok=True)
        argv = [*wrapper(65534, 1 << 20, 64), "/bin/true"]
        return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass
class Launch:
    """One sandbox's command line and descriptors; call :meth:`started` once the process runs."""

    argv: list[str]
    pass_fds: tuple[int, ...]
    info_r: int
    uid: int | None  # the sandbox's uid when we are root
    user: int | None  # the uid to start the command as (None: our own, or the command switches itself)
    _child_fds: list[int] = field(default_factory=list)
    pidfd: int | None = None
    pid1: int | None = None  # the host pid of the sandbox's PID 1 (for accounting; kill through ``pidfd``)
    cgroup: MemoryCgroup | None = None  # the sandbox's memory cgroup (None: the host has none for us)
    unjoined: bool = False  # its PID 1 was not in the cgroup: killed at once (a caller forgot ``preexec``)

    def preexec(self) -> None:
        """In the child, before it executes: join the memory cgroup (the caller's ``preexec_fn``)."""
        if self.cgroup is not None:
            self.cgroup.join()

    def oom_killed(self) -> bool:
        """Whether the OOM killer killed a process of this sandbox (always False without a cgroup)."""
        return self.cgroup is not None and self.cgroup.oom_kills() > 0

    def started(self) -> None:
        """Close our copies of the descriptors the child inherited."""
        for fd in self._child_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._child_fds = []

    def read_info(self) -> None:
        """Read bwrap's info (blocking until bwrap wrote it or exited) and open a pidfd on the sandbox's PID 1."""
        data = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(self.info_r, 4096):
                data += chunk
        self.close_info()
        try:
            pid = int(json.loads(data)["child-pid"])
        except (ValueError, KeyError, TypeError):
            return  # bwrap failed before it started the sandbox: nothing to kill
        with contextlib.suppress(OSError):
            self.pidfd = os.pidfd_open(pid)
            self.pid1 = pid
        if self.cgroup is not None and self.cgroup.outside(pid):
            # Started without :meth:`preexec`: its memory would not be limited (and the filter lets memfd
            # through, counting on the cgroup). Fail closed.
            self.unjoined = True
            self.kill_namespace()

    def close_info(self) -> None:
        if self.info_r >= 0:
            with contextlib.suppress(OSError):
                os.close(self.info_r)
            self.info_r = -1

    def kill_namespace(self) -> None:
        """SIGKILL the sandbox's PID 1: the kernel kills the whole PID namespace with it (idempotent)."""
        self.started()
        self.close_info()
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None

    def finish(self, wait_s: float = 2.0) -> None:
        """Kill the namespace and remove the memory cgroup once its processes are gone (blocking up to ``wait_s``)."""
        self.kill_namespace()
        if self.cgroup is not None:
            self.cgroup.remove(wait_s)


def prepare(
    bwrap: list[str],
    prog: list[str],
    *,
    uid: int | None,
    capped: bool,
    disk_mb: int,
    inodes: int,
    memory_mb: int,
) -> Launch:
    """Wrap ``bwrap`` (its argv, without ``--``) and ``prog`` with the seccomp and info descriptors.

    With ``capped`` (root) it also runs in the inode-capped tmpfs; ``bwrap`` must then bind
    :data:`MOUNT_POINT`'s directories. ``memory_mb`` limits the sandbox's memory cgroup, when there is one.
    """
    cgroup = MemoryCgroup.create(memory_mb)
    seccomp = filter_fd(cgroup=cgroup is not None)
    info_r, info_w = os.pipe()
    os.set_inheritable(info_r, False)
    argv = [*bwrap, "--seccomp", str(seccomp), "--info-fd", str(info_w), "--", *prog]
    if capped and uid is not None:
        argv = [*wrapper(uid, disk_mb * 1024 * 1024, inodes), *argv]
    user = None if capped else uid
    return Launch(argv, (seccomp, info_w), info_r, uid, user, _child_fds=[seccomp, info_w], cgroup=cgroup)
