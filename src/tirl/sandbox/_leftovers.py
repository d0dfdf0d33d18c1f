"""What a run may leave behind in a sandbox: processes, SysV IPC objects, entries of a tmpfs mount.

Standard library only: the warm pool's fork server runs this source inside the sandbox (it is put in
front of ``_server.py``'s, see :data:`tirl.sandbox.pool.SERVER_SOURCE`), and uses it between runs.

POSIX message queues are files of the sandbox's own ``mqueue`` mount (``/dev/mqueue``, which bwrap mounts
for the pool's servers), emptied like the other directories. Not covered: files, which :mod:`tirl.sandbox._tree`
removes.
"""

import ctypes
import os

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
