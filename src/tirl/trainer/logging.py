"""Run-directory logs: per-step metrics JSONL, TensorBoard event files, sampled trajectories.

Layout of a run directory::

    metrics.jsonl        one object per step: {"step": N, "<ns>/<name>": float | null, ...}
    tb/                  the same scalars as TensorBoard event files (tag = metric name)
    trajectories.jsonl   a sample of each step's trajectories (Trajectory.to_json(), info.step = N)

Every line is written whole and flushed (``os.fsync``) before the step's
checkpoint, so a ``kill -9`` can at worst leave a torn last line.
:class:`RunLogger` with ``resume_step`` rewrites both JSONL files to keep
only complete lines of steps ``<= resume_step`` and opens TensorBoard with
``purge_step = resume_step + 1``, so a resumed run neither loses nor repeats
a step. A torn last line (or any line that is not a JSON object) is not
dropped silently: it is appended to ``<file>.torn`` (e.g.
``metrics.jsonl.torn``) and a warning on stderr names it.

Further sinks (:class:`MetricSink`, e.g. :class:`tirl.integrations.wandb_sink.WandbSink`
for ``trainer.wandb``) get every step's row after it is written.

Not covered: log rotation (one file per run), mlflow.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from tirl.fileio import atomic_write
from tirl.jsonl import JSONProblem, parse_json, read_jsonl
from tirl.trainer import run_files
from tirl.types import Trajectory

# The metric names every step carries (a skipped step has them with null values).
REQUIRED_METRICS: tuple[str, ...] = (
    "rollout/trajectories",
    "filter/valid_trajectories",
    "filter/void_trajectories",
    "filter/resampled",
    "train/is_ratio_min",
    "train/is_ratio_max",
    "train/is_ratio_mean",
    "train/clip_frac",
    "train/grad_norm",
    "train/loss",
    "train/entropy",
    "train/skipped_updates",
    "rollout/max_seq_len",
    "rollout/mean_seq_len",
    "rollout/turns_mean",
    "reward/mean",
    "time/step_s",
)

Scalar = float | int | None


def _clean(value: Any) -> Scalar:
    """JSON-safe scalar: NaN and inf become null (JSON has neither)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    f = float(value)
    return f if math.isfinite(f) else None


def _keep_lines(path: Path, keep: int) -> None:
    """Rewrite a JSONL file with only the complete lines whose ``step`` is ``<= keep`` (atomic).

    Torn and unreadable lines go to ``<path>.torn`` (appended, fsynced) with a warning, never silently away.
    """
    if not path.exists():
        return
    kept: list[str] = []
    damaged: list[str] = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                obj = parse_json(line) if line.endswith("\n") else None  # no newline: torn by a killed run
            except JSONProblem:
                obj = None
            if not isinstance(obj, dict):
                damaged.append(line if line.endswith("\n") else line + "\n")
                continue
            info = obj.get("info")
            step = obj.get("step", info.get("step") if isinstance(info, dict) else None)
            if isinstance(step, int) and step <= keep:
                kept.append(line)
    if damaged:
        torn = path.with_name(path.name + run_files.TORN)
        with torn.open("a", encoding="utf-8") as out:
            out.writelines(damaged)
            out.flush()
            os.fsync(out.fileno())
        print(f"warning: {path} held {len(damaged)} torn or unreadable line(s) (a run killed mid-write); "
              f"they are kept in {torn}", file=sys.stderr)  # fmt: skip
    with atomic_write(path) as fh:
        fh.writelines(kept)


_EVENT_FILE = re.compile(r"events\.out\.tfevents\.(\d+)\.")


def _wait_past_event_files(tb_dir: Path) -> None:
    """Wait (at most 2 s) until the wall-clock second is later than every event file's in ``tb_dir``.

    TensorBoard reads a directory's event files in name order, and a name is
    ``events.out.tfevents.<unix second>.<host>.<pid>.<counter>``: a resumed
    writer opened in the same second as the file it continues could sort
    before it (counter ``10`` < ``9`` as text), and the reader would then
    apply the old file's steps after the new file's purge. Starting in a later
    second makes the resumed file sort last.
    """
    stamps = [int(m.group(1)) for p in tb_dir.glob("events.out.tfevents.*") if (m := _EVENT_FILE.match(p.name))]
    if stamps:
        time.sleep(max(0.0, min(2.0, max(stamps) + 1 - time.time())))


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The complete lines of ``run_dir/metrics.jsonl``, in order."""
    path = Path(run_dir) / run_files.METRICS
    if not path.exists():
        return []
    return [row for _, row in read_jsonl(path, torn_tail=True, objects=True)]


def _quiet_event_writer_errors(prev: Callable[[Any], object]) -> Callable[[Any], object]:
    """A thread hook that does not print an OSError of TensorBoard's event-writer thread.

    That thread stores its exception and the writer raises it in this thread at the next scalar or flush (where
    a full disk becomes one ``error:`` line); printed as well, it would be a second, traceback-shaped report.
    """

    def hook(args: Any) -> object:
        if type(args.thread).__name__ == "_AsyncWriterThread" and isinstance(args.exc_value, OSError):
            return None
        return prev(args)

    return hook


class MetricSink(Protocol):
    """Somewhere else the per-step metrics go (wandb)."""

    def log(self, step: int, row: dict[str, Scalar]) -> None:
        """Record one step's row (as written to metrics.jsonl)."""
        ...

    def close(self) -> None:
        """Flush and release."""
        ...


class RunLogger:
    """Writes metrics.jsonl, tb/ and trajectories.jsonl of one run directory (and feeds ``sinks``)."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        resume_step: int = 0,
        tensorboard: bool = True,
        sinks: Sequence[MetricSink] = (),
    ) -> None:
        self.sinks = list(sinks)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / run_files.METRICS
        self.trajectories_path = self.run_dir / run_files.TRAJECTORIES
        if resume_step > 0 or self.metrics_path.exists():
            _keep_lines(self.metrics_path, resume_step)
            _keep_lines(self.trajectories_path, resume_step)
        self._metrics: IO[str] = self.metrics_path.open("a", encoding="utf-8")
        self._trajs: IO[str] = self.trajectories_path.open("a", encoding="utf-8")
        self._tb: Any = None
        self._hook: Callable[[Any], object] | None = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            _wait_past_event_files(self.run_dir / run_files.TB)
            self._prev_hook = threading.excepthook  # before the writer: its thread writes the first event at once
            self._hook = threading.excepthook = _quiet_event_writer_errors(self._prev_hook)
            try:
                self._tb = SummaryWriter(
                    log_dir=str(self.run_dir / run_files.TB), purge_step=resume_step + 1 if resume_step > 0 else None
                )
            except BaseException:
                self.close()  # the files, and the thread hook back
                raise

    def log_step(self, step: int, metrics: dict[str, Any]) -> dict[str, Scalar]:
        """Append one metrics line (required keys filled with null) and the TensorBoard scalars."""
        row: dict[str, Scalar] = {"step": step}
        for key in REQUIRED_METRICS:
            row[key] = None
        for key, value in metrics.items():
            row[key] = _clean(value)
        self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()
        os.fsync(self._metrics.fileno())
        if self._tb is not None:
            for key, value in row.items():
                if key != "step" and value is not None:
                    self._tb.add_scalar(key, value, global_step=step)
            self._tb.flush()
        for sink in self.sinks:
            sink.log(step, row)
        return row

    def log_trajectories(self, step: int, trajs: list[Trajectory]) -> None:
        """Append a sample of trajectories; each line's ``info.step`` is the step."""
        for traj in trajs:
            traj.info["step"] = step
            self._trajs.write(traj.to_json() + "\n")
        self._trajs.flush()
        os.fsync(self._trajs.fileno())

    def close(self) -> None:
        """Flush and close every file."""
        self._metrics.close()
        self._trajs.close()
        try:
            if self._tb is not None:
                self._tb.close()
        finally:
            if self._hook is not None and threading.excepthook is self._hook:
                threading.excepthook = self._prev_hook
            for sink in self.sinks:
                sink.close()


def log_eval_scalars(run_dir: str | Path, points: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """Write ``eval/accuracy`` and ``eval/mean_turns`` to the run's TensorBoard files, one point per evaluation.

    ``points``: (step, evaluation record) pairs — step 0 for the evaluation before training, the last step for
    the one after. A separate event file in ``tb/`` (TensorBoard reads every file of a directory).
    """
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(Path(run_dir) / run_files.TB), filename_suffix=".eval")
    try:
        for step, record in points:
            for key in ("accuracy", "mean_turns"):
                value = _clean(record.get(key))
                if isinstance(value, int | float) and not isinstance(value, bool):
                    writer.add_scalar(f"eval/{key}", value, global_step=step)
    finally:
        writer.close()
