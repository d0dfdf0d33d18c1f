"""Fail fast: a step (or an evaluation) whose every trajectory failed stops the run with one line.

A trajectory *fails* when the infrastructure, not the model, ended it
(:attr:`tirl.types.Trajectory.failed`: ``init_failed``, ``error``,
``timeout``, ``eval_failed`` — a ``SetupError`` inside the episode, a sandbox
that cannot start, an env that raises). One failed trajectory is counted and
left out of the update; when *every* trajectory of a step failed there is
nothing to learn from, and the same cause will fail the next step too. The
trainer then raises the :class:`~tirl.errors.SetupError` of
:func:`failed_error` — the most common reason, the env, and the fix — which
``tirl train`` prints as one ``error:`` line with exit status 2, after the
step's metrics row and trajectory sample are written (so the run directory
shows what happened). ``trainer.tolerate_failed_steps = N`` lets N such
steps pass; each of them says so in the step line.

Not covered: steps where only some trajectories fail (counted in
``rollout/failed``, never fatal), and failures that a resample round would
not repeat (a flaky server): tolerate them with the key above.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tirl.config import TirlConfig
from tirl.errors import SetupError
from tirl.types import Trajectory

_ATTEMPTS = re.compile(r"\s*\[\d+ attempt\(s\)\]$")
_TURN = re.compile(r"^env\.step failed in turn \d+: ")

#: (a pattern of the failure text, the fix) — the first match names the fix; see :func:`fix_for`.
FIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (  # tirl.envs.base.reward_number: the reward function's bug, whatever the model wrote
        re.compile(r"returned the reward .* not a number"),
        "make the reward function the error names return a float (0.0 for no reward)",
    ),
    (
        re.compile(r"chat format has no tool definitions|does not render tool", re.I),
        "give a model whose chat template renders tools (--model DIR), or --set env.offer_tools=false "
        "(verifiers envs) / --set env.tools=false",
    ),
    (
        re.compile(r"bubblewrap|bwrap|sandbox", re.I),
        "check the sandbox with `tirl sandbox exec FILE`, or run without it: --set sandbox.backend=process",
    ),
    (
        re.compile(r"timed out|timeout", re.I),
        "raise rollout.run_timeout_s / rollout.init_timeout_s / rollout.eval_timeout_s (--set KEY=SECONDS)",
    ),
    (
        re.compile(r"connect|refused|unreachable|HTTP|status \d{3}", re.I),
        "check that the server at model.base_url is up and serves model.model_id",
    ),
)


@dataclass(frozen=True, slots=True)
class FailureSummary:
    """How the failed trajectories of one step ended: the most common reason and how many share it."""

    failed: int
    total: int
    reason: str
    same: int

    @property
    def all_failed(self) -> bool:
        """Every trajectory failed (and there was at least one)."""
        return self.total > 0 and self.failed == self.total


def reason_of(traj: Trajectory) -> str:
    """The failure text of ``traj`` without its attempt count or turn number (so equal causes compare equal)."""
    text = traj.error or (traj.termination.value if traj.termination else "unknown failure")
    return _TURN.sub("", _ATTEMPTS.sub("", text.strip()))


def summarize_failures(trajs: Sequence[Trajectory]) -> FailureSummary:
    """Count the failed trajectories of ``trajs`` and find their most common reason."""
    reasons = Counter(reason_of(t) for t in trajs if t.failed)
    reason, same = reasons.most_common(1)[0] if reasons else ("", 0)
    return FailureSummary(failed=sum(reasons.values()), total=len(trajs), reason=reason, same=same)


def fix_for(reason: str) -> str:
    """The fix :data:`FIXES` names for a failure text; a generic one when none matches."""
    for pattern, fix in FIXES:
        if pattern.search(reason):
            return fix
    return "fix the cause (each trajectory's `error` field says it)"


def failed_error(summary: FailureSummary, cfg: TirlConfig, where: str) -> SetupError:
    """The one-line error for ``where`` (``"step 3"``, ``"the held-out evaluation"``) whose trajectories all failed."""
    shared = "all" if summary.same == summary.failed else f"{summary.same}"
    tolerate = "; to go on past such steps, --set trainer.tolerate_failed_steps=N" if where.startswith("step") else ""
    return SetupError(
        f"{where}: every one of the {summary.total} trajectories failed in env {cfg.env.name} "
        f"({shared} with: {summary.reason}) — {fix_for(summary.reason)}{tolerate}"
    )
