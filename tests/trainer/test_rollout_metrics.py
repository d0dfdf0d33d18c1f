"""``rollout_metrics``' termination counts against a plain loop: every reason in every row, failed ones counted."""

from __future__ import annotations

import random

from tirl.trainer.trainer import rollout_metrics
from tirl.types import TerminationReason, Trajectory


def test_termination_counts_match_a_plain_loop_and_every_reason_is_a_key() -> None:
    rng = random.Random(0)
    reasons = [*TerminationReason, None]
    trajs = [Trajectory(id=f"t{i}", messages=[], termination=rng.choice(reasons), reward=float(rng.random() < 0.3))
             for i in range(200)]  # fmt: skip
    got = rollout_metrics(trajs)
    want: dict[str, float] = {}
    for reason in TerminationReason:
        n = 0
        for t in trajs:
            if t.termination == reason:
                n += 1
        want[f"rollout/termination/{reason.value}"] = float(n)
    assert {k: v for k, v in got.items() if k.startswith("rollout/termination/")} == want
    assert sum(want.values()) == sum(1 for t in trajs if t.termination is not None)
    assert want["rollout/termination/error"] > 0  # failed episodes are counted here, unlike rollout/turns_mean


def test_an_empty_step_still_has_every_key_at_zero() -> None:
    got = rollout_metrics([])
    assert all(got[f"rollout/termination/{r.value}"] == 0.0 for r in TerminationReason)
