"""`tirl train` writes what the rollout pipeline measured into every metrics.jsonl row (and TensorBoard).

Real runs through the CLI in this process: the tiny random model of tests/tiny_run.py, the real pipeline. Before,
the trainer dropped the strategy's ``RolloutBatch.stats`` whole: no retries, timeouts, queue depths, generator busy
fraction, peak live environments or stage times in any row. Covered: the default env (nothing goes wrong: the
counts are 0, the peak within the configured capacity, the fraction in [0, 1]) and an env whose every first
evaluation runs past ``rollout.eval_timeout_s`` on a step with a resample round (the counts of both rounds added
up). Not covered: a run on Ray (the same ``Rollout`` strategy; tests/distributed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model, with_sets

from tirl.cli import main
from tirl.envs import register_env, unregister_env
from tirl.envs.base import EvalResult, StepResult
from tirl.trainer.logging import read_metrics
from tirl.types import Message, Role, TerminationReason

#: filter.mode=drop: the random model writes only void turns, so the step resamples its groups
DROP_ARGS = with_sets(TINY_TRAIN_ARGS, "filter.mode=drop")

STAGES = ("init", "run", "eval")
COUNTS = [
    "rollout/max_live_envs", "rollout/close_errors", "rollout/init_retries", "rollout/eval_retries",
    *(f"rollout/{s}_{what}" for s in STAGES for what in ("attempts", "timeouts")),
]  # fmt: skip
SECONDS = ["rollout/wall_s", *(f"rollout/{s}_{what}" for s in STAGES for what in ("s_mean", "wait_s_mean"))]
MEANS = ["rollout/trajectories_per_s", *(f"rollout/{s}_queue_mean" for s in STAGES)]
KEYS = [*COUNTS, *SECONDS, *MEANS, "rollout/gpu_util"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "model")


def _train(
    model_dir: Path, run_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str, base: list[str] = TINY_TRAIN_ARGS
) -> list[dict[str, Any]]:
    code = main(["train", "--model", str(model_dir), "--run-dir", str(run_dir), *base, *extra])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    rows = read_metrics(run_dir)
    for row in rows:
        missing = [k for k in KEYS if k not in row]
        assert not missing, f"step {row['step']} lacks {missing}"
        assert all(isinstance(row[k], float) and row[k] >= 0 for k in COUNTS + SECONDS + MEANS), row
        assert row["rollout/gpu_util"] is not None and 0.0 <= row["rollout/gpu_util"] <= 1.0  # the HF generator meters
        assert row["rollout/init_attempts"] == row["rollout/trajectories"]  # every episode set up once
        assert row["rollout/trajectories_per_s"] == pytest.approx(row["rollout/trajectories"] / row["rollout/wall_s"])
    return rows


def test_every_row_carries_the_pipeline_figures(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    run_dir = tmp_path / "run"
    rows = _train(model_dir, run_dir, capsys, "--steps", "2")
    assert [r["step"] for r in rows] == [1, 2]
    capacity = 4 + 32 + 16 + 32 + 4  # init_workers + run_queue_size + run_workers + eval_queue_size + eval_workers
    for row in rows:
        assert 1 <= row["rollout/max_live_envs"] <= min(row["rollout/trajectories"], capacity)
        zero = ["rollout/init_retries", "rollout/eval_retries", "rollout/close_errors"]
        zero += [f"rollout/{s}_timeouts" for s in STAGES]
        assert all(row[k] == 0.0 for k in zero), row
        assert row["rollout/run_attempts"] == row["rollout/eval_attempts"] == row["rollout/trajectories"] == 4
        assert row["rollout/run_s_mean"] > 0 and row["rollout/wall_s"] > 0
    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    for key in ("rollout/max_live_envs", "rollout/gpu_util", "rollout/eval_retries", "rollout/eval_s_mean"):
        assert [e.step for e in acc.Scalars(key)] == [1, 2], key


class SlowFirstEval:
    """One turn; the first ``evaluate`` of each env hangs (past ``rollout.eval_timeout_s``), the retry answers."""

    name = "slow-first-eval"

    def __init__(self, **_: Any) -> None:
        self.evaluations = 0

    async def reset(self, task: Any, *, seed: int | None = None) -> list[Message]:
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        return StepResult([], terminated=True, reason=TerminationReason.ANSWERED)

    async def evaluate(self) -> EvalResult:
        self.evaluations += 1
        if self.evaluations == 1:
            await asyncio.sleep(60)
        return EvalResult(reward=1.0, correct=True)

    async def close(self) -> None:
        pass


@pytest.fixture
def slow_env() -> Iterator[str]:
    register_env(SlowFirstEval.name, SlowFirstEval, tasks="tirl.envs.tasks.chain_gen:task_source")
    try:
        yield SlowFirstEval.name
    finally:
        unregister_env(SlowFirstEval.name)


def test_timeouts_and_retries_of_every_resample_round_reach_the_row(
    slow_env: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # filter.mode=drop: the random model writes only void turns, so the step resamples its groups once
    (row,) = _train(model_dir, tmp_path / "run", capsys, "--steps", "1", "--env", slow_env,
                    "--set", "filter.max_resample_rounds=1",
                    "--set", "rollout.eval_timeout_s=0.3", "--set", "rollout.retries=1", base=DROP_ARGS)  # fmt: skip
    n = row["rollout/trajectories"]
    assert row["filter/resample_rounds"] == 1 and n == 8  # 2 tasks x 2 episodes, twice
    assert row["rollout/eval_timeouts"] == row["rollout/eval_retries"] == n  # the first evaluation of every episode
    assert row["rollout/eval_attempts"] == 2 * n and row["rollout/termination/answered"] == n
    assert row["rollout/eval_s_mean"] >= 0.3  # the timed-out attempt is part of the stage's time
    assert row["rollout/init_timeouts"] == row["rollout/run_timeouts"] == row["rollout/init_retries"] == 0
