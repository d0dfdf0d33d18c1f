"""What the Evaluator stage stores of ``evaluate``'s reward: a number tirl can train on, in strict JSON.

A NaN, infinite or float32-overflowing reward is the episode's failure (reward 0, ``eval_failure``
``nonfinite_reward``, still in the update); a reward that is not a number is the reward function's bug
(``eval_failed`` at once, naming the function). Before, ``float(result.reward)`` stored NaN and infinity as
they were (``trajectories.jsonl`` then held ``NaN``, which is not JSON), took ``"1.0"`` as 1.0, and retried
``None`` as if it were a flaky evaluation.
"""

from __future__ import annotations

import json
import logging
import math
from fractions import Fraction
from typing import Any

import pytest
from rollout_fakes import FakeEnv, FakeRunner, World, cfg, tasks

from tirl.envs.base import EnvError, EvalResult, checked_result, reward_number
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy
from tirl.trainer.trainer import rollout_metrics
from tirl.types import TerminationReason, Trajectory


class RewardEnv(FakeEnv):
    """``evaluate`` returns ``task.data['value']`` as the reward as it is, with it in ``info`` too."""

    name = "reward-test"

    async def evaluate(self) -> EvalResult:
        value = self.task.data["value"]
        return EvalResult(reward=value, correct=True, info={"value": value, "series": [1.0, value], "n": 2})


SOURCE = f"env 'reward-test' ({RewardEnv.__module__}.RewardEnv.evaluate)"  # the function, as errors name it


def _strict(traj: Trajectory) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} written into a trajectory line")

    return json.loads(traj.to_json(), parse_constant=refuse)


async def _collect(value: Any, strategy: str = "pipeline", n: int = 2) -> tuple[list[Trajectory], dict[str, Any]]:
    """The trajectories and the ``rollout/*`` keys the trainer writes for them."""
    world = World()
    factory = lambda task: RewardEnv(world, task)  # noqa: E731
    rollout = make_strategy(cfg(strategy, retries=1), factory, FakeRunner(world))
    try:
        batch = await rollout.collect(RolloutRequest(tasks=tasks(n, value=value), group_size=2))
    finally:
        await rollout.close()
    return batch.trajectories, {**rollout_metrics(batch.trajectories), **batch.stats.metrics()}


NONFINITE = [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"),
             (1e39, "1e+39"),  # finite, but the trainer's float32 holds it as inf: NaN advantages for its group
             (-(10**400), "-Infinity")]  # fmt: skip


@pytest.mark.parametrize(("value", "shown"), NONFINITE, ids=["nan", "inf", "-inf", "1e39", "-10**400"])
@pytest.mark.parametrize("strategy", ["pipeline", "sync_batch"])
async def test_a_nonfinite_reward_scores_the_episode_0_and_is_counted(value: Any, shown: str, strategy: str) -> None:
    trajs, stats = await _collect(value, strategy)
    assert len(trajs) == 4 and stats["rollout/eval_failure/nonfinite_reward"] == 4.0
    for traj in trajs:
        assert traj.termination is TerminationReason.ANSWERED and not traj.failed  # in the update
        assert traj.reward == 0.0 and traj.correct is False  # +inf once counted as correct
        evaluation = traj.info["eval"]
        assert evaluation["eval_failure"] == "nonfinite_reward" and evaluation["reward_returned"] == shown
        assert evaluation["reward_source"] == SOURCE
        assert traj.stages["eval"].attempts == 1  # the episode's result, not a fault to retry
        line = _strict(traj)
        assert line["reward"] == 0.0
        kept = None if isinstance(value, float) and not math.isfinite(value) else value  # an int is exact JSON
        assert line["info"]["eval"]["value"] == kept and line["info"]["eval"]["series"] == [1.0, kept]


async def test_the_first_nonfinite_reward_of_a_source_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tirl.rollout.pipeline"):
        await _collect(math.nan, n=3)
    lines = [r.getMessage() for r in caplog.records if "nonfinite_reward" in r.getMessage()]
    assert lines == [
        f"{SOURCE} returned the reward NaN: the episode scores 0 (counted in rollout/eval_failure/nonfinite_reward)"
    ]


@pytest.mark.parametrize(("value", "shown"), [("1.0", "'1.0' (str)"), (None, "None (NoneType)"), ([1], "[1] (list)")])
async def test_a_reward_that_is_not_a_number_fails_the_evaluation_naming_the_function(value: Any, shown: str) -> None:
    trajs, stats = await _collect(value)
    for traj in trajs:
        assert traj.termination is TerminationReason.EVAL_FAILED and traj.reward is None
        assert traj.error == (
            f"evaluation failed: EnvError: {SOURCE} returned the reward {shown}, not a number — "
            "return a float from it (0.0 for no reward) [1 attempt(s)]"
        )  # one attempt although rollout.retries=1: the same code returns the same type
        _strict(traj)
    assert stats["rollout/failed"] == 4.0 and stats["rollout/eval_retries"] == 0.0


@pytest.mark.parametrize(("value", "stored"), [(1, 1.0), (True, 1.0), (Fraction(1, 4), 0.25), (-3.4e38, -3.4e38)])
async def test_numbers_tirl_can_train_on_are_stored_as_floats(value: Any, stored: float) -> None:
    trajs, stats = await _collect(value)
    assert all(type(t.reward) is float and t.reward == stored and t.correct for t in trajs)
    assert not any(key.startswith("rollout/eval_failure/") for key in stats)


def test_checked_result_is_idempotent_and_copies_info() -> None:
    info = {"xs": (math.nan, 1.0), "deep": {"y": -math.inf}}
    once = checked_result(EvalResult(reward=math.nan, correct=True, info=info), "f")
    assert once.info == {"xs": [None, 1.0], "deep": {"y": None}, "eval_failure": "nonfinite_reward",
                         "reward_returned": "NaN", "reward_source": "f"}  # fmt: skip
    assert checked_result(once, "g") == once and math.isnan(info["xs"][0])  # info itself is left as it was
    with pytest.raises(EnvError, match=r"^my_reward returned the reward b'1' \(bytes\), not a number"):
        reward_number(b"1", "my_reward")
