"""The training progress bar (rich): step, reward, valid/void, max IS ratio, grad norm; the evaluation progress.

When stderr is not a terminal (CI, a log file, a pipe), rich draws nothing
live; the bar then prints one plain line per step instead, and an evaluation
one line at its start, one every :data:`PIPED_LINE_EVERY_S` seconds and one at
its end, so logs still show progress (``tirl train --help`` and docs/cli.md say so).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

#: Seconds between the plain "... k/N done" lines of an evaluation when stderr is not a terminal.
PIPED_LINE_EVERY_S = 15.0


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def why_no_update(row: dict[str, Any]) -> str | None:
    """Why a step made no update, in words ("all void", "no signal (all rewards equal)"...); None if it made one."""
    total, failed = row.get("rollout/trajectories") or 0, row.get("rollout/failed") or 0
    if total and failed == total:
        tolerated = row.get("train/tolerated_failed_steps")
        return f"all {total:.0f} failed" + (f" (tolerated: {tolerated:.0f} so far)" if tolerated else "")
    if row.get("train/skipped_step") == 1:
        valid, void = row.get("filter/valid_trajectories") or 0, row.get("filter/void_trajectories") or 0
        if void and not valid:
            return "all void"
        return "skipped: no group had enough usable trajectories"
    if row.get("train/no_signal") == 1:
        valid, void = row.get("filter/valid_trajectories") or 0, row.get("filter/void_trajectories") or 0
        if void and not valid:  # filter.mode=off/mask keep void trajectories in the update: say they all were
            return "all void, no signal (all rewards equal)"
        return "no signal (all rewards equal)"
    return None


def describe(row: dict[str, Any]) -> str:
    """The one-line summary of a metrics row: what the step did, in numbers, and in words when it did not update."""
    text = (
        f"reward {_fmt(row.get('reward/mean'), '.3f')}  "
        f"valid/void {_fmt(row.get('filter/valid_trajectories'), '.0f')}/"
        f"{_fmt(row.get('filter/void_trajectories'), '.0f')}"
    )
    failed = row.get("rollout/failed")
    if failed:
        text += f"  failed {failed:.0f}"
    why = why_no_update(row)
    if why is not None:
        text += f"  {why}"
    else:
        text += f"  IS max {_fmt(row.get('train/is_ratio_max'), '.3f')}  grad {_fmt(row.get('train/grad_norm'), '.3f')}"
    groups = row.get("filter/resampled_groups")
    if groups:
        text += f"  resampled {groups:.0f} group{'s' if groups != 1 else ''}"
    return text


class TrainProgress:
    """A context manager around a rich progress bar for ``total`` steps."""

    def __init__(self, total: int, *, start: int = 0, enabled: bool = True) -> None:
        self.console = Console(file=sys.stderr)
        self.live = enabled and self.console.is_terminal
        self.enabled = enabled
        self.total = total
        self._progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.live,
        )
        self._task = self._progress.add_task("train", total=total, completed=start, info="")

    def __enter__(self) -> TrainProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, step: int, row: dict[str, Any]) -> None:
        """Advance to ``step`` and show the row's summary."""
        info = describe(row)
        self._progress.update(self._task, completed=step, info=info)
        if self.enabled and not self.live:
            print(f"step {step}/{self.total}  {info}  ({_fmt(row.get('time/step_s'), '.1f')}s)", file=sys.stderr)


class EvalProgress:
    """``evaluating N held-out tasks…`` with the count of finished episodes, while an evaluation runs.

    ``board`` returns the evaluation strategy's live :class:`~tirl.rollout.trace.StageBoard` (or None before
    its first ``collect``); its ``run`` stage's done count is polled every ``interval_s``. On a terminal this is
    a live bar; otherwise one line at the start, one every ``line_every_s`` seconds and one at the end.
    Counted: episodes whose agent runner finished (an episode that failed its set-up is counted only at the end).
    """

    def __init__(
        self,
        n: int,
        what: str,
        board: Callable[[], Any],
        *,
        enabled: bool = True,
        interval_s: float = 0.5,
        line_every_s: float = PIPED_LINE_EVERY_S,
    ) -> None:
        self.n, self.what, self.board = n, what, board
        self.enabled, self.interval_s, self.line_every_s = enabled, interval_s, line_every_s
        self.console = Console(file=sys.stderr)
        self.live = enabled and self.console.is_terminal
        self._progress = Progress(
            TextColumn(f"[bold]evaluating {n} {what}"),
            MofNCompleteColumn(),
            BarColumn(),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.live,
            transient=True,
        )
        self._task = self._progress.add_task("eval", total=n)
        self._poller: asyncio.Task[None] | None = None
        self._t0 = 0.0

    def done(self) -> int:
        """Episodes finished so far (read from the board)."""
        board = self.board()
        return min(self.n, int(board.done.get("run", 0))) if board is not None else 0

    async def _poll(self) -> None:
        last_line = time.perf_counter()
        while True:
            await asyncio.sleep(self.interval_s)
            self._progress.update(self._task, completed=self.done())
            if self.enabled and not self.live and time.perf_counter() - last_line >= self.line_every_s:
                last_line = time.perf_counter()
                print(f"  ... {self.done()}/{self.n} done ({last_line - self._t0:.0f} s)", file=sys.stderr)

    async def __aenter__(self) -> EvalProgress:
        self._t0 = time.perf_counter()
        if self.enabled and not self.live:
            print(f"evaluating {self.n} {self.what}...", file=sys.stderr)
        self._progress.start()
        self._poller = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        self._progress.stop()

    def report(self, correct: int, n: int) -> None:
        """The closing line: accuracy and time."""
        if self.enabled:
            acc = correct / n if n else 0.0
            print(
                f"evaluated {n} {self.what}: accuracy {acc:.3f} ({correct}/{n}) in "
                f"{time.perf_counter() - self._t0:.1f} s",
                file=sys.stderr,
            )
