"""What a rollout batch measured beyond its trajectories: :class:`RolloutStats`, the ``rollout/*`` pipeline metrics.

A strategy returns one :class:`RolloutStats` with every
:class:`~tirl.rollout.base.RolloutBatch`; the trainer adds up the stats of a
step's resample rounds (:meth:`RolloutStats.add`) and writes
:meth:`RolloutStats.metrics` into every metrics row. The fields are the
additive raw sums, so a step of several rounds gets exact means and ratios
(not a mean of means); what is derived from them (queue means, the generator
busy fraction, mean stage times, throughput) is computed only in
:meth:`~RolloutStats.metrics`.

Every key is in every row: a count is 0 when nothing happened, a mean over
nothing is ``None`` (null in metrics.jsonl: a stage no episode entered, a
batch without a trace snapshot), and ``rollout/gpu_util`` is ``None`` when the
strategy had no busy source for its generator (a generator that does not
meter itself). What the trajectories themselves say (how many, how they ended,
failed ones) is not here: the trainer counts it from them
(:func:`tirl.trainer.trainer.rollout_metrics`).

Not covered: per-episode distributions (only sums and means), the generator's
slot occupancy (``gpu_util`` is "had any request in flight"), and anything a
remote env host does not report back to this process.

>>> a = RolloutStats(episodes=4, wall_s=2.0, max_live_envs=3)
>>> a.add(RolloutStats(episodes=2, wall_s=1.0, max_live_envs=5))
>>> m = a.metrics()
>>> m["rollout/trajectories_per_s"], m["rollout/max_live_envs"], m["rollout/gpu_util"]
(2.0, 5.0, None)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tirl.rollout.trace import STAGES

__all__ = ["RETRIED_STAGES", "RolloutStats", "StageStats"]

#: The stages with ``rollout.retries``: the Agent Runner is never retried (a half-run episode has mutated its env).
RETRIED_STAGES: tuple[str, ...] = ("init", "eval")


@dataclass(slots=True)
class StageStats:
    """One stage's accounting over a batch (sums, so that two batches add up)."""

    attempts: int = 0
    """Attempts started; a retry is one more (the Agent Runner: one per episode that ran)."""
    retries: int = 0
    """Attempts beyond each episode's first."""
    timeouts: int = 0
    """Attempts that ran past the stage's ``rollout.<stage>_timeout_s``."""
    episodes: int = 0
    """Episodes that entered the stage."""
    busy_s: float = 0.0
    """Seconds inside the stage, summed over those episodes (all attempts; ``finished - started``)."""
    wait_s: float = 0.0
    """Seconds waiting for the stage (its queue, a free worker), summed over them (``started - queued``)."""
    queue_depth_sum: float = 0.0
    """The stage's input-queue depth, summed over the trace snapshots."""

    def add(self, other: StageStats) -> None:
        """Add ``other``'s sums (another batch of the same step)."""
        self.attempts += other.attempts
        self.retries += other.retries
        self.timeouts += other.timeouts
        self.episodes += other.episodes
        self.busy_s += other.busy_s
        self.wait_s += other.wait_s
        self.queue_depth_sum += other.queue_depth_sum


def _stages() -> dict[str, StageStats]:
    return {s: StageStats() for s in STAGES}


def _per(total: float, n: int) -> float | None:
    return total / n if n else None


@dataclass(slots=True)
class RolloutStats:
    """The pipeline's own measurements of one batch (or of a step's batches, added up)."""

    episodes: int = 0
    """Episodes run (the batch's trajectories)."""
    wall_s: float = 0.0
    """Seconds from the start to the end of ``collect``."""
    max_live_envs: int = 0
    """The most environments alive at once (created, not yet closed)."""
    close_errors: int = 0
    """``env.close()`` calls that raised or ran past their limit (never fatal)."""
    snapshots: int = 0
    """Trace snapshots taken (the divisor of the queue means)."""
    traced_s: float = 0.0
    """Seconds the snapshots cover (the divisor of ``gpu_util``)."""
    generator_busy_s: float | None = None
    """Seconds the generator had a request in flight during them; None without a busy source."""
    stages: dict[str, StageStats] = field(default_factory=_stages)
    """``init``, ``run``, ``eval``."""

    def add(self, other: RolloutStats) -> None:
        """Fold in ``other`` (another resample round of the same step): sums add, the peak is the larger."""
        self.episodes += other.episodes
        self.wall_s += other.wall_s
        self.max_live_envs = max(self.max_live_envs, other.max_live_envs)
        self.close_errors += other.close_errors
        self.snapshots += other.snapshots
        self.traced_s += other.traced_s
        if other.generator_busy_s is not None:
            self.generator_busy_s = (self.generator_busy_s or 0.0) + other.generator_busy_s
        for s in STAGES:
            self.stages[s].add(other.stages[s])

    @property
    def gpu_util(self) -> float | None:
        """Generator busy time over traced time, in [0, 1]; None without a busy source or a traced interval."""
        if self.generator_busy_s is None or self.traced_s <= 0:
            return None
        return min(1.0, max(0.0, self.generator_busy_s / self.traced_s))

    def metrics(self) -> dict[str, float | None]:
        """The ``rollout/*`` keys of a metrics row, every one always present (see the module doc)."""
        out: dict[str, float | None] = {
            "rollout/wall_s": self.wall_s,
            "rollout/trajectories_per_s": self.episodes / self.wall_s if self.wall_s > 0 else 0.0,
            "rollout/max_live_envs": float(self.max_live_envs),
            "rollout/close_errors": float(self.close_errors),
            "rollout/gpu_util": self.gpu_util,
        }
        for name, st in self.stages.items():
            out[f"rollout/{name}_attempts"] = float(st.attempts)
            if name in RETRIED_STAGES:
                out[f"rollout/{name}_retries"] = float(st.retries)
            out[f"rollout/{name}_timeouts"] = float(st.timeouts)
            out[f"rollout/{name}_queue_mean"] = _per(st.queue_depth_sum, self.snapshots)
            out[f"rollout/{name}_s_mean"] = _per(st.busy_s, st.episodes)
            out[f"rollout/{name}_wait_s_mean"] = _per(st.wait_s, st.episodes)
        return out
