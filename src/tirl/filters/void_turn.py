"""Void-turn filtering of a training batch (SimpleTIR's rule, tirl's placement).

A trajectory with any void assistant turn (see :mod:`tirl.parsing`) is void.
:class:`VoidTurnFilter` runs on the groups of a batch **before** any group
statistic, advantage, importance ratio or KL is computed:

* ``drop`` (default): void trajectories are removed from their groups, so they
  are absent from the group mean/std, the ratio statistics and the loss.
* ``mask``: SimpleTIR's public behaviour, kept for comparison: void
  trajectories stay in their groups (and so in the group mean/std) but get
  ``loss_weight`` 0 — their tokens contribute nothing to the loss.
* ``off``: nothing is removed or masked; verdicts are still counted.

Infrastructure failures (``Trajectory.failed``) are always removed and
counted separately: they are not evidence about the policy.

Not covered here: resampling (the trainer asks the rollout for more when
:attr:`FilterStats.min_valid_per_group` is too low) and zero-variance groups
(see :mod:`tirl.filters.groups`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tirl.parsing import DEFAULT_RULES, ParseRules, TrajectoryVerdict, judge_messages
from tirl.types import Group, TerminationReason, Trajectory

FilterMode = Literal["drop", "mask", "off"]
LOSS_WEIGHT_KEY = "loss_weight"  # Trajectory.info key read by the batcher: 0.0 zeroes the loss mask


def judge_trajectory(traj: Trajectory, rules: ParseRules = DEFAULT_RULES) -> TrajectoryVerdict:
    """The void verdict of one trajectory, from its assistant messages only.

    An episode the environment already ended with reason ``void`` is void even
    if its messages were cut before the void turn was recorded.
    """
    verdict = judge_messages(traj.messages, rules)
    if not verdict.void and traj.termination is TerminationReason.VOID:
        n = len(traj.assistant_messages)
        return TrajectoryVerdict(void=True, void_turns=(max(n - 1, 0),), turns=verdict.turns)
    return verdict


@dataclass(slots=True)
class FilterStats:
    """Per-batch filter statistics (logged under ``filter/``)."""

    trajectories: int = 0
    valid: int = 0
    void: int = 0
    failed: int = 0
    empty_groups: int = 0
    min_valid_per_group: int = 0
    void_ids: list[str] = field(default_factory=list)

    @property
    def void_ratio(self) -> float:
        """Void trajectories over judged (non-failed) ones; 0 for an empty batch."""
        judged = self.valid + self.void
        return self.void / judged if judged else 0.0

    def metrics(self) -> dict[str, float]:
        """The ``filter/*`` metric names of the training log."""
        return {
            "filter/valid_trajectories": float(self.valid),
            "filter/void_trajectories": float(self.void),
            "filter/failed_trajectories": float(self.failed),
            "filter/void_ratio": self.void_ratio,
            "filter/empty_groups": float(self.empty_groups),
            "filter/min_valid_per_group": float(self.min_valid_per_group),
        }


@dataclass(slots=True)
class FilterResult:
    """The groups that go on to advantage computation, and what was taken out."""

    groups: list[Group]
    stats: FilterStats
    removed: list[Trajectory] = field(default_factory=list)


@dataclass(slots=True)
class VoidTurnFilter:
    """Applies the void-turn rule to a batch of groups; see the module docstring for the modes."""

    mode: FilterMode = "drop"
    rules: ParseRules = DEFAULT_RULES

    def __post_init__(self) -> None:
        if self.mode not in ("drop", "mask", "off"):
            raise ValueError(f"filter mode {self.mode!r} is not one of drop, mask, off")

    def apply(self, groups: list[Group]) -> FilterResult:
        """Judge every trajectory; return new groups (inputs are not mutated except ``info``)."""
        stats = FilterStats()
        out: list[Group] = []
        removed: list[Trajectory] = []
        valid_counts: list[int] = []
        for group in groups:
            kept: list[Trajectory] = []
            n_valid = 0
            for traj in group.trajectories:
                stats.trajectories += 1
                if traj.failed:
                    stats.failed += 1
                    removed.append(traj)
                    continue
                verdict = judge_trajectory(traj, self.rules)
                traj.info["void"] = verdict.void
                traj.info["void_turns"] = list(verdict.void_turns)
                if verdict.void:
                    stats.void += 1
                    stats.void_ids.append(traj.id)
                    if self.mode == "drop":
                        removed.append(traj)
                        continue
                    if self.mode == "mask":
                        traj.info[LOSS_WEIGHT_KEY] = 0.0
                else:
                    stats.valid += 1
                    n_valid += 1
                kept.append(traj)
            valid_counts.append(n_valid)
            if not kept:
                stats.empty_groups += 1
                continue
            out.append(Group(id=group.id, trajectories=kept))
        stats.min_valid_per_group = min(valid_counts) if valid_counts else 0
        return FilterResult(groups=out, stats=stats, removed=removed)


def rules_from_config(exec_langs: list[str], boxed: bool = True, answer_tags: bool = True) -> ParseRules:
    """Build :class:`ParseRules` from the ``[filter]`` config section's fields."""
    return ParseRules(exec_langs=frozenset(exec_langs), boxed=boxed, answer_tags=answer_tags)
