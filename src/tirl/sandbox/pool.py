"""The warm pool: long-lived fork servers, so an execution does not pay interpreter start-up.

The pool keeps ``size`` fork servers (:mod:`tirl.sandbox._server`). With
``isolate=True`` each one runs inside its own bubblewrap sandbox, exactly the
one :mod:`tirl.sandbox.bwrap` builds, under its own unprivileged uid when tirl
runs as root. A server has already imported the usual modules (math,
fractions, itertools, collections, re, json, decimal, statistics...). For each
execution it forks a fresh child, which puts itself in a new process group,
applies the rlimits and runs the code in the private workspace. The host
talks to a server over its stdin/stdout with length-prefixed JSON.

A server runs one execution at a time. Afterwards it kills every process that
execution left behind, empties the workspace, ``/tmp`` and ``/dev/shm`` and
removes SysV IPC objects, so nothing of one execution (globals, files,
processes, shared memory) is visible to the next. The rest of the sandbox's
file system is read-only. With ``isolate=True`` the server is the sandbox's
PID 1 (bwrap ``--as-pid-1``) and undumpable, under the seccomp filter: no
process can ptrace it, open its descriptors or signal it, and ``kill(-1)``
reaches every other process of the namespace. Every request carries a nonce
that its answer must repeat, and the server announces itself ready after each
cleanup; one that does not within a few seconds is replaced before the next
run uses it. Closing the pool kills each server's whole PID namespace.

Sessions (``run(..., session=key)``) are notebook-like. The first run of a key
starts a dedicated server (in its own sandbox) with one long-lived kernel
process. Every run of that key executes in the kernel's globals, so variables,
files in the workspace and ``/tmp`` survive between the session's own turns
and nothing else can see them. A run that times out kills the kernel. The
result then says that the state was lost, and the next run starts afresh.
:meth:`WarmPool.end_session` frees it.

Covered (``isolate=True``): everything the bubblewrap backend covers (see
:mod:`tirl.sandbox.bwrap`), per execution. The network, file system and
environment are isolated. Timeouts, rlimits and the cleanup of processes and
files are enforced by the server inside the sandbox.

Not covered:
    - everything :mod:`tirl.sandbox.bwrap` does not cover;
    - within one server, executions follow each other in the same sandbox.
      The cleanup between them is done by the server (kill the leftover
      processes, empty the workspace and ``/tmp``), not by a new namespace.
      An execution that could corrupt the server itself (e.g. through a
      kernel bug) could see the next one; the host replaces a server that
      stops answering or answers out of turn;
    - POSIX message queues (``mq_open``) made by one execution outlive it on
      that server (their names cannot be listed without mounting mqueue);
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
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from tirl.sandbox._common import CLEAN_ENV, CappedBuffer, build_result, nul_result
from tirl.sandbox._launch import DEFAULT_INODES, Launch
from tirl.sandbox.base import ExecResult, RunRequest, Sandbox
from tirl.sandbox.bwrap import SHM, TMP, WORK, BwrapSandbox, launch, sandbox_python
from tirl.sandbox.process import WARNING, ProcessSandbox

_HERE = Path(__file__).parent
# The server runs the tree walker's source first (it has only the standard library inside the sandbox).
SERVER_SOURCE = (_HERE / "_tree.py").read_text() + "\n" + (_HERE / "_server.py").read_text()
# Host-side margin over the program's timeout before a silent server is declared dead.
_SERVER_MARGIN_S = 5.0
# How long a started server may take to say it is ready (interpreter start-up, imports; a loaded machine).
_START_S = 60.0
# How long a used server's cleanup may take before it is replaced (the next run then goes to a fresh one).
_READY_S = 5.0
MAX_SESSIONS = 256


class ServerNotReady(Exception):
    """The server did not announce itself ready in time (stopped, stuck in cleanup, or gone)."""


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
        self.ready = False  # a ready frame arrived since the last request
        self.fresh = True  # no request sent yet
        self.lock = asyncio.Lock()
        self._in = proc.stdin.fileno()
        self._out = proc.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._buf = bytearray()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    async def _ready(self, fd: int, write: bool) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        (loop.add_writer if write else loop.add_reader)(fd, wake)
        try:
            await fut
        finally:
            (loop.remove_writer if write else loop.remove_reader)(fd)

    async def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._in, view) :]
            except BlockingIOError:
                await self._ready(self._in, write=True)

    async def _read_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            try:
                chunk = os.read(self._out, 1 << 16)
            except BlockingIOError:
                await self._ready(self._out, write=False)
                continue
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(self._buf), n)
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def _frame(self) -> dict[str, Any]:
        head = await self._read_exact(4)
        size = struct.unpack(">I", head)[0]
        if size > 1 << 26:
            raise ConnectionError(f"a reply frame of {size} bytes")
        reply = json.loads(await self._read_exact(size))
        if not isinstance(reply, dict):
            raise ConnectionError("a reply frame that is not an object")
        return reply

    async def wait_ready(self) -> None:
        """Wait for the server's ready frame (sent at start and after each cleanup); ServerNotReady if none."""
        if self.ready:
            return
        try:
            frame = await asyncio.wait_for(self._frame(), _START_S if self.fresh else _READY_S)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            raise ServerNotReady(type(exc).__name__) from exc
        if frame != {"ready": True}:
            raise ServerNotReady(f"unexpected frame {str(frame)[:80]!r}")
        self.ready = True

    async def call(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request (after the ready frame) and return its answer, whose nonce must match."""
        await self.wait_ready()
        nonce = secrets.token_hex(8)
        data = json.dumps(dict(msg, nonce=nonce)).encode()
        self.ready = self.fresh = False
        await self._write(struct.pack(">I", len(data)) + data)
        reply = await asyncio.wait_for(self._frame(), timeout_s)
        if reply.get("nonce") != nonce:
            raise ConnectionError("a reply that does not answer this request")
        return reply

    def kill(self) -> None:
        """Kill the server's PID namespace and process group (its sandbox dies with it) and reap it."""
        if self.start is not None:
            self.start.kill_namespace()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

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


def _buffer(wire: list[Any], keep: int) -> CappedBuffer:
    buf = CappedBuffer(keep)
    buf.head = base64.b64decode(wire[0])
    buf.tail = bytearray(base64.b64decode(wire[1]))
    buf.total = int(wire[2])
    return buf


class WarmPool(Sandbox):
    """Pre-started fork servers, optionally each inside bubblewrap (see the module docstring)."""

    def __init__(
        self,
        *,
        isolate: bool = True,
        size: int = 4,
        timeout_s: float = 5.0,
        memory_mb: int = 1024,
        max_output_chars: int = 2000,
        disk_mb: int = 64,
        inodes: int = DEFAULT_INODES,
        nproc: int = 64,
        python: str | None = None,
        warn: bool = True,
    ) -> None:
        self.name = "warm-pool" if isolate else "warm-pool-process"
        self.isolate = isolate
        self.size = size
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_output_chars = max_output_chars
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

    async def _spawn(self) -> _Worker:
        uid = None
        tmp = None
        start = None
        pass_fds: tuple[int, ...] = ()
        if self.isolate:
            prog = [self.python, "-I", "-c", SERVER_SOURCE, "isolated", WORK, TMP, SHM]
            start = launch(python=self.python, prog=prog, disk_mb=self.disk_mb, inodes=self.inodes, as_pid_1=True)
            argv, uid, pass_fds = start.argv, start.user, start.pass_fds
            if start.uid is not None:
                self.uids.add(start.uid)
            env: dict[str, str] = {}
        else:
            tmp = Path(tempfile.mkdtemp(prefix="tirl-pool-"))
            (tmp / "work").mkdir()
            (tmp / "tmp").mkdir()
            argv = [self.python, "-I", "-c", SERVER_SOURCE, "plain", str(tmp / "work"), str(tmp / "tmp")]
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
            )
        except BaseException:
            if start is not None:
                start.kill_namespace()  # closes its descriptors
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        if start is not None:
            start.started()
            await asyncio.to_thread(start.read_info)
        return _Worker(proc, start.uid if start else None, tmp, start)

    def _check_loop(self) -> None:
        """Servers belong to the event loop that started them; a new loop gets new servers."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            for w in [*self._workers, *self._sessions.values()]:
                w.kill()
            self._workers, self._sessions, self._idle, self._start_lock = [], {}, None, None
        self._loop = loop

    async def start(self) -> None:
        """Start the servers now (``run`` does it on first use)."""
        self._check_loop()
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._idle is not None:
                return
            self._workers = list(await asyncio.gather(*(self._spawn() for _ in range(self.size))))
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
        if (refused := nul_result(code)) is not None:
            return refused
        if workdir is not None:  # the servers have their own workspaces: a fresh run binds this one
            if self._fresh is None:
                common = {"timeout_s": self.timeout_s, "memory_mb": self.memory_mb}
                common["max_output_chars"] = self.max_output_chars
                self._fresh = (
                    BwrapSandbox(disk_mb=self.disk_mb, python=self.python, **common)  # type: ignore[arg-type]
                    if self.isolate
                    else ProcessSandbox(python=self.python, warn=False, **common)  # type: ignore[arg-type]
                )
            result = await self._fresh.run(code, lang=lang, timeout_s=timeout, memory_mb=memory, workdir=workdir)
            self.uids |= self._fresh.uids
            return result
        if session is not None and lang != "python":
            return ExecResult("", "", None, error="sessions keep Python state; run bash without session=")
        msg = {
            "op": "run",
            "code": code,
            "lang": lang,
            "timeout_s": timeout,
            "memory_mb": memory,
            "nproc": self.nproc,
            "fsize_mb": self.disk_mb,
            "keep": self.max_output_chars * 4,
            "session": session,
        }
        self._check_loop()
        if session is not None:
            return await self._run_session(session, msg)
        await self.start()
        assert self._idle is not None
        worker = await self._idle.get()
        try:
            if not worker.alive:  # died, or killed by a cancelled call: replace it before use
                worker = await self._replace(worker)
            try:
                await worker.wait_ready()
            except ServerNotReady:  # the last run left it stopped, stuck or gone: not this run's fault
                worker.kill()
                worker = await self._replace(worker)
            return await self._call(worker, msg)
        finally:
            self._idle.put_nowait(worker)  # a dead one is replaced by the next run that takes it

    async def _run_session(self, session: str, req: dict[str, Any]) -> ExecResult:
        worker = self._sessions.get(session)
        if worker is not None and not worker.alive:  # a cancelled call killed it: its state is gone
            await self.end_session(session)
            worker = None
        if worker is None:
            if len(self._sessions) >= MAX_SESSIONS:
                return ExecResult("", "", None, error=f"more than {MAX_SESSIONS} open sessions; end some first")
            worker = await self._spawn()
            self._sessions[session] = worker
        async with worker.lock:
            result = await self._call(worker, req)
        if not worker.alive:
            await self.end_session(session)
        return result

    async def _call(self, worker: _Worker, req: dict[str, Any]) -> ExecResult:
        try:
            reply = await worker.call(req, req["timeout_s"] + _SERVER_MARGIN_S)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError, ServerNotReady) as exc:
            worker.kill()
            return ExecResult("", "", None, error=f"sandbox server failed ({type(exc).__name__}); replaced")
        except asyncio.CancelledError:
            # The reply would arrive during someone else's call: this server cannot be reused.
            worker.kill()
            raise
        keep = req["keep"]
        out, err = _buffer(reply["out"], keep), _buffer(reply["err"], keep)
        if reply.get("note"):
            err.feed((b"\n" if err.total else b"") + reply["note"].encode())
        return build_result(
            out,
            err,
            int(reply["exit"]),
            timed_out=bool(reply["timed_out"]),
            wall_s=float(reply["wall"]),
            max_chars=self.max_output_chars,
        )

    async def _replace(self, worker: _Worker) -> _Worker:
        await worker.stop()
        fresh = await self._spawn()
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
