"""How ``tirl train`` stops on SIGINT (Ctrl-C) and SIGTERM: the first signal gracefully, a second one at once.

:class:`StopSignals` is in effect around a run (installed from the main thread only; the previous handlers
come back on exit). Either signal counts; what happens depends on how many came:

- **The first** stops the run gracefully. While the run's coroutine runs under :meth:`StopSignals.run`, its
  task is cancelled (as ``asyncio.run``'s own Ctrl-C handler does), so the run stops at its next ``await``:
  a checkpoint being written (synchronously) is finished first; then the run's clean-up ends the other
  ``--nproc`` ranks (SIGTERM, a grace of 5 s each) and closes the sandboxes, and :meth:`~StopSignals.run`
  raises ``KeyboardInterrupt``. Outside it (the set-up before, ``--backend ray``) the signal raises
  ``KeyboardInterrupt`` where the main thread is, as Python's default Ctrl-C handler does.
- **The second** skips the graceful part: the callbacks given to :meth:`~StopSignals.on_force` run at once
  (``tirl train --nproc N``'s kills every follower rank: SIGKILL, said in the rank's log, wherever rank 0's
  clean-up was), then ``KeyboardInterrupt`` is raised where the main thread is. A checkpoint being written is
  abandoned (never published; its hidden staging directory is removed, or left for the next save to remove
  when the signal lands just as it is created; the newest complete checkpoint is the one kept); the
  rest of the clean-up runs as the exception unwinds.
- A ``KeyboardInterrupt`` of these handlers that lands in a ``__del__`` (where Python cannot raise it and
  prints it as an "Exception ignored" traceback) is dropped silently while a stop is under way.
- **Later ones are ignored** (so is any signal once :meth:`~StopSignals.settle` was called, while the command
  prints its last line): the unwinding is not cut again, and no traceback is printed.

:attr:`StopSignals.first` is the first signal's number: the exit status (128 + it: 130, 143) and the word of the
last line are its. SIGINT inherited *ignored* (a shell's background job, ``trap '' INT``, which Ctrl-C in the
terminal must not stop) stays ignored; SIGTERM then stops the run the same way (first and second).

An update running in its thread (``asyncio.to_thread``) cannot be cut short, and Python's exit waits for that
thread: after a second signal the command still prints its last line at once, and :func:`exit_when_stuck`
(called by :func:`tirl.cli.main` as the process's own command line) ends the process with the command's
status when its normal exit has not finished :data:`FORCED_EXIT_GRACE_S` later — before, the process lived
on until the update returned (minutes on a GPU; the second Ctrl-C looked ignored).
SIGQUIT and SIGKILL are left as they are: they end rank 0 at once, and the followers notice
(:func:`tirl.distributed.follower.watch_parent`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

#: The signals that stop a run.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: After a forced stop, how long the process's normal exit may take before :func:`exit_when_stuck` ends it.
FORCED_EXIT_GRACE_S = 5.0  # room for exit callbacks that end child processes (ray.shutdown)

_forced = threading.Event()  # a second stop signal came in this process


def exit_when_stuck(status: int, grace_s: float = FORCED_EXIT_GRACE_S) -> None:
    """After a forced stop (a second signal), end the process with ``status`` if exiting takes over ``grace_s``.

    For the process's own command line only, once the command has printed its last line: a daemon timer
    flushes the standard streams and calls ``os._exit(status)``; a normal exit that finishes first (no worker
    thread left busy) ends the process before it fires. Without a forced stop it does nothing.
    """
    if not _forced.is_set():
        return

    def end() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)

    timer = threading.Timer(grace_s, end)
    timer.daemon = True
    timer.start()


class StopSignals:
    """SIGINT and SIGTERM handlers for a run: graceful at the first, forced at the second (see the module doc)."""

    def __init__(self) -> None:
        self.first: int | None = None  # the number of the first stop signal received
        self.count = 0
        self._forced: list[Callable[[], None]] = []
        self._task: asyncio.Task[Any] | None = None
        self._previous: dict[int, Any] = {}
        self._unraisable: Callable[[Any], Any] | None = None  # sys.unraisablehook before __enter__

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # inherited ignored: a background job's SIGINT
                    self._previous[sig] = signal.signal(sig, self._on_signal)
            self._unraisable = sys.unraisablehook
            sys.unraisablehook = self._on_unraisable
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            if handler is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(sig, handler)
        self._previous.clear()
        if self._unraisable is not None:
            sys.unraisablehook = self._unraisable
            self._unraisable = None

    def _on_unraisable(self, unraisable: Any) -> None:
        """Drop our own ``KeyboardInterrupt`` when it lands in a ``__del__``; pass anything else on.

        Python cannot raise it there and printed "Exception ignored in ... KeyboardInterrupt" above the run's
        last line; the stop goes on without it. Every other unraisable exception goes to the previous hook.
        """
        if self.count and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        assert self._unraisable is not None
        self._unraisable(unraisable)

    def on_force(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (in the signal handler, main thread) at the second signal; it must not block."""
        self._forced.append(callback)

    def settle(self) -> None:
        """The run has stopped: ignore any later signal (the command is printing its last line)."""
        self.count = max(self.count, 3)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """``asyncio.run(coro)``, its task cancelled by the first signal (then ``KeyboardInterrupt`` is raised)."""

        async def main() -> T:
            self._task = asyncio.current_task()
            return await coro

        try:
            return asyncio.run(main())
        except asyncio.CancelledError:
            if self.count:
                raise KeyboardInterrupt from None
            raise
        finally:
            self._task = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1:
            self.first = signum
            task = self._task
            if task is not None and not task.done():
                task.cancel()
                task.get_loop().call_soon_threadsafe(lambda: None)  # wake the loop if it waits in select()
                return
            raise KeyboardInterrupt
        if self.count == 2:
            _forced.set()
            for callback in self._forced:
                with contextlib.suppress(Exception):
                    callback()
            raise KeyboardInterrupt
