"""Code that holds the event loop: found while it holds it (:class:`LoopWatch`) and measured per call (:func:`held`).

Every env call of a rollout (``reset``, ``step``, ``evaluate``, ``close``) runs on one asyncio event loop with
every other episode's. A call that computes or waits *without awaiting* (``time.sleep``, ``subprocess.run``, a
model's code ``exec``-ed in-process, a long sympy simplification) holds the loop: no other episode moves, the
trace sampler stops, and **no rollout timeout can fire** (``asyncio.timeout`` is a callback of that loop), so
``rollout.eval_timeout_s`` does not stop an ``evaluate`` that never awaits and the run can hang for good.

* :class:`LoopWatch` — a daemon thread beside the loop, started by :class:`tirl.rollout.strategies.Rollout`
  for every ``collect``. It posts a heartbeat to the loop every ``period_s``; when one has waited longer than
  ``limit_s`` (the smallest of ``rollout.init_timeout_s``/``run_timeout_s``/``eval_timeout_s``, by when a
  timeout is overdue; at least :data:`~tirl.rollout.strategies.WATCH_FLOOR_S`), it logs one warning with the
  line the loop thread is running (the innermost frame, and the env method it was called from), how long it
  has been held, and the fix; and one line when the loop runs again. It does not interrupt the code (Python
  cannot stop a thread's C call, and an exception thrown into arbitrary code could leave an env half-changed):
  it tells the user what hangs, where, and why.
* :func:`held` — wraps one coroutine and measures the longest stretch it ran without yielding to the loop
  (each resumption timed). :func:`tirl.envs.check.check_env` uses it for its ``nonblocking`` check.

Not covered: code that blocks the loop for less than ``limit_s`` at a time (it slows the rollout, and shows
only as idle generator time in the trace); a loop held by tirl's own code (none is known to take more than
milliseconds); stacks of threads other than the loop's.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Coroutine, Generator
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # no asyncio import at run time: tirl.envs (check_env) is imported by `tirl filter`, which has none
    import asyncio

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The env methods a rollout awaits: the frame named in a warning is the innermost call of one of these.
ENV_METHODS = ("reset", "step", "evaluate", "close")

FIX = (
    "run blocking work off the loop (`await asyncio.to_thread(fn, ...)`) and model code through the sandbox "
    "(`await sandbox.run(...)`): see docs/envs.md, 'Calls must await'"
)


def where(frame: FrameType | None) -> str:
    """``file:line (function)`` of ``frame``, and of the env method it was called from when that is another frame."""
    if frame is None:
        return "an unknown place (the loop thread has no Python frame)"
    text = _frame_text(frame)
    outer: FrameType | None = frame
    while outer is not None and outer.f_code.co_name not in ENV_METHODS:
        outer = outer.f_back
    if outer is not None and outer is not frame:
        text += f", called from {_frame_text(outer)}"
    return text


def _frame_text(frame: FrameType) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_qualname})"


@dataclass(frozen=True, slots=True)
class Stall:
    """One time the loop was held past the limit: for how long (so far, or in all) and where."""

    seconds: float
    where: str


class LoopWatch:
    """A watchdog thread for ``loop`` (see the module docstring); use as ``with LoopWatch(loop, limit_s):``.

    ``stalls`` lists each stall once it ended (or when the watch stopped during it); ``what`` names the
    limit in the warning (``"rollout.eval_timeout_s=120"``).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, limit_s: float, *, what: str = "", period_s: float = 1.0):
        if limit_s <= 0:
            raise ValueError(f"limit_s must be positive, got {limit_s}")
        self.loop = loop
        self.limit_s = limit_s
        self.what = what
        self.period_s = min(period_s, limit_s / 4)
        self.stalls: list[Stall] = []
        self._stop = threading.Event()
        self._answered = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread = threading.get_ident()  # built on the loop's thread, as Rollout.collect does

    def __enter__(self) -> LoopWatch:
        self._thread = threading.Thread(target=self._watch, name="tirl-loop-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _post(self) -> bool:
        """Ask the loop to answer; False when it is closed (the watch ends)."""
        self._answered.clear()
        try:
            self.loop.call_soon_threadsafe(self._answered.set)
        except RuntimeError:
            return False
        return True

    def _watch(self) -> None:
        sent = time.monotonic()
        stall: Stall | None = None
        if not self._post():
            return
        while not self._stop.wait(self.period_s):
            waited = time.monotonic() - sent
            if self._answered.is_set():
                if stall is not None:
                    self._ended(stall, waited)
                    stall = None
                sent = time.monotonic()
                if not self._post():
                    return
            elif stall is None and waited > self.limit_s:
                stall = Stall(waited, where(sys._current_frames().get(self._loop_thread)))
                self._warn(stall)
        if stall is not None:
            self.stalls.append(Stall(time.monotonic() - sent, stall.where))

    def _warn(self, stall: Stall) -> None:
        limit = f" (past {self.what})" if self.what else ""
        log.warning(
            "rollout: the event loop has been held for %.0f s%s by code that does not await, at %s — no rollout "
            "timeout can fire and no other episode moves until it returns; %s",
            stall.seconds, limit, stall.where, FIX,
        )  # fmt: skip

    def _ended(self, stall: Stall, seconds: float) -> None:
        self.stalls.append(Stall(seconds, stall.where))
        log.warning("rollout: the event loop ran again after being held for %.1f s at %s", seconds, stall.where)


class Held:
    """The longest stretch the wrapped coroutine ran without yielding (``longest_s``), and where it ended."""

    def __init__(self) -> None:
        self.longest_s = 0.0


def held(coro: Coroutine[Any, Any, T], meter: Held) -> Coroutine[Any, Any, T]:
    """``coro`` driven step by step; each resumption's wall time is measured into ``meter.longest_s``."""

    async def run() -> T:
        return await _Stepped(coro, meter)

    return run()


class _Stepped:
    """An awaitable that forwards every send/throw to ``coro`` and times each (cancellation passes through)."""

    def __init__(self, coro: Coroutine[Any, Any, Any], meter: Held) -> None:
        self._coro = coro
        self._meter = meter

    def __await__(self) -> Generator[Any, Any, Any]:
        value: Any = None
        error: BaseException | None = None
        while True:
            t0 = time.perf_counter()
            try:
                yielded = self._coro.throw(error) if error is not None else self._coro.send(value)
            except StopIteration as stop:
                return stop.value
            finally:
                self._meter.longest_s = max(self._meter.longest_s, time.perf_counter() - t0)
            try:
                value, error = (yield yielded), None
            except BaseException as exc:  # a cancellation or a throw: handed to the coroutine
                value, error = None, exc


__all__ = ["ENV_METHODS", "FIX", "Held", "LoopWatch", "Stall", "held", "where"]
