r"""The ``penalize`` remedy for void drift: a bounded push-down on the void turn's own tokens.

Why: under ``filter.mode=drop`` a void trajectory leaves the batch, so nothing
ever lowers the probability of the tokens that produced the void turn; the
other updates move it like a random walk and the void share can drift up
until the run collapses (README, "void drift"). ``off`` and ``mask`` keep the
void trajectory in its group's reward statistics, which the seed forbids:
its reward 0 shifts the baseline of the valid trajectories, and under
``off`` its earlier, correct turns are blamed along with the void one.

What ``penalize`` does, and what it keeps from the seed:

* the void trajectory is **removed** from its group before any statistic
  (exactly as ``drop``): group mean/std, advantages and the valid
  trajectories' ratios never see it;
* it comes back as a separate row whose loss mask covers **only the void
  turn's sampled tokens** (:func:`void_turn_mask`) and whose advantage is a
  fixed ``-penalty`` (:func:`penalty_rows`) — earlier turns (correct code,
  correct reads of the tool output) get no gradient;
* its per-token loss is the PPO term with that fixed negative advantage
  (:func:`tirl.algorithms.losses.policy_loss` on the rows, nothing of its own)::

      l = penalty * max(r, clip(r, 1 - clip_low, 1 + clip_high))   then   min(l, penalty * dual_clip)

  so the push-down is bounded: once ``r < 1 - clip_low`` the term is flat
  (the void tokens were lowered enough for this update) and once
  ``r > dual_clip`` it is flat too (the dual clip holds a runaway ratio), and
  no token contributes more than ``penalty * dual_clip``.

The trainer appends the penalty rows after the valid rows of the step; the
ordinary :func:`~tirl.algorithms.losses.policy_loss` then computes exactly
these terms for them (a test checks the two against a plain loop).

Not covered: void turns that are not the model's sampled text (a trajectory
judged void only because the env ended it with reason ``void`` after its
messages were cut: its last sampled run is used); credit for *how* void a
turn is (every void turn gets the same fixed advantage).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from tirl.types import Trajectory


def sampled_runs(loss_mask: list[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of each maximal run of 1s in ``loss_mask`` (end exclusive): one run per assistant turn.

    >>> sampled_runs([0, 0, 1, 1, 0, 1, 0])
    [(2, 4), (5, 6)]
    """
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, bit in enumerate(loss_mask):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(loss_mask)))
    return runs


def void_turn_mask(traj: Trajectory) -> list[int]:
    """The loss mask of ``traj`` restricted to the sampled tokens of its void turns.

    ``traj.void_turns`` index the assistant messages from 0 (as the filter sets
    them); the policy's turn ``k`` is the ``k``-th run of sampled tokens, and
    the assistant messages that came with the prompt
    (:attr:`~tirl.types.Trajectory.prompt_assistant_messages`) come before it
    and have no run. An index past the recorded runs (a turn the runner cut)
    maps to the last run. A trajectory with no void turn gets an all-zero mask.

    >>> t = Trajectory(id="t", messages=[], token_ids=[0] * 7, loss_mask=[0, 1, 1, 0, 1, 1, 1])
    >>> t.void_turns = [1]
    >>> void_turn_mask(t)
    [0, 0, 0, 0, 1, 1, 1]
    """
    out = [0] * len(traj.loss_mask)
    runs = sampled_runs(traj.loss_mask)
    if not runs:
        return out
    given = traj.prompt_assistant_messages
    for k in traj.void_turns:
        if k < given:
            continue  # a demonstration in the prompt: not sampled, never trained on
        start, end = runs[min(k - given, len(runs) - 1)]
        out[start:end] = [1] * (end - start)
    return out


def penalty_rows(void: list[Trajectory], penalty: float) -> tuple[list[Trajectory], Tensor]:
    """Copies of the void trajectories masked to their void turns, and their advantages ``-penalty``.

    The copies have loss weight 1 (they are trained on) and keep the token
    ids and generator log-probs; the originals are not changed. Rows whose
    void turns have no sampled token are left out.

    returns: (rows, advantages: Tensor  # [len(rows)])
    """
    if penalty < 0:
        raise ValueError(f"penalty must be >= 0 (it is applied as a negative advantage), got {penalty}")
    rows = []
    for t in void:
        mask = void_turn_mask(t)
        if any(mask):
            rows.append(replace(t, loss_mask=mask, loss_weight=1.0, info=dict(t.info)))
    return rows, torch.full((len(rows),), -float(penalty), dtype=torch.float32)


__all__ = ["penalty_rows", "sampled_runs", "void_turn_mask"]
