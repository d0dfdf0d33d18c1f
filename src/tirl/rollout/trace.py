"""Observability of the rollout stages: live counters, a generator busy meter and the trace writer.

Every strategy (sync batch, async batch, pipeline) updates the same
:class:`StageBoard` as its episodes move through the three stages, so their
traces can be compared on the same work. A :class:`PipelineTracer` samples the
board every ``interval_s`` seconds while a ``collect`` runs and appends one
JSON line per snapshot (the pipeline trace format of ``DESIGN.md``)::

    {"t": 1.25, "step": 3, "strategy": "pipeline",
     "init_queue": 40, "run_queue": 8, "eval_queue": 0, "gpu_util": 0.93,
     "init_busy": 4, "run_busy": 16, "eval_busy": 2,
     "init_blocked": 4, "run_blocked": 0,
     "init_done": 120, "run_done": 101, "eval_done": 96, "live_envs": 30,
     "init_queue_cap": 128, "run_queue_cap": 32, "eval_queue_cap": 32,
     "init_workers": 4, "run_workers": 16, "eval_workers": 4}

``t`` is seconds since the tracer was created (one file per run, appended
across steps); a tracer that appends to an existing file (a resumed run)
continues from its last ``t``, so ``t`` never runs backwards in a file
(``tirl diagnose pipeline`` refuses a trace where it does). ``X_queue`` counts episodes waiting for stage X (for
``init_queue``: not yet initialised), ``X_busy`` workers inside stage X,
``X_blocked`` workers that finished stage X and wait for room in the next,
bounded queue (backpressure), ``X_done`` cumulative completions of stage X
since the tracer was created (episodes, whether the stage succeeded or not), ``live_envs``
environments created and not yet closed. ``X_queue_cap`` is what queue X can
hold (``init_queue``: the whole request; the bounded ``run_queue_size`` and
``eval_queue_size``) and ``X_workers`` the size of stage X's worker pool; the
pipeline schedule records them (the batch schedules do not). ``gpu_util`` is the fraction of the
interval in which the generator had at least one request in flight, or
``null`` when no busy source was given.

Not covered: per-slot occupancy of the generator (``gpu_util`` says whether
it had *any* work, not how full its batch was) and anything outside this
process (remote sandboxes report nothing here).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tirl.jsonl import read_jsonl

STAGES: tuple[str, str, str] = ("init", "run", "eval")

Clock = Callable[[], float]


def loop_time() -> float:
    """The running event loop's clock (``time.monotonic`` for a normal loop), else ``time.monotonic``.

    Following the loop's clock keeps traces consistent under a virtual-time
    loop (tests, the exact simulation in ``benchmarks/bench_pipeline.py``).
    """
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


@runtime_checkable
class BusySource(Protocol):
    """Anything that reports the generator's cumulative busy time in seconds."""

    def busy_seconds(self) -> float:
        """Seconds, since some fixed origin, during which the generator had work."""
        ...


GeneratorBusy = BusySource | Callable[[], float]


class BusyMeter:
    """Cumulative time during which at least one generation request was in flight.

    The generator calls :meth:`start` when a request begins and :meth:`end`
    when it ends (or wraps the request in ``with meter.busy():``); the tracer
    reads :meth:`busy_seconds`. Overlapping requests count once: this is
    "the generator had work", not slot occupancy.

    >>> t = [0.0]
    >>> m = BusyMeter(clock=lambda: t[0])
    >>> m.start(); t[0] = 1.0; m.start(); t[0] = 2.0; m.end(); m.end(); t[0] = 5.0
    >>> m.busy_seconds()
    2.0
    """

    def __init__(self, clock: Clock = loop_time) -> None:
        self._clock = clock
        self._active = 0
        self._busy = 0.0
        self._since = 0.0

    @property
    def active(self) -> int:
        """Requests in flight now."""
        return self._active

    def start(self) -> None:
        """A request began."""
        if self._active == 0:
            self._since = self._clock()
        self._active += 1

    def end(self) -> None:
        """A request ended (extra calls are ignored)."""
        if self._active == 0:
            return
        self._active -= 1
        if self._active == 0:
            self._busy += self._clock() - self._since

    @contextmanager
    def busy(self) -> Iterator[None]:
        """Mark the generator busy for the duration of the block."""
        self.start()
        try:
            yield
        finally:
            self.end()

    def busy_seconds(self) -> float:
        """Cumulative busy time, including the current busy period."""
        if self._active:
            return self._busy + (self._clock() - self._since)
        return self._busy


def _busy_reader(source: GeneratorBusy | None) -> Callable[[], float] | None:
    if source is None:
        return None
    if isinstance(source, BusySource):
        return source.busy_seconds
    if callable(source):
        return source
    raise TypeError(
        f"generator_busy must have a busy_seconds() method or be a callable returning seconds, "
        f"got {type(source).__name__}"
    )


@dataclass(slots=True)
class StageBoard:
    """Live counters of the three stages; strategies update it, the tracer reads it."""

    queued: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    busy: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    blocked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    live_envs: int = 0
    max_live_envs: int = 0
    done_base: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    capacity: dict[str, int] = field(default_factory=dict)  # stage -> what its input queue can hold
    workers: dict[str, int] = field(default_factory=dict)  # stage -> worker pool size

    def queue(self, stage: str) -> None:
        """An episode now waits for ``stage``."""
        self.queued[stage] += 1

    def start(self, stage: str) -> None:
        """A worker took a waiting episode into ``stage``."""
        self.queued[stage] -= 1
        self.busy[stage] += 1

    def finish(self, stage: str) -> None:
        """A worker finished ``stage`` for one episode (successfully or not)."""
        self.busy[stage] -= 1
        self.done[stage] += 1

    def block(self, stage: str) -> None:
        """A worker of ``stage`` waits for room in the next stage's bounded queue."""
        self.blocked[stage] += 1

    def unblock(self, stage: str) -> None:
        """The blocked worker handed its episode on (or gave up)."""
        self.blocked[stage] -= 1

    def env_opened(self) -> None:
        """An environment was created."""
        self.live_envs += 1
        self.max_live_envs = max(self.max_live_envs, self.live_envs)

    def env_closed(self) -> None:
        """An environment was closed."""
        self.live_envs -= 1

    def counts(self) -> dict[str, int]:
        """The snapshot fields (everything but ``t``, ``step``, ``strategy`` and ``gpu_util``)."""
        out: dict[str, int] = {f"{s}_queue": self.queued[s] for s in STAGES}
        out.update({f"{s}_busy": self.busy[s] for s in STAGES})
        out.update({f"{s}_blocked": self.blocked[s] for s in ("init", "run")})
        out.update({f"{s}_done": self.done_base.get(s, 0) + self.done[s] for s in STAGES})
        out["live_envs"] = self.live_envs
        out.update({f"{s}_queue_cap": n for s, n in self.capacity.items()})
        out.update({f"{s}_workers": n for s, n in self.workers.items()})
        return out


@dataclass(slots=True)
class TraceSummary:
    """What the snapshots of one ``collect`` add up to (it becomes part of the batch's ``RolloutStats``)."""

    snapshots: int = 0
    queue_sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    gpu_busy_s: float | None = None  # generator busy seconds over the snapshots' intervals (None: no busy source)
    wall_s: float = 0.0  # seconds the snapshots' intervals cover


class PipelineTracer:
    """Samples a :class:`StageBoard` periodically and appends pipeline-trace JSONL.

    ``path=None`` still samples (the sums go into ``RolloutBatch.stats``) but
    writes nothing. The file is opened in append mode for each line, so a run
    that spans many steps (and restarts) keeps one file; every line carries
    its step.
    """

    def __init__(
        self,
        path: str | Path | None,
        interval_s: float,
        *,
        generator_busy: GeneratorBusy | None = None,
        strategy: str = "",
        clock: Clock = loop_time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"trace interval must be > 0 seconds, got {interval_s}")
        self.path = Path(path) if path is not None else None
        self.interval_s = interval_s
        self.strategy = strategy
        self._busy = _busy_reader(generator_busy)
        self._clock = clock
        # a resumed run appends to its trace: t continues from the file's last snapshot, never runs backwards
        self._origin = clock() - (_last_t(self.path) if self.path is not None else 0.0)
        self._last_t = self._origin
        self._last_busy = self._busy() if self._busy else 0.0
        self.done_totals: dict[str, int] = dict.fromkeys(STAGES, 0)
        # asynchronous RL (tirl.trainer.loop): True while the trainer updates; adds ``trainer_updating``
        self.trainer_busy: Callable[[], bool] | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def begin(self) -> TraceSummary:
        """Start a new ``collect``: reset the utilisation interval; returns its summary accumulator."""
        self._last_t = self._clock()
        self._last_busy = self._busy() if self._busy else 0.0
        summary = TraceSummary(gpu_busy_s=0.0 if self._busy else None)
        return summary

    def end(self, board: StageBoard) -> None:
        """A ``collect`` ended: fold its completions into the run's cumulative ``X_done`` counts."""
        for s in STAGES:
            self.done_totals[s] += board.done[s]

    def snapshot(self, board: StageBoard, step: int, summary: TraceSummary | None = None) -> dict[str, Any]:
        """Take one snapshot now, write it (when a path is set) and return it."""
        now = self._clock()
        util: float | None = None
        if self._busy is not None:
            busy = self._busy()
            dt = now - self._last_t
            delta = busy - self._last_busy
            if dt > 0:
                util = round(min(1.0, max(0.0, delta / dt)), 4)
            if summary is not None and summary.gpu_busy_s is not None:
                summary.gpu_busy_s += max(0.0, delta)
            self._last_busy = busy
        if summary is not None:
            summary.wall_s += max(0.0, now - self._last_t)
            summary.snapshots += 1
            for s in STAGES:
                summary.queue_sums[s] += board.queued[s]
        self._last_t = now
        snap: dict[str, Any] = {"t": round(now - self._origin, 4), "step": step, "strategy": self.strategy}
        counts = board.counts()
        for key in ("init_queue", "run_queue", "eval_queue"):
            snap[key] = counts.pop(key)
        snap["gpu_util"] = util
        if self.trainer_busy is not None:
            snap["trainer_updating"] = bool(self.trainer_busy())
        snap.update(counts)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(snap) + "\n")
        return snap

    async def sample(self, board: StageBoard, step: int, summary: TraceSummary) -> None:
        """Snapshot every ``interval_s`` until cancelled (run as a task during ``collect``)."""
        while True:
            await asyncio.sleep(self.interval_s)
            self.snapshot(board, step, summary)


def _last_t(path: Path, tail: int = 65_536) -> float:
    """The ``t`` of the last complete snapshot in ``path`` (its last ``tail`` bytes); 0.0 when there is none."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - tail))
            lines = fh.read().splitlines()
    except OSError:  # no file yet (a new run), or unreadable: a fresh clock
        return 0.0
    for raw in reversed(lines):
        try:
            t = json.loads(raw).get("t")
        except (ValueError, AttributeError, RecursionError):  # a torn line, not an object: look further up
            continue
        if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t) and t >= 0:
            return float(t)
    return 0.0


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """Read a pipeline trace JSONL file with tirl's one reader (blank lines skipped)."""
    return [row for _, row in read_jsonl(path, objects=True)]
