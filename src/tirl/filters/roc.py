"""Resample-on-Correct (rStar2-Agent's GRPO-RoC) as the downsampling step of ``filter.mode=roc``.

rStar2-Agent samples each group at twice its size and keeps half: among the **correct** trajectories it
keeps those with the fewest tool-induced errors (and, here, void turns), so a lucky answer reached through
crashing code does not teach that crashing code is fine; the **incorrect** ones are downsampled uniformly,
so the failures keep their variety. :func:`resample_on_correct` is that selection on one group:

* the kept group holds ``keep`` trajectories, with the oversampled group's share of correct ones
  (``floor(keep * correct / n + 0.5)``), filled from the other class when one class runs short;
* correct ones are ranked by (void turns, tool errors), ties broken by a seeded shuffle, and the first are
  kept; incorrect ones are a seeded uniform sample;
* the kept trajectories come back in their input order.

A *tool error* (:func:`tool_errors`) is a tool-role message whose text holds a Python exception line
(``NameError: ...``), a traceback header, or one of tirl's observation markers ``[timed out]``,
``[memory limit exceeded]``, ``[exit status N]``, ``[sandbox error``, among the policy's messages only (a
tool message that came with the task's prompt is the same in the whole group). *Correct* is the evaluator's
verdict (``Trajectory.correct``), else reward >= 1.

Under ``filter.mode=roc`` (:mod:`tirl.filters.void_turn`) void trajectories are kept like ``off`` (in the
group statistics, in the loss): the mode changes which trajectories a group keeps, not how a void one is
treated. The oversampling itself is ``algo.group_size`` set to twice the intended group
(``tirl ablate``'s ``roc`` arm does this); the filter keeps ``len(group) // 2``.

Not covered: rStar2-Agent's format penalty (answer-tag violations; tirl's void rule covers the missing
action/answer case) and its probabilistic selection weights — the ranking here is deterministic.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Sequence

from tirl.types import Role, Trajectory

_ERROR_LINE = re.compile(
    r"(^|\n)\s*(Traceback \(most recent call last\)|[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b:?)"
    r"|\[timed out\]|\[memory limit exceeded\]|\[exit status -?\d+\]|\[sandbox error"
)


def tool_errors(traj: Trajectory) -> int:
    """The number of the policy's tool-role messages of ``traj`` that report an error (module docstring).

    Only :attr:`~tirl.types.Trajectory.policy_messages` count: a tool message of the task's prompt (a
    demonstration's output) is the same in every trajectory of the group and says nothing about this one.
    """
    return sum(1 for m in traj.policy_messages if m.role is Role.TOOL and m.content and _ERROR_LINE.search(m.content))


def is_correct(traj: Trajectory) -> bool:
    """The evaluator's verdict, else reward >= 1."""
    if traj.correct is not None:
        return traj.correct
    return (traj.reward or 0.0) >= 1.0 - 1e-9


def group_rng(group_id: str, trajs: Sequence[Trajectory]) -> random.Random:
    """A generator seeded by the group and its trajectory ids: the same rollouts select the same rows."""
    digest = hashlib.sha256("\0".join([group_id, *(t.id for t in trajs)]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def resample_on_correct(trajs: Sequence[Trajectory], keep: int, rng: random.Random) -> list[Trajectory]:
    """The ``keep`` trajectories RoC keeps from an oversampled group, in input order (module docstring)."""
    if keep >= len(trajs):
        return list(trajs)
    if keep <= 0:
        return []
    pos = [i for i, t in enumerate(trajs) if is_correct(t)]
    neg = [i for i, t in enumerate(trajs) if not is_correct(t)]
    k_pos = min(len(pos), math.floor(keep * len(pos) / len(trajs) + 0.5))
    k_neg = min(len(neg), keep - k_pos)
    k_pos = min(len(pos), keep - k_neg)  # one class short: the other fills the group
    order = {i: rng.random() for i in pos}
    ranked = sorted(pos, key=lambda i: (len(trajs[i].void_turns), tool_errors(trajs[i]), order[i]))
    chosen = set(ranked[:k_pos]) | set(rng.sample(neg, k_neg))
    return [t for i, t in enumerate(trajs) if i in chosen]


__all__ = ["group_rng", "is_correct", "resample_on_correct", "tool_errors"]
