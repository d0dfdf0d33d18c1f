"""Group-relative advantage estimators (GRPO, RLOO) over ragged groups.

After void-turn filtering, groups have different sizes, so the estimators take
a flat reward vector and a group index per trajectory instead of a ``[G, N]``
matrix:

>>> import torch
>>> r = torch.tensor([1.0, 0.0, 1.0, 0.0])
>>> g = torch.tensor([0, 0, 1, 1])
>>> group_advantages(r, g, estimator="rloo").tolist()
[1.0, -1.0, 1.0, -1.0]

Every trajectory of a group gets one scalar advantage; the loss broadcasts it
over the trajectory's sampled tokens. A group with a single trajectory has no
baseline and gets advantage 0 (it contributes no gradient); so does a group
whose rewards are all equal.

``weights`` (optional, ``[N]``) marks trajectories that are *in the group
statistics* but whose advantage is forced to 0 afterwards — not used by
``drop`` (void trajectories are absent), kept so callers can experiment.

The statistics are computed in float64 and the advantages returned as float32: in float32 a reward of
1e30 squared overflowed (the group's std became inf and every advantage 0: the group taught nothing) and two
rewards of 3e38 summed to inf (NaN advantages, so every optimiser step holding the group was skipped). A
non-finite reward raises ``ValueError`` naming it: one NaN made the whole group's advantages NaN. tirl's
rollout never passes one (:func:`tirl.envs.base.checked_result` scores such an episode 0); a caller that builds
trajectories itself gets the error, not a run of silently skipped updates.

Not covered: token-level (GAE) advantages — tirl has no value model; rewards whose spread in a group exceeds
float32 (about 1.7e38) without ``std_normalize`` (RLOO, or GRPO without it), whose advantages overflow.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

AdvantageFn = Callable[[Tensor, Tensor, bool, float], Tensor]


def _group_sums(values: Tensor, group_ids: Tensor, n_groups: int) -> Tensor:
    """Sum of ``values`` per group.

    values: Tensor  # [N]
    group_ids: Tensor  # [N] long in [0, n_groups)
    returns: Tensor  # [n_groups]
    """
    return torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, group_ids, values)


def _group_stats(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-trajectory group count, mean and unbiased std (std 0 for groups of one).

    rewards: Tensor  # [N]
    group_ids: Tensor  # [N]
    returns: (count, mean, std), each Tensor  # [N]
    """
    n_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    ones = torch.ones_like(rewards)
    count = _group_sums(ones, group_ids, n_groups)  # [G]
    mean = _group_sums(rewards, group_ids, n_groups) / count.clamp(min=1)  # [G]
    dev2 = (rewards - mean[group_ids]) ** 2  # [N]
    var = _group_sums(dev2, group_ids, n_groups) / (count - 1).clamp(min=1)  # [G]
    return count[group_ids], mean[group_ids], var.sqrt()[group_ids]


def grpo(rewards: Tensor, group_ids: Tensor, std_normalize: bool, eps: float) -> Tensor:
    """GRPO: ``(r - mean_g) / (std_g + eps)`` (or without the std when ``std_normalize`` is false).

    rewards: Tensor  # [N]
    group_ids: Tensor  # [N]
    returns: Tensor  # [N]
    """
    count, mean, std = _group_stats(rewards, group_ids)
    adv = rewards - mean
    if std_normalize:
        adv = adv / (std + eps)
    return torch.where(count > 1, adv, torch.zeros_like(adv))


def rloo(rewards: Tensor, group_ids: Tensor, std_normalize: bool, eps: float) -> Tensor:
    """RLOO: ``r_i - mean_{j != i} r_j`` = ``n/(n-1) * (r_i - mean_g)``; ``std_normalize`` is ignored.

    rewards: Tensor  # [N]
    group_ids: Tensor  # [N]
    returns: Tensor  # [N]
    """
    del std_normalize, eps
    count, mean, _ = _group_stats(rewards, group_ids)
    adv = (rewards - mean) * count / (count - 1).clamp(min=1)
    return torch.where(count > 1, adv, torch.zeros_like(adv))


ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {"grpo": grpo, "rloo": rloo}


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    estimator: str = "grpo",
    std_normalize: bool = True,
    eps: float = 1e-6,
    weights: Tensor | None = None,
) -> Tensor:
    """One advantage per trajectory, normalised within its group.

    rewards: Tensor  # [N] float, finite (else ValueError)
    group_ids: Tensor  # [N] long, dense ids 0..G-1
    weights: Tensor | None  # [N]; where 0, the advantage is set to 0 after the statistics
    returns: Tensor  # [N] float32
    """
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"advantage estimator {estimator!r} is not one of {', '.join(ADVANTAGE_ESTIMATORS)}")
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must be equal [N]")
    if rewards.numel() == 0:
        return rewards.clone()
    bad = (~torch.isfinite(rewards)).nonzero().flatten().tolist()
    if bad:
        raise ValueError(
            f"rewards[{bad[0]}] is {rewards[bad[0]].item()} ({len(bad)} of {rewards.numel()} rewards are not finite)"
            " — a reward must be a finite number: score such an episode 0 (tirl.envs.base.checked_result does)"
        )
    adv = ADVANTAGE_ESTIMATORS[estimator](rewards.double(), group_ids.long(), std_normalize, eps).float()
    if weights is not None:
        adv = adv * (weights > 0).to(adv.dtype)
    return adv
