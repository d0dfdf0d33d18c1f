"""The bubblewrap backend: one fresh, isolated interpreter per execution.

Each run starts ``bwrap`` with new user, PID, network, IPC, UTS and cgroup
namespaces and a root file system built from scratch. When tirl runs as root,
``bwrap`` itself is started under an unprivileged uid (a fresh one per run),
so the sandboxed code is an ordinary user on the host, and the kernel's
process-count limit applies to it.

Covered:
    - **network**: a new, empty network namespace (``--unshare-net``): no
      interface but the sandbox's own loopback (bwrap brings ``lo`` up), no DNS
      (no ``/etc/resolv.conf``); listeners on the host's 127.0.0.1 are
      unreachable; no socket family a network namespace does not scope
      (``AF_VSOCK``: the seccomp filter allows only unix, inet, inet6, netlink);
    - **file system**: ``/usr`` (and the ``/bin``, ``/lib`` links) read-only;
      no ``/home``, ``/root``, project directory or host ``/tmp``; a private,
      size-limited writable workspace ``/work`` (or the caller's ``workdir``,
      bound there), a private ``/tmp`` and ``/dev/shm``; all else, the root
      included, is read-only; nothing is left on the host after the run (the
      writable places are tmpfs);
    - **system calls**: the seccomp filter of :mod:`tirl.sandbox._seccomp`
      (no ptrace, ``process_vm_*``, keyring, bpf, perf, userfaultfd, mount or
      namespace calls);
    - **processes**: a new PID namespace, so the parent and other host
      processes are invisible; ``--die-with-parent``; when the program ends
      or at the deadline the namespace's PID 1 is killed through a pidfd
      (:mod:`tirl.sandbox._launch`), which takes every process of the
      namespace with it, including ``setsid`` daemons and processes that
      cleared their parent-death signal; nested user namespaces are disabled;
      PID 1's memory (``/proc/1/mem``, ``/proc/1/task/1/mem``) is masked, since
      bwrap's own init runs as the code's uid and is dumpable; ``/proc/sys`` is
      read-only (the sandbox's IPC and PID namespace sysctls would otherwise be
      writable, and a pool server's outlive its runs);
    - **resources**: rlimits on CPU time, address space, process count, file
      size, open files and core dumps (1 byte: no dump, also to a pipe
      helper); a wall-clock timeout; the bytes in the writable places, and,
      as root, their number of files (one tmpfs with ``nr_inodes``, mounted
      in a private mount namespace);
    - **memory as a whole**, where tirl can write a cgroup hierarchy (as root):
      the run's own memory cgroup (:mod:`tirl.sandbox._cgroup`) limited to
      ``memory_mb`` charges processes, memfd, tmpfs files, shared memory and
      page cache together; an OOM kill there is ``memory_exceeded``;
    - **workdir**: handed to the sandbox's uid for the run and back to its
      owner afterwards, in a thread, at any depth, with set-id, sticky and
      group/world-write bits cleared;
    - **environment**: cleared; only ``PATH``, ``HOME``, ``TMPDIR``, locale and
      Python I/O settings are set;
    - **output**: cut to head + marker + tail; invalid UTF-8 becomes U+FFFD.

Not covered:
    - kernel exploits through the system calls the filter allows (no VM boundary);
    - without root, the number of files in the writable places (bwrap 0.8
      has no inode cap) and the total size of a bound ``workdir``;
    - memory as a whole without a memory cgroup: the address-space limit is
      per process, so N processes may use N times the limit (the process-count
      limit bounds N), and tmpfs files are bounded by their caps only;
      ``memfd_create``, ``memfd_secret`` and ``shmget`` are then refused;
    - CPU share and I/O bandwidth (no CPU or I/O limits): a run can slow its
      neighbours down until its deadline;
    - on kernels before 5.14 (no per-user-namespace counts) the process-count
      limit counts all processes of the uid, not just the sandbox's;
    - reading world-readable files under ``/usr`` (that is the point of a
      read-only system).
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Unpack

from tirl.errors import SetupError
from tirl.sandbox._common import CLEAN_ENV, Limits, argv_result
from tirl.sandbox._launch import DEFAULT_INODES, MOUNT_POINT, Launch, can_mount, prepare
from tirl.sandbox._seccomp import seccomp_problem
from tirl.sandbox._spawn import spawn
from tirl.sandbox._tree import restore_tree
from tirl.sandbox.base import ExecResult, RunDefaults, RunRequest, Sandbox

WORK = "/work"
TMP = "/tmp"
SHM = "/dev/shm"
MQUEUE = "/dev/mqueue"  # the IPC namespace's POSIX message queues as files, so a pool server can remove them
_UID_BASE = 200_000
_UID_SPAN = 100_000


def sandbox_uid() -> int | None:
    """A fresh unprivileged uid for one sandbox when we are root, else None (keep our own).

    Drawn from the OS's entropy, not the ``random`` module: training seeds and restores that module's state
    (a resumed run replays its checkpoint's), so two runs or two test workers would draw the same uids, and
    sandboxes sharing a uid can signal and inspect each other's processes.
    """
    if os.geteuid() != 0:
        return None
    return _UID_BASE + secrets.randbelow(_UID_SPAN)


def _world_reachable(path: Path) -> bool:
    """Whether every directory above ``path`` can be traversed by any user."""
    for parent in path.parents:
        try:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


@functools.cache
def sandbox_python() -> str:
    """The interpreter used inside the sandbox: the base (non-venv) one we run on, if reachable.

    A virtual environment lives in the project directory, which the sandbox
    hides, so the base installation is used; when it is not reachable by an
    unprivileged uid (e.g. pyenv under ``/root``), ``/usr/bin/python3``.
    """
    base = Path(os.path.realpath(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable))
    if os.geteuid() != 0 or _world_reachable(base):
        return str(base)
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    return str(base)


def _python_prefix(python: str) -> Path | None:
    """The installation directory to bind for ``python`` (None when it lives in /usr).

    Refuses a "prefix" that is not a Python installation or that would expose
    the home or current directory (e.g. an interpreter in ``~/bin``).
    """
    prefix = Path(python).resolve().parent.parent
    if prefix == Path("/usr") or Path("/usr") in prefix.parents:
        return None
    exposed = [Path.home().resolve(), Path.cwd().resolve()]
    if not any((prefix / "lib").glob("python3*")) or any(p == prefix or prefix in p.parents for p in exposed):
        raise SetupError(
            f"the sandbox interpreter {python} is not in a self-contained installation that can be "
            "bound read-only without exposing the home or project directory; install Python under "
            "/usr or /opt (or pass python= to the sandbox)"
        )
    return prefix


def bwrap_argv(
    *,
    python: str,
    workdir: Path | None = None,
    tmp_mb: int = 64,
    hostname: str = "sandbox",
    as_pid_1: bool = False,
    capped: bool = False,
) -> list[str]:
    """The ``bwrap ...`` arguments (without ``--``) that build the sandbox described in the module docstring.

    ``as_pid_1``: the program itself is the PID namespace's init (no bwrap reaper inside);
    ``capped``: ``/work``, ``/tmp`` and ``/dev/shm`` are bound from the inode-capped tmpfs that
    :func:`tirl.sandbox._launch.wrapper` mounts (else bwrap's own size-capped tmpfs).
    """
    size = str(tmp_mb * 1024 * 1024)
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
    ]
    if as_pid_1:
        argv.append("--as-pid-1")
    argv += ["--new-session", "--hostname", hostname, "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "sbin"):
        host = Path("/") / name
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    for etc in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives"):
        argv += ["--ro-bind-try", f"/etc/{etc}", f"/etc/{etc}"]
    prefix = _python_prefix(python)
    if prefix is not None:
        argv += ["--ro-bind", str(prefix), str(prefix)]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    # PID 1 (bwrap's own init, or the pool's server) runs as the code's uid: bwrap's init is dumpable, and its
    # /proc/1/mem was open for writing, so the code could rewrite PID 1's code (red team, session 44). Masked.
    for mem in ("/proc/1/mem", "/proc/1/task/1/mem"):
        argv += ["--ro-bind", "/dev/null", mem]
    # The sysctls of the sandbox's own IPC and PID namespaces (shmmax, msgmni, sem, mqueue limits, pid_max) are
    # writable by the code's uid, and a pool server's namespaces outlive its runs: pid_max = 301 left every later
    # run on that server unable to fork (red team, session 45). Read-only. What /proc/sys shows is chosen by the
    # reader's namespaces, so the host's, bound here, reads as the sandbox's own (bwrap binds from the host).
    argv += ["--ro-bind", "/proc/sys", "/proc/sys"]
    if capped:
        argv += ["--bind", f"{MOUNT_POINT}/shm", SHM, "--bind", f"{MOUNT_POINT}/tmp", TMP]
    else:
        argv += ["--size", size, "--tmpfs", SHM, "--size", size, "--tmpfs", TMP]
    if workdir is not None:
        argv += ["--bind", str(workdir), WORK]
    elif capped:
        argv += ["--bind", f"{MOUNT_POINT}/work", WORK]
    else:
        argv += ["--size", size, "--tmpfs", WORK]
    # Everything else (the root, /etc, /dev itself) read-only: the writable places are exactly the three tmpfs
    # and the IPC namespace's own mqueue (its queues as files).
    argv += ["--mqueue", MQUEUE, "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORK, "--clearenv"]
    for key, value in dict(CLEAN_ENV, HOME=WORK, TMPDIR="/tmp").items():
        argv += ["--setenv", key, value]
    return argv


def launch(
    *,
    python: str,
    prog: list[str],
    workdir: Path | None = None,
    disk_mb: int = 64,
    inodes: int = DEFAULT_INODES,
    as_pid_1: bool = False,
    memory_mb: int = 1024,
) -> Launch:
    """Everything needed to start one sandbox running ``prog``.

    The seccomp filter, the info descriptor, the capped tmpfs as root, and a memory cgroup of
    ``memory_mb`` where the host has one (its caller passes :meth:`Launch.preexec` as ``preexec_fn``).
    """
    uid = sandbox_uid()
    capped = uid is not None and can_mount()
    argv = bwrap_argv(python=python, workdir=workdir, tmp_mb=disk_mb, as_pid_1=as_pid_1, capped=capped)
    return prepare(argv, prog, uid=uid, capped=capped, disk_mb=disk_mb, inodes=inodes, memory_mb=memory_mb)


@functools.cache
def bwrap_problem() -> str | None:
    """None when bubblewrap can build the sandbox here, else why not (cached)."""
    if shutil.which("bwrap") is None:
        return "the bwrap binary is not installed (apt-get install bubblewrap)"
    if (problem := seccomp_problem()) is not None:
        return problem
    try:
        start = launch(python=sandbox_python(), prog=[sandbox_python(), "-I", "-c", "pass"])
    except SetupError as exc:
        return str(exc)
    uid = start.user
    try:
        proc = subprocess.run(
            start.argv,
            capture_output=True,
            text=True,
            timeout=30,
            user=uid,
            group=uid,
            extra_groups=[] if uid else None,
            pass_fds=start.pass_fds,
            preexec_fn=start.preexec,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not start: {exc}"
    finally:
        start.finish()
    if proc.returncode != 0:
        return f"bwrap failed (status {proc.returncode}): {proc.stderr.strip()[:300]}"
    return None


def give_to(path: Path, uid: int | None, owner: tuple[int, int] | None = None) -> None:
    """Hand ``path`` and everything below it to the sandbox's ``uid`` (``owner`` None), or back to ``owner``.

    Handing back also clears set-id, sticky and group/world-write bits that the run may have left.
    Any depth works (:mod:`tirl.sandbox._tree`). Blocking: call it in a thread.
    """
    if owner is None:
        if uid is not None:
            restore_tree(str(path), (uid, uid), strip=False)
        return
    restore_tree(str(path), owner if uid is not None else None, strip=True)


class BwrapSandbox(Sandbox):
    """A fresh bubblewrap sandbox and interpreter per run (see the module docstring for coverage)."""

    name = "bwrap"

    def __init__(self, *, disk_mb: int = 64, python: str | None = None, **defaults: Unpack[RunDefaults]) -> None:
        self._set_defaults(defaults)
        self.disk_mb = disk_mb
        self.python = python or sandbox_python()
        self.uids: set[int] = set()  # every uid this backend ran code as (for audits and tests)

    async def _run(self, req: RunRequest) -> ExecResult:
        """Run ``req.code`` in a fresh sandbox; ``req.session`` is accepted but state is not kept."""
        code, workdir = req.code, req.workdir
        limits = Limits(timeout_s=req.timeout_s, memory_mb=req.memory_mb, fsize_mb=self.disk_mb)
        if (refused := argv_result(code)) is not None:  # bash -c / python -c: the code is an argument
            return refused
        prog = [self.python, "-I", "-c", code] if req.lang == "python" else ["/bin/bash", "-c", code]
        owner = None
        if workdir is not None:
            workdir = Path(workdir).resolve()
            if os.geteuid() == 0 and not _world_reachable(workdir):
                return ExecResult(
                    "",
                    "",
                    None,
                    error=f"workdir {workdir} is not reachable by the sandbox's unprivileged user (a parent "
                    "directory is not searchable by others, e.g. mode 0700); create workspaces under a "
                    "world-searchable directory such as /tmp or /var/tmp",
                )
            st = os.stat(workdir)
            owner = (st.st_uid, st.st_gid)
        start = launch(python=self.python, prog=prog, workdir=workdir, disk_mb=self.disk_mb, memory_mb=req.memory_mb)
        if start.uid is not None:
            self.uids.add(start.uid)
        try:
            if workdir is not None:
                await asyncio.to_thread(give_to, workdir, start.uid)
            return await spawn(
                start.argv,
                cwd=Path("/"),
                env={},
                limits=limits,
                max_chars=self.max_output_chars,
                user=start.user,
                launch=start,
            )
        finally:
            start.kill_namespace()
            await asyncio.to_thread(start.finish)  # the memory cgroup goes once its processes have exited
            if workdir is not None:
                await asyncio.to_thread(give_to, workdir, start.uid, owner)

    async def end_session(self, session: str) -> None:
        """Nothing to forget: this backend keeps no state between runs."""

    async def close(self) -> None:
        """Nothing to stop: every run's namespace dies with it."""
