r"""Symbolic comparison through HuggingFace ``math-verify``, in worker processes with a hard deadline.

math-verify bounds its own work with ``signal.alarm``, which only works in a
process's main thread; tirl compares answers inside the event loop's threads.
So each comparison goes to a worker process (:mod:`tirl.answers._worker`,
one JSON line in, one out) and waits at most ``timeout_s``; a worker that is
late or dies is killed and replaced, and the comparison counts as *no match*.

>>> pool = FallbackPool(size=1)
>>> pool.check(r"(x+1)^2", r"x^2+2x+1"), pool.check(r"\pi", r"\frac{314}{100}")
(True, False)
>>> pool.close()

Thread-safe: at most ``size`` workers, started on first use (about 0.7 s each,
the sympy import), reused afterwards, killed by :meth:`FallbackPool.close`
and at interpreter exit. Not covered: a worker cannot be interrupted
mid-comparison except by killing it (the next call pays a restart).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tirl.errors import SetupError

__all__ = ["FallbackPool", "default_pool", "shutdown_default_pool"]

START_TIMEOUT_S = 60.0  # importing sympy on a loaded machine; not counted in a comparison's deadline


@dataclass(eq=False)  # identity hash: workers live in a set
class _Worker:
    proc: subprocess.Popen[bytes]
    buf: bytearray = field(default_factory=bytearray)

    def read_line(self, deadline: float) -> bytes | None:
        """One reply line, or ``None`` when the deadline passes or the worker dies."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf = bytearray(rest)
        return line

    def kill(self) -> None:
        """Kill and reap (never raises)."""
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class FallbackPool:
    """Up to ``size`` math-verify workers; :meth:`check` compares two LaTeX answers within ``timeout_s``."""

    def __init__(self, size: int = 2, timeout_s: float = 5.0) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.timeout_s = timeout_s
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._slots = threading.Semaphore(size)
        self._lock = threading.Lock()
        self._closed = False
        self.kills = 0  # workers killed for a late reply or a crash (for tests and benchmarks)

    def _start(self) -> _Worker:
        root = str(Path(__file__).resolve().parents[2])  # the directory holding the tirl package
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tirl.answers._worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        worker = _Worker(proc)
        line = worker.read_line(time.monotonic() + START_TIMEOUT_S)
        hello = json.loads(line) if line else {"ready": False, "error": "no reply"}
        if not hello.get("ready"):
            worker.kill()
            raise SetupError(
                f"the math-verify worker did not start ({hello.get('error')}) — install it with "
                "pip install 'math-verify[antlr4_13_2]' (make install does)"
            )
        return worker

    def _acquire(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise RuntimeError("FallbackPool is closed")
            if self._idle:
                return self._idle.pop()
        worker = self._start()
        with self._lock:
            self._all.add(worker)
        return worker

    def _release(self, worker: _Worker, ok: bool) -> None:
        with self._lock:
            if ok and not self._closed:
                self._idle.append(worker)
                return
            self._all.discard(worker)
        if not ok:
            self.kills += 1
        worker.kill()

    def check(self, gold: str, pred: str) -> bool:
        """Whether math-verify (made exact) finds ``pred`` equal to ``gold``; late or crashed: ``False``."""
        request = (json.dumps({"gold": gold, "pred": pred}) + "\n").encode()
        with self._slots:
            worker = self._acquire()
            ok = False
            try:
                assert worker.proc.stdin is not None
                worker.proc.stdin.write(request)
                worker.proc.stdin.flush()
                line = worker.read_line(time.monotonic() + self.timeout_s)
                if line is None:
                    return False
                reply = json.loads(line)
                ok = True
                return bool(reply.get("match"))
            except (OSError, ValueError):
                return False
            finally:
                self._release(worker, ok)

    def close(self) -> None:
        """Kill every worker; later calls raise."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for worker in workers:
            worker.kill()


_default: FallbackPool | None = None
_default_pid = 0
_default_lock = threading.Lock()


def default_pool() -> FallbackPool:
    """The process-wide pool used by :func:`tirl.answers.answers_match` (created on first use).

    A forked child gets its own pool: the parent's worker pipes are never shared.
    """
    global _default, _default_pid
    with _default_lock:
        if _default is None or _default_pid != os.getpid():
            _default, _default_pid = FallbackPool(), os.getpid()
        return _default


def shutdown_default_pool() -> None:
    """Close the process-wide pool (a later comparison starts a new one)."""
    global _default
    with _default_lock:
        pool, _default = _default, None
    if pool is not None and _default_pid == os.getpid():  # a forked child never kills its parent's workers
        pool.close()


atexit.register(shutdown_default_pool)
