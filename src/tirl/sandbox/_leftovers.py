"""What a run may leave behind in a sandbox: processes, SysV IPC objects, entries of a tmpfs mount, unix sockets.

Standard library only: the warm pool's fork server runs this source inside the sandbox (it is put in
front of ``_server.py``'s, see :data:`tirl.sandbox.pool.SERVER_SOURCE`), and uses it between runs.

POSIX message queues are files of the sandbox's own ``mqueue`` mount (``/dev/mqueue``, which bwrap mounts
for the pool's servers), emptied like the other directories. Not covered: files, which :mod:`tirl.sandbox._tree`
removes.

Unix sockets in flight (sent over a unix socket with ``SCM_RIGHTS`` and never received, e.g. a pair sent over
itself) outlive every process of the run: only the kernel's garbage collector frees them, asynchronously, and
their buffers stay charged to the sandbox's memory cgroup until it has (:func:`unix_sockets_freed`).
"""

import ctypes
import os
import time

LIBC = ctypes.CDLL(None)
# tmpfs and mqueue give a directory a size of 20 bytes per entry, counting "." and "..": 40 is an empty one.
EMPTY_TMPFS_DIR = 40


def remove_sysv_ipc():
    """Remove the SysV shared memory, queues and semaphores of this IPC namespace (all are ours)."""
    for kind, func in (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl")):
        try:
            fd = os.open(f"/proc/sysvipc/{kind}", os.O_RDONLY)
        except OSError:
            continue
        data = b""
        try:
            while chunk := os.read(fd, 1 << 16):
                data += chunk
        except OSError:
            pass
        finally:
            os.close(fd)
        ids = [int(line.split()[1]) for line in data.split(b"\n")[1:] if line.strip()]
        for ident in ids:
            if kind == "sem":
                LIBC.semctl(ident, 0, 0)  # IPC_RMID
            else:
                getattr(LIBC, func)(ident, 0, None)


def unix_sockets_freed(limit_s):
    """Wait up to ``limit_s`` until this network namespace has no unix socket left; whether none is left.

    Red team, session 49: 40 socket pairs sent over themselves with full buffers held ~300 MB of the server's
    memory cgroup after the run's processes were gone, until the kernel's collector ran (within ~0.3 s here),
    so the next run on the server was killed for memory it never took, or could not get its limit set.
    ``/proc/net/unix`` lists the reader's network namespace: call it only with a namespace of one's own and
    no unix socket of one's own (a pool server). True as well when it cannot be read (nothing to wait on).
    """
    end = time.monotonic() + limit_s
    polls = 0
    while True:
        try:
            fd = os.open("/proc/net/unix", os.O_RDONLY | os.O_CLOEXEC)
            try:
                head = os.read(fd, 512)  # the header line, and the first socket's line if there is one
            finally:
                os.close(fd)
        except OSError:
            return True
        if head.count(b"\n") <= 1:
            return True
        if time.monotonic() >= end:
            return False
        if polls % 50 == 0:
            _kick_unix_gc()
        polls += 1
        time.sleep(0.001)


def _kick_unix_gc():
    """Close a unix socket of our own: the kernel then schedules its collector if sockets are in flight.

    Needed when the run's sockets were closed (in flight only) before the run ended: the end of its processes
    then releases no unix socket, and nothing else would start the collector.
    """
    fds = (ctypes.c_int * 2)()
    if LIBC.socketpair(1, 1, 0, fds) == 0:  # AF_UNIX, SOCK_STREAM
        os.close(fds[0])
        os.close(fds[1])


def sized_mounts(paths):
    """Those of ``paths`` that are tmpfs or mqueue mount points (the last mount on a path is the one seen).

    An empty directory of either is told by its size (:data:`EMPTY_TMPFS_DIR`).
    """
    fstype = {}
    with open("/proc/self/mountinfo", "rb") as f:
        for fields, _, tail in (line.partition(" - ") for line in f.read().decode("utf-8", "replace").splitlines()):
            fstype[(fields.split(" ") + [""] * 5)[4]] = tail.split(" ")[0]
    return {p for p in paths if fstype.get(p) in ("tmpfs", "mqueue")}


def descendants(root):
    """Pids whose parent chain reaches ``root`` (live, non-zombie), from /proc."""
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        parent[int(name)] = int(fields[1])
    found = []
    for pid in parent:
        p, seen = pid, 0
        while p in parent and seen < 4096:
            p = parent[p]
            seen += 1
            if p == root:
                found.append(pid)
                break
    return found
