"""Group-level checks after filtering: which groups are too small to learn from.

A group whose valid trajectories number fewer than ``min_valid`` cannot give a
group-relative advantage (one trajectory has no baseline); a group whose
rewards are all equal gives zero advantages and only costs compute.

Not covered: the resampling itself (the trainer asks the rollout strategy
for more trajectories of the tasks listed by :func:`groups_needing_more`).
"""

from __future__ import annotations

from tirl.types import Group


def valid_count(group: Group) -> int:
    """Trajectories in ``group`` that are neither void nor failed (after filtering)."""
    return sum(1 for t in group.trajectories if not t.failed and not t.info.get("void", False))


def groups_needing_more(groups: list[Group], all_ids: list[str], min_valid: int) -> list[str]:
    """Group ids (in ``all_ids`` order) with fewer than ``min_valid`` valid trajectories.

    ``all_ids`` lists every group that was requested, so a group that the filter
    emptied completely (and that is absent from ``groups``) is included.
    """
    counts = {g.id: valid_count(g) for g in groups}
    return [gid for gid in all_ids if counts.get(gid, 0) < min_valid]


def zero_variance(group: Group, tol: float = 1e-9) -> bool:
    """True when every trajectory of the group has the same reward (no learning signal)."""
    rewards = [t.reward or 0.0 for t in group.trajectories]
    return not rewards or max(rewards) - min(rewards) <= tol
