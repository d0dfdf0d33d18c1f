"""The training progress bar (rich): step, reward, valid/void, max IS ratio, grad norm.

When stderr is not a terminal (CI, a log file), rich draws nothing live; the
bar then prints one plain line per step instead, so logs still show progress.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def describe(row: dict[str, Any]) -> str:
    """The one-line summary of a metrics row."""
    return (
        f"reward {_fmt(row.get('reward/mean'), '.3f')}  "
        f"valid/void {_fmt(row.get('filter/valid_trajectories'), '.0f')}/"
        f"{_fmt(row.get('filter/void_trajectories'), '.0f')}  "
        f"IS max {_fmt(row.get('train/is_ratio_max'), '.3f')}  "
        f"grad {_fmt(row.get('train/grad_norm'), '.3f')}"
    )


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
