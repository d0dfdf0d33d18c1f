"""The warm pool: long-lived fork servers, so an execution does not pay interpreter start-up.

The pool keeps ``size`` fork servers (:mod:`tirl.sandbox._server`). With
``isolate=True`` each one runs inside its own bubblewrap sandbox, exactly the
one :mod:`tirl.sandbox.bwrap` builds, under its own unprivileged uid when tirl
runs as root. A server has already imported the usual modules (math,
fractions, itertools, collections, re, json, decimal, statistics...). For each
execution a fresh child, forked after the previous run's cleanup, takes the
request from the host's pipe, closes that pipe, puts itself in a new session
(not the server's: a session shares its scheduler autogroup), applies the
rlimits and runs the code in the private workspace. The host talks to a
server over its stdin/stdout in the binary frames of :mod:`tirl.sandbox._wire`.

A server runs one execution at a time. Afterwards it kills every process that
execution left behind, empties the workspace, ``/tmp`` and ``/dev/shm`` and
removes SysV IPC objects and POSIX message queues (``/dev/mqueue``, the IPC
namespace's own mqueue), so nothing of one execution (globals, files,
processes, shared memory, queues) is visible to the next. The rest of the
sandbox's file system is read-only. With ``isolate=True`` the server is the sandbox's
PID 1 (bwrap ``--as-pid-1``) and undumpable, under the seccomp filter: no
process can ptrace it, open its descriptors or signal it, and ``kill(-1)``
reaches every other process of the namespace. Every request carries a nonce
that its answer must repeat, and the server announces itself ready after each
cleanup (the next request is read only then); one that does not within a few
seconds is replaced and the request, which never ran, goes to a fresh one.
Closing the pool kills each server's whole PID namespace; a pool dropped without
``close()`` does the same for each server when it is garbage-collected, or at
interpreter exit (a ``weakref.finalize`` per server).

Sessions (``run(..., session=key)``) are notebook-like. The first run of a key
starts a dedicated server (in its own sandbox) with one long-lived kernel
process. Every run of that key executes in the kernel's globals, so variables,
files in the workspace and ``/tmp`` survive between the session's own turns
and nothing else can see them. A run that times out kills the kernel. The
result then says that the state was lost, and the next run starts afresh; a
kernel that ended between runs (its code's doing) is replaced by the next run,
whose result says the same (never a sandbox ``error``). A session turn is one
message on the kernel's socket: code over the command-line limit (128 KiB) fails
as a program (:func:`~tirl.sandbox._common.session_result`), not the server.
:meth:`WarmPool.end_session` frees it.

The kernel's status reply carries its turn's nonce, and the session server drops
any other message: code that queues status replies on the kernel's socket can
end no later turn early.

Covered (``isolate=True``): everything the bubblewrap backend covers (see
:mod:`tirl.sandbox.bwrap`), per execution. The network, file system and
environment are isolated. Timeouts, rlimits and the cleanup of processes and
files are enforced by the server inside the sandbox. What outlives a run and
the cleanup cannot reset is kept from the code: the server's own rlimits,
priority, CPUs and I/O class (the seccomp filter refuses those calls on pid 1)
and its namespaces' sysctls (``/proc/sys`` is read-only). Where a memory cgroup can
be made, each server (and all its runs' processes and files) is in its own,
limited to each run's ``memory_mb`` before the run; an OOM kill there during a
run makes it ``memory_exceeded`` (when it took the server, the server is
replaced).

Not covered:
    - everything :mod:`tirl.sandbox.bwrap` does not cover;
    - within one server, executions follow each other in the same sandbox.
      The cleanup between them is done by the server (kill the leftover
      processes, empty the workspace and ``/tmp``), not by a new namespace.
      An execution that could corrupt the server itself (e.g. through a
      kernel bug) could see the next one; the host replaces a server that
      stops answering or answers out of turn;
    - the PID counter and the tmpfs inode counter outlive a run on its server:
      a run can tell how many processes and files the runs before it created
      (a covert channel of a few bits per run between runs that cooperate);
    - TCP sockets in ``TIME_WAIT`` on the server's loopback outlive a run by
      up to 60 s: the next run sees their ports and cannot bind them (a wider
      channel; closing it needs privileges in the server's network namespace);
    - a thread that session code leaves in the kernel runs during the
      session's later turns (it is session state) and can read their nonce;
    - a session kernel's CPU rlimit is re-armed before each run, but its
      hard limit is open, so code can raise it. The wall-clock timeout still
      kills it;
    - ``workdir=``: the servers have their own workspaces. A run that passes
      a host ``workdir`` is handed to a fresh :class:`~tirl.sandbox.bwrap.BwrapSandbox`
      (slower, same isolation; with ``isolate=False`` a fresh
      :class:`~tirl.sandbox.process.ProcessSandbox`), and ``session`` is then
      ignored.

With ``isolate=False`` the servers are plain processes: same speed and
sessions, but none of the isolation, exactly as documented in
:mod:`tirl.sandbox.process`. Only the leftover cleanup is stronger there,
because of the subreaper.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

from tirl.sandbox._common import CLEAN_ENV, argv_result, build_result, nul_result, session_result
from tirl.sandbox._launch import DEFAULT_INODES, Launch
from tirl.sandbox._wire import FRAME, OP_RUN, READY, decode_answer, encode_request, frame
from tirl.sandbox.base import ExecResult, RunDefaults, RunRequest, Sandbox
from tirl.sandbox.bwrap import MQUEUE, SHM, TMP, WORK, BwrapSandbox, launch, sandbox_python
from tirl.sandbox.process import WARNING, ProcessSandbox

_HERE = Path(__file__).parent
# The server runs the tree walker's, the wire format's, the output capture's and the leftovers' sources first
# (only the standard library is importable inside the sandbox).
_PARTS = ("_tree.py", "_wire.py", "_capture.py", "_leftovers.py", "_server.py")
SERVER_SOURCE = "\n".join((_HERE / name).read_text() for name in _PARTS)
# ``python -c`` keeps the parsed tree of its program alive for as long as the program runs (for the server:
# forever, ~2 MB that every fork copies and every child tears down), so the program is this stub, and
# the source, its first argument, is compiled by ``compile``, which frees the tree before the server starts.
BOOT = "import sys; exec(compile(sys.argv.pop(1), '<tirl-server>', 'exec'))"
# Host-side margin over the program's timeout before a silent server is declared dead.
_SERVER_MARGIN_S = 5.0
# How long a started server may take to say it is ready (interpreter start-up, imports; a loaded machine).
_START_S = 60.0
# How long a used server's cleanup may take before it is replaced (the next run then goes to a fresh one).
_READY_S = 5.0
MAX_SESSIONS = 256


class ServerNotReady(Exception):
    """The server did not announce itself ready in time (stopped, stuck in cleanup, or gone)."""


class PoolClosed(Exception):
    """The pool was closed while a server was starting (that server is stopped) or before :meth:`WarmPool.start`."""


@dataclass(frozen=True, slots=True)
class _Call:
    """One encoded request (:mod:`tirl.sandbox._wire`) and what its answer is checked against."""

    body: bytes
    nonce: bytes
    timeout_s: float
    keep: int
    memory_mb: int


def _reap(proc: subprocess.Popen[bytes], tmp: Path | None, start: Launch | None) -> None:
    """Kill a server's PID namespace and process group, reap it, close its pipes, remove its host directory.

    A worker's finalizer (:class:`weakref.finalize` holds these, never the worker), so it runs exactly once: from
    :meth:`_Worker.kill`, when the worker is collected, or at interpreter exit.
    """
    if start is not None:
        start.kill_namespace()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    if start is not None:
        start.finish()  # its memory cgroup, once empty


class _Worker:
    """One fork server (a bwrap-ed or plain ``python -c _server.py`` process).

    Its pipes are non-blocking and watched only during a call, so the worker
    is not tied to one event loop's transports.
    """

    def __init__(
        self, proc: subprocess.Popen[bytes], uid: int | None, tmp: Path | None, start: Launch | None = None
    ) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.uid = uid
        self.tmp = tmp  # host directory of a non-isolated server
        self.start = start  # an isolated server's sandbox (its PID namespace is killed with it)
        self.fresh = True  # no request sent yet
        self.ooms = 0  # OOM kills counted in its memory cgroup so far
        self.lock = asyncio.Lock()
        self._in = proc.stdin.fileno()
        self._out = proc.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._buf = bytearray()
        # kill() calls it; a worker dropped without kill() (a pool never closed) is reaped when collected or at
        # interpreter exit, so its server and sandbox do not outlive it
        self._reaper = weakref.finalize(self, _reap, proc, tmp, start)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    async def _wait(self, fd: int, write: bool, deadline: float) -> None:
        """Until ``fd`` is ready (TimeoutError at ``deadline``, loop time); no task is made."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        def expire() -> None:
            if not fut.done():
                fut.set_exception(TimeoutError())

        (loop.add_writer if write else loop.add_reader)(fd, wake)
        timer = loop.call_at(deadline, expire)
        try:
            await fut
        finally:
            timer.cancel()
            (loop.remove_writer if write else loop.remove_reader)(fd)

    async def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._in, view) :]
            except BlockingIOError:
                await self._wait(self._in, True, deadline)

    async def _frame(self, deadline: float) -> bytes:
        """The body of the next frame from the server."""
        while True:
            if len(self._buf) >= 4:
                size = FRAME.unpack_from(self._buf)[0]
                if size > 1 << 26:
                    raise ConnectionError(f"a reply frame of {size} bytes")
                if len(self._buf) >= 4 + size:
                    body = bytes(self._buf[4 : 4 + size])
                    del self._buf[: 4 + size]
                    return body
            try:
                chunk = os.read(self._out, 1 << 16)
            except BlockingIOError:
                await self._wait(self._out, False, deadline)
                continue
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(self._buf), None)
            self._buf += chunk

    async def call(self, body: bytes, nonce: bytes, timeout_s: float) -> bytes:
        """Send one request body and return its answer body, whose nonce must match.

        The request is written at once; the server reads it only after its ready frame (sent when it
        starts and after each cleanup). :class:`ServerNotReady` when that frame does not come in time
        (the request then never ran).
        """
        loop = asyncio.get_running_loop()
        ready_by = loop.time() + (_START_S if self.fresh else _READY_S)
        self.fresh = False
        try:
            await self._write(frame(body), ready_by)
            if await self._frame(ready_by) != READY:
                raise ConnectionError("a frame other than the ready frame")
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            raise ServerNotReady(type(exc).__name__) from exc
        self.oom_killed()  # OOM kills before the ready frame (the last run's clean-up) are not this run's
        reply = await self._frame(loop.time() + timeout_s)
        if reply[1:9] != nonce:
            raise ConnectionError("a reply that does not answer this request")
        return reply

    def kill(self) -> None:
        """Kill the server's PID namespace and process group (its sandbox dies with it) and reap it (once)."""
        self._reaper()

    def limit(self, memory_mb: int) -> None:
        """Set the memory cgroup's limit for the next run (OSError: the kernel refused it)."""
        if self.start is not None and self.start.cgroup is not None:
            self.start.cgroup.set_limit(memory_mb)

    def oom_killed(self) -> bool:
        """Whether the OOM killer killed one of its processes since the last time this was asked.

        Asked when the ready frame comes and after the answer, so a run gets the kills between the two.
        """
        if self.start is None or self.start.cgroup is None:
            return False
        seen, self.ooms = self.ooms, self.start.cgroup.oom_kills()
        return self.ooms > seen

    async def stop(self) -> None:
        """Ask the server to finish (EOF on its input), and kill it if it does not within 2 s."""
        if self.alive and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            for _ in range(200):
                if not self.alive:
                    break
                await asyncio.sleep(0.01)
        self.kill()


class WarmPool(Sandbox):
    """Pre-started fork servers, optionally each inside bubblewrap (see the module docstring)."""

    def __init__(
        self,
        *,
        isolate: bool = True,
        size: int = 4,
        disk_mb: int = 64,
        inodes: int = DEFAULT_INODES,
        nproc: int = 64,
        python: str | None = None,
        warn: bool = True,
        **defaults: Unpack[RunDefaults],
    ) -> None:
        self.name = "warm-pool" if isolate else "warm-pool-process"
        self.isolate = isolate
        self.size = size
        self._set_defaults(defaults)
        self.disk_mb = disk_mb
        self.inodes = inodes
        # Outside a user namespace the count is the whole uid's: there it can only stop a runaway bomb.
        self.nproc = nproc if isolate else max(nproc, 1024)
        self.python = python or (sandbox_python() if isolate else sys.executable)
        self._workers: list[_Worker] = []
        self._idle: asyncio.Queue[_Worker] | None = None
        self._sessions: dict[str, _Worker] = {}
        self._start_lock: asyncio.Lock | None = None
        self._fresh: BwrapSandbox | ProcessSandbox | None = None
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.uids: set[int] = set()  # every uid a server ran as (for audits and tests)
        if not isolate and warn:
            warnings.warn(WARNING, RuntimeWarning, stacklevel=2)

    async def _spawn(self, kind: str = "pool") -> _Worker:
        """Start one server: ``kind`` "pool" (children take requests) or "session" (one kernel keeps state)."""
        uid = None
        tmp = None
        start = None
        pass_fds: tuple[int, ...] = ()
        if self.isolate:
            prog = [self.python, "-I", "-c", BOOT, SERVER_SOURCE, "isolated", kind, WORK, TMP, SHM, MQUEUE]
            start = launch(
                python=self.python,
                prog=prog,
                disk_mb=self.disk_mb,
                inodes=self.inodes,
                as_pid_1=True,
                memory_mb=self.memory_mb,
            )
            argv, uid, pass_fds = start.argv, start.user, start.pass_fds
            if start.uid is not None:
                self.uids.add(start.uid)
            env: dict[str, str] = {}
        else:
            tmp = Path(tempfile.mkdtemp(prefix="tirl-pool-"))
            (tmp / "work").mkdir()
            (tmp / "tmp").mkdir()
            argv = [self.python, "-I", "-c", BOOT, SERVER_SOURCE, "plain", kind, str(tmp / "work"), str(tmp / "tmp")]
            env = dict(CLEAN_ENV, HOME=str(tmp / "work"), TMPDIR=str(tmp / "tmp"))
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd="/",
                start_new_session=True,
                user=uid,
                group=uid,
                extra_groups=[] if uid is not None else None,
                pass_fds=pass_fds,
                preexec_fn=None if start is None or start.cgroup is None else start.preexec,  # joins the cgroup
            )
        except BaseException:
            if start is not None:
                start.finish(wait_s=0.0)  # closes its descriptors
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        worker = _Worker(proc, start.uid if start else None, tmp, start)
        if start is not None:
            start.started()
            try:
                await asyncio.to_thread(start.read_info)
            except BaseException:  # cancelled (or failed) while it started: nothing else would stop it
                worker.kill()
                raise
        return worker

    def _check_loop(self) -> None:
        """Servers belong to the event loop that started them; a new loop gets new servers."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            for w in [*self._workers, *self._sessions.values()]:
                w.kill()
            self._workers, self._sessions, self._idle, self._start_lock = [], {}, None, None
        self._loop = loop

    async def _spawn_open(self, kind: str = "pool") -> _Worker:
        """A new server, unless :meth:`close` ran while it started: then it is stopped and PoolClosed raised.

        ``close`` stops only the servers it sees; one that comes up after it would outlive the pool.
        """
        worker = await self._spawn(kind)
        if self._closed:
            await worker.stop()
            raise PoolClosed
        return worker

    async def start(self) -> None:
        """Start the servers now (``run`` does it on first use); :class:`PoolClosed` after :meth:`close`."""
        self._check_loop()
        if self._closed:
            raise PoolClosed
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._idle is not None:
                return
            started = await asyncio.gather(*(self._spawn_open() for _ in range(self.size)), return_exceptions=True)
            failed = [w for w in started if isinstance(w, BaseException)]
            if failed:
                await asyncio.gather(*(w.stop() for w in started if isinstance(w, _Worker)))
                raise failed[0]
            self._workers = [w for w in started if isinstance(w, _Worker)]
            idle: asyncio.Queue[_Worker] = asyncio.Queue()
            for w in self._workers:
                idle.put_nowait(w)
            self._idle = idle

    async def _run(self, req: RunRequest) -> ExecResult:
        """Run ``req.code`` in a forked child of a warm server (see the module docstring)."""
        if self._closed:
            return ExecResult("", "", None, error="the sandbox pool is closed")
        code, lang, workdir, session = req.code, req.lang, req.workdir, req.session
        timeout, memory = req.timeout_s, req.memory_mb
        # Python runs in the forked server (its code comes through a pipe); bash is exec-ed with the code in argv
        if (refused := nul_result(code) if lang == "python" else argv_result(code)) is not None:
            return refused
        if workdir is not None:  # the servers have their own workspaces: a fresh run binds this one
            if self._fresh is None:
                common = RunDefaults(
                    timeout_s=self.timeout_s, memory_mb=self.memory_mb, max_output_chars=self.max_output_chars
                )
                self._fresh = (
                    BwrapSandbox(disk_mb=self.disk_mb, python=self.python, **common)
                    if self.isolate
                    else ProcessSandbox(python=self.python, warn=False, **common)
                )
            result = await self._fresh.run(code, lang=lang, timeout_s=timeout, memory_mb=memory, workdir=workdir)
            self.uids |= self._fresh.uids
            return result
        if session is not None and lang != "python":
            return ExecResult("", "", None, error="sessions keep Python state; run bash without session=")
        if session is not None and (refused := session_result(code)) is not None:  # one socket message a turn
            return refused
        keep = self.max_output_chars * 4
        nonce = os.urandom(8)
        try:
            body = encode_request(OP_RUN, code, lang, timeout, memory, self.nproc, self.disk_mb, keep, nonce, session)
        except (struct.error, ValueError) as exc:  # a limit or key out of the wire's range: nothing ran
            return ExecResult("", "", None, error=f"cannot send this run to the pool: {exc}")
        call = _Call(body, nonce, timeout, keep, memory)
        self._check_loop()
        try:
            if session is not None:
                return await self._run_session(session, call)
            await self.start()
            idle = self._idle
            assert idle is not None
            worker = await idle.get()
            try:
                if not worker.alive:  # died, or killed by a cancelled call: replace it before use
                    worker = await self._replace(worker)
                try:
                    return await self._call(worker, call, first_try=True)
                except ServerNotReady:  # the last run left it stopped, stuck or gone: not this run's fault
                    worker = await self._replace(worker)
                    return await self._call(worker, call)
            finally:
                idle.put_nowait(worker)  # a dead one is replaced by the next run that takes it
        except PoolClosed:  # close() ran while this run waited for a server
            return ExecResult("", "", None, error="the sandbox pool is closed")

    async def _run_session(self, session: str, call: _Call) -> ExecResult:
        worker = self._sessions.get(session)
        if worker is not None and not worker.alive:  # a cancelled call killed it: its state is gone
            await self.end_session(session)
            worker = None
        if worker is None:
            if len(self._sessions) >= MAX_SESSIONS:
                return ExecResult("", "", None, error=f"more than {MAX_SESSIONS} open sessions; end some first")
            worker = await self._spawn_open("session")
            self._sessions[session] = worker
        async with worker.lock:
            result = await self._call(worker, call)
        if not worker.alive:
            await self.end_session(session)
        return result

    async def _call(self, worker: _Worker, call: _Call, *, first_try: bool = False) -> ExecResult:
        """One request on ``worker``; a failed server is killed (ServerNotReady raised on a ``first_try``).

        An OOM kill in the server's memory cgroup during the run makes it ``memory_exceeded``, also when
        the OOM killer took the server itself (the run then ends with -9 and the server is replaced).
        """
        began = time.monotonic()
        try:
            worker.limit(call.memory_mb)
        except OSError as exc:  # e.g. below what the server itself holds
            return ExecResult("", "", None, error=f"cannot set the memory limit to {call.memory_mb} MB ({exc})")
        try:
            reply = await worker.call(call.body, call.nonce, call.timeout_s + _SERVER_MARGIN_S)
            _, status, timed_out, wall_s, out, err, note = decode_answer(reply, call.keep)
        except ServerNotReady as exc:
            worker.kill()
            if first_try:
                raise
            return ExecResult("", "", None, error=f"sandbox server failed ({exc}); replaced")
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            oom = worker.oom_killed()
            worker.kill()
            if oom:
                return ExecResult("", "", -signal.SIGKILL, memory_exceeded=True, wall_s=time.monotonic() - began)
            return ExecResult("", "", None, error=f"sandbox server failed ({type(exc).__name__}); replaced")
        except asyncio.CancelledError:
            # The reply would arrive during someone else's call: this server cannot be reused.
            worker.kill()
            raise
        if note:
            err.feed((b"\n" if err.total else b"") + note)
        oom = worker.oom_killed()
        return build_result(
            out, err, status, timed_out=timed_out, wall_s=wall_s, max_chars=self.max_output_chars, oom_killed=oom
        )

    async def _replace(self, worker: _Worker) -> _Worker:
        await worker.stop()
        fresh = await self._spawn_open()
        self._workers = [fresh if w is worker else w for w in self._workers]
        return fresh

    async def end_session(self, session: str) -> None:
        """Stop the session's server and forget its state (no-op if none)."""
        worker = self._sessions.pop(session, None)
        if worker is not None:
            async with worker.lock:
                await worker.stop()

    async def close(self) -> None:
        """Stop every server; their sandboxes (and all they started) go with them."""
        self._closed = True
        self._check_loop()
        for session in list(self._sessions):
            await self.end_session(session)
        await asyncio.gather(*(w.stop() for w in self._workers))
        self._workers = []
        self._idle = None
