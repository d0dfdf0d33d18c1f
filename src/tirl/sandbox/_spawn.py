"""Run one command as a child process group: capped output, rlimits, a wall-clock kill.

**How the child is set up.** The child has to join the sandbox's memory cgroup, drop to the sandbox's uid
and take its rlimits before the command runs. A ``preexec_fn`` (or ``user=``) would do that, but either
makes CPython start the child with ``fork()``, which copies the whole parent's page tables: from a
trainer holding a model (1.3 GB resident) that measured 54-73 ms and ~25 ms of kernel time per command,
against ~1 ms with the ``vfork()`` CPython uses otherwise (``benchmarks/bench_sandbox_spawn.py``). So
when the system's helpers are there (:func:`setup_chain`: ``/bin/sh``, util-linux's ``setpriv`` and
``prlimit``), the command is started behind them instead: ``sh`` writes the cgroup's ``cgroup.procs``
(still with our credentials), ``setpriv`` drops to the uid with no supplementary groups, ``prlimit``
sets the rlimits, each ``exec``-ing the next, so the command runs as the same process with the same
set-up. Without them it falls back to ``preexec_fn``. Not covered: a helper that fails (it exits with its
own status and message, which the caller sees as the command's) — a missing cgroup join is still caught
by :meth:`~tirl.sandbox._launch.Launch.read_info`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.sandbox._common import CappedBuffer, Limits, apply_rlimits, build_result, rlimit_values
from tirl.sandbox._launch import Launch
from tirl.sandbox.base import ExecResult

# After the main process exits, how long a background child may keep the pipes open.
_DRAIN_GRACE_S = 0.2
#: where the set-up helpers are looked up (never the caller's PATH)
HELPER_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
#: joins the cgroup named by $0, then becomes the rest of the command line
_JOIN_SCRIPT = 'printf 0 > "$0" && exec "$@"'


@dataclass(frozen=True, slots=True)
class Helpers:
    """Absolute paths of the programs :func:`setup_chain` puts in front of a command."""

    sh: str
    setpriv: str
    prlimit: str


@functools.cache
def helpers() -> Helpers | None:
    """The set-up helpers on this host, or None when one is missing (then ``preexec_fn`` does the set-up)."""
    found = [shutil.which(name, path=HELPER_PATH) for name in ("sh", "setpriv", "prlimit")]
    if any(path is None for path in found):
        return None
    sh, setpriv, prlimit = (str(path) for path in found)
    return Helpers(sh=sh, setpriv=setpriv, prlimit=prlimit)


def setup_chain(
    found: Helpers | None, limits: Limits | None, user: int | None, cgroup_procs: Path | None
) -> list[str] | None:
    """The argv prefix that joins ``cgroup_procs``, drops to ``user`` and sets ``limits``, in that order.

    None when ``found`` is None (no helpers). An empty list when there is nothing to set up. ``setpriv``
    comes before ``prlimit`` so that the process limit cannot refuse the uid switch.
    """
    if found is None:
        return None
    prefix: list[str] = []
    if cgroup_procs is not None:
        prefix += [found.sh, "-c", _JOIN_SCRIPT, str(cgroup_procs)]
    if user is not None:
        prefix += [found.setpriv, f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"]
    if limits is not None:
        prefix += [found.prlimit, *(f"--{name}={value}:{value}" for name, _, value in rlimit_values(limits)), "--"]
    return prefix


async def _pump(stream: asyncio.StreamReader | None, buf: CappedBuffer) -> None:
    if stream is None:
        return
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        buf.feed(chunk)


async def _drain(proc: asyncio.subprocess.Process, pumps: asyncio.Future[Any], grace_s: float) -> None:
    """Let the output pumps finish for ``grace_s`` after the exit, then close our pipe ends."""
    try:
        await asyncio.wait_for(asyncio.shield(pumps), grace_s)
    except TimeoutError:
        # A child that left the process group still holds the pipes; stop listening.
        pumps.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumps
    transport = getattr(proc, "_transport", None)  # close our pipe ends now, not at garbage collection
    if transport is not None:
        transport.close()


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _child_setup(
    argv: Sequence[str], limits: Limits | None, user: int | None, launch: Launch | None
) -> tuple[list[str], Callable[[], None] | None, int | None]:
    """The argv, ``preexec_fn`` and ``user`` to start the child with: behind the helpers when they are there."""
    cgroup = launch.cgroup if launch is not None else None
    chain = setup_chain(helpers(), limits, user, cgroup.procs_path if cgroup is not None else None)
    if chain is not None:  # the helpers set the child up: no preexec_fn, no user=, so CPython can vfork
        return [*chain, *argv], None, None

    def _pre() -> None:
        if launch is not None:
            launch.preexec()
        if limits is not None:
            apply_rlimits(limits)

    return list(argv), _pre, user


async def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    limits: Limits | None,
    max_chars: int,
    user: int | None = None,
    pass_fds: Sequence[int] = (),
    kill_grace_s: float = _DRAIN_GRACE_S,
    launch: Launch | None = None,
) -> ExecResult:
    """Start ``argv`` in a new session, collect its output, kill its process group at the deadline.

    ``limits`` become rlimits of the child (inherited by all it starts);
    ``user`` (only when we are root) switches the child to that uid/gid first;
    ``launch`` (a bubblewrap sandbox): its descriptors are passed, the child joins its memory cgroup
    before it executes, its whole PID namespace is killed when the program ends or at the deadline,
    whichever comes first, and an OOM kill in its cgroup is reported as ``memory_exceeded``.
    """
    if launch is not None:
        pass_fds = (*pass_fds, *launch.pass_fds)
    timeout_s = limits.timeout_s if limits else 30.0
    out, err = CappedBuffer(max_chars * 4), CappedBuffer(max_chars * 4)

    argv, pre, user = _child_setup(argv, limits, user, launch)
    start = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(cwd),
            env=env,
            start_new_session=True,
            preexec_fn=pre,
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
            pass_fds=tuple(pass_fds),
        )
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an argument
        return build_result(
            out, err, None, timed_out=False, wall_s=0.0, max_chars=max_chars, error=f"could not start: {exc}"
        )
    if launch is not None:
        launch.started()
        await asyncio.to_thread(launch.read_info)
    pumps = asyncio.gather(_pump(proc.stdout, out), _pump(proc.stderr, err))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        timed_out = True
    finally:
        # Whatever happened, nothing of the group (or of the sandbox's PID namespace) may outlive the call.
        if launch is not None:
            launch.kill_namespace()
        # The child leads its own session (start_new_session), so the group kill reaches it. Never
        # proc.kill(): Popen.send_signal polls (waitpid WNOHANG) first, which could reap the child under
        # asyncio's watcher thread, and the watcher then reports exit status 255 ("Unknown child process").
        _killpg(proc.pid)
    await proc.wait()
    await _drain(proc, pumps, kill_grace_s)
    wall = time.monotonic() - start
    if launch is not None and launch.unjoined:
        error = "the sandbox was not in its memory cgroup and was killed (start it with preexec_fn=Launch.preexec)"
        return build_result(out, err, None, timed_out=False, wall_s=wall, max_chars=max_chars, error=error)
    oom = launch is not None and launch.oom_killed()
    return build_result(
        out, err, proc.returncode, timed_out=timed_out, wall_s=wall, max_chars=max_chars, oom_killed=oom
    )
