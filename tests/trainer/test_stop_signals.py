"""`tirl.trainer.stop_signals` in this process, with real signals (``os.kill`` of itself, handled at once).

The first signal cancels the run's task at its next ``await`` (or raises ``KeyboardInterrupt`` outside one), the
second runs the force callbacks and raises, later ones are ignored; SIGINT inherited ignored stays ignored; the
previous handlers come back. The same on real ``tirl train --nproc 2`` runs: tests/distributed/test_interrupt_ranks.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tirl.trainer.stop_signals import StopSignals


@pytest.fixture(autouse=True)
def _handlers() -> Iterator[None]:
    """Put SIGINT's and SIGTERM's handlers back after each test, whatever it left."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_the_first_signal_stops_the_second_forces_and_later_ones_are_ignored() -> None:
    forced: list[str] = []
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        stop.on_force(lambda: forced.append("killed"))
        with pytest.raises(KeyboardInterrupt):  # no run under way: raised where the main thread is
            os.kill(os.getpid(), signal.SIGTERM)
        assert (stop.first, forced) == (signal.SIGTERM, [])
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
        assert forced == ["killed"]
        os.kill(os.getpid(), signal.SIGTERM)  # a third: nothing happens
        assert (stop.first, forced) == (signal.SIGTERM, ["killed"])
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_first_signal_cancels_the_run_at_its_next_await() -> None:
    """The code between the signal and the next ``await`` (a checkpoint write) still runs; then the clean-up."""
    events: list[str] = []

    async def job() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            events.append("went on to the next await")
            await asyncio.sleep(3600)  # cancelled before it waits at all
            events.append("slept")
        except asyncio.CancelledError:
            events.append("cleaned up")
            raise

    with StopSignals() as stop, pytest.raises(KeyboardInterrupt):
        stop.run(job())
    assert events == ["went on to the next await", "cleaned up"]


def test_settle_ignores_every_later_signal() -> None:
    forced: list[str] = []
    with StopSignals() as stop:
        stop.on_force(lambda: forced.append("killed"))
        stop.settle()
        os.kill(os.getpid(), signal.SIGTERM)
        assert (stop.first, forced) == (None, [])


def test_sigint_inherited_ignored_stays_ignored_and_sigterm_still_stops() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a shell's background job
    try:
        with StopSignals() as stop:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)  # discarded
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGTERM)
            assert stop.first == signal.SIGTERM
    finally:  # the worker's later subprocesses would inherit SIGINT ignored (the STUCK tests below failed so)
        signal.signal(signal.SIGINT, previous)


def test_a_stop_signal_landing_in_a_del_is_not_printed_as_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """A second Ctrl-C 0.2 s after the first landed in regex's ``Group.__del__`` (a gate run): Python printed
    "Exception ignored in ... KeyboardInterrupt" above the run's last line. Now dropped while a stop is under
    way; any other exception of a ``__del__`` still goes to the previous hook."""
    import sys

    seen: list[type[BaseException]] = []
    previous = sys.unraisablehook

    def ours(unraisable: object) -> None:
        seen.append(type(unraisable.exc_value))  # type: ignore[attr-defined]

    sys.unraisablehook = ours
    try:

        class SignalledWhileCollected:
            def __del__(self) -> None:
                os.kill(os.getpid(), signal.SIGTERM)

        class Broken:
            def __del__(self) -> None:
                raise ValueError("a real bug")

        with StopSignals() as stop:
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGTERM)  # the first
            SignalledWhileCollected()  # the second lands in __del__: its KeyboardInterrupt cannot propagate
            assert stop.count == 2
            Broken()
        assert seen == [ValueError]
        assert sys.unraisablehook is ours  # StopSignals put back the hook it found
    finally:
        sys.unraisablehook = previous


STUCK = """
import asyncio, os, signal, sys, threading, time
from tirl.trainer.stop_signals import StopSignals, exit_when_stuck

signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's job has it, whatever pytest's worker has
signals, update_s = int(sys.argv[1]), float(sys.argv[2])

def kick():
    for _ in range(signals):
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

async def job():
    threading.Thread(target=kick, daemon=True).start()
    await asyncio.to_thread(time.sleep, update_s)  # an update in its thread: nothing can cut it short

with StopSignals() as stop:
    try:
        stop.run(job())
    except KeyboardInterrupt:
        print("last line", flush=True)
exit_when_stuck(130, grace_s=0.5)
sys.exit(130)
"""


def _stuck(signals: int, update_s: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", STUCK, str(signals), str(update_s)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def test_after_a_second_signal_a_busy_update_thread_does_not_hold_the_exit() -> None:
    """The update sleeps 60 s; Python's exit would wait for it. The process ends 0.5 s after the last line."""
    rc, out, seconds = _stuck(2, 60.0)
    assert rc == 130 and out.strip() == "last line"
    assert seconds < 30  # 60 s and more without exit_when_stuck


def test_after_one_signal_the_exit_waits_for_the_thread_as_before() -> None:
    """A graceful stop lets the update finish (3 s) before the process ends: no forced exit."""
    rc, out, seconds = _stuck(1, 3.0)
    assert rc == 130 and out.strip() == "last line"
    assert seconds >= 3.0
