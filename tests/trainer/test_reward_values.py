"""`tirl train` on an env whose reward function returns NaN, or a string: never a NaN in a run's files.

Real runs through the CLI in this process (the tiny random model of tests/tiny_run.py, a real pipeline and
the real tir-chain tasks); only the env is a stand-in whose ``evaluate`` returns the reward under test. Before:
NaN went into ``trajectories.jsonl`` as ``NaN`` (not JSON: tirl's own reader now refuses the line) and into
the group's advantages, so every optimiser step that held the group was skipped; the string ``"1"`` was read
as the reward 1.0.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model

from tirl.cli import main
from tirl.envs import register_env, unregister_env
from tirl.envs.base import EvalResult, StepResult
from tirl.jsonl import read_trajectories
from tirl.types import Message, Role, TerminationReason

REWARDS: dict[str, Any] = {"nan-reward": math.nan, "text-reward": "1"}
#: ``info`` an env's ``evaluate`` returns (reward 1.0): numpy values become plain JSON; a set is the env's bug.
INFOS: dict[str, dict[str, Any]] = {
    "numpy-info": {"raw": np.float32(0.5), "arr": np.arange(2)},
    "set-info": {"raw": {1, 2}},
}


class RewardEnv:
    """One turn, then ``evaluate`` returns ``REWARDS[name]`` for every other episode (1.0 for the rest)."""

    name = "reward-test"

    def __init__(self, **_: Any) -> None:
        self.seed = 0

    async def reset(self, task: Any, *, seed: int | None = None) -> list[Message]:
        self.seed = seed or 0
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        return StepResult([], terminated=True, reason=TerminationReason.ANSWERED)

    async def evaluate(self) -> EvalResult:
        if RewardEnv.name in INFOS:
            return EvalResult(reward=1.0, correct=True, info=INFOS[RewardEnv.name])
        value = REWARDS[RewardEnv.name] if self.seed % 2 == 0 or RewardEnv.name == "text-reward" else 1.0
        return EvalResult(reward=value, correct=False, info={"raw": value})

    async def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "model")


def _registered(name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``RewardEnv`` registered as ``name`` (its behaviour follows the name) for one test."""
    monkeypatch.setattr(RewardEnv, "name", name)
    register_env(name, RewardEnv, tasks="tirl.envs.tasks.chain_gen:task_source")
    try:
        yield name
    finally:
        unregister_env(name)


@pytest.fixture(params=sorted(REWARDS))
def env_name(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    yield from _registered(request.param, monkeypatch)


def test_a_reward_function_of_nan_or_text(
    env_name: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--model", str(model_dir), "--run-dir", str(run_dir), "--env", env_name, "--steps", "2",
            "--set", "rollout.retries=1", *TINY_TRAIN_ARGS]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="tirl.rollout.pipeline"):  # stderr, outside pytest
        code = main(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if env_name == "text-reward":  # the code's bug: every episode eval_failed, the run stops naming the function
        (line,) = [x for x in err.splitlines() if x.startswith("error:")]
        assert code == 2 and line.startswith("error: step 1: every one of the 4 trajectories failed in env text-reward")
        assert "(test_reward_values.RewardEnv.evaluate) returned the reward '1' (str), not a number" in line
        assert line.endswith("make the reward function the error names return a float (0.0 for no reward)"
                             "; to go on past such steps, --set trainer.tolerate_failed_steps=N")  # fmt: skip
        return
    assert code == 0, err  # the episode's failure: trained on, scored 0
    warnings = [r.getMessage() for r in caplog.records if "returned the reward NaN" in r.getMessage()]
    assert len(warnings) == 2 and "env 'nan-reward' (test_reward_values.RewardEnv.evaluate)" in warnings[0]  # a step
    for line in (run_dir / "trajectories.jsonl").read_text().splitlines():  # strict JSON: no bare NaN
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in trajectories.jsonl"))
    trajs = [t for _, t in read_trajectories(run_dir / "trajectories.jsonl")]  # the strict reader reads it back
    assert trajs and {t.reward for t in trajs} <= {0.0, 1.0}
    scored_0 = [t for t in trajs if t.info["eval"].get("eval_failure") == "nonfinite_reward"]
    assert scored_0 and all(t.reward == 0.0 and t.info["eval"]["raw"] is None for t in scored_0)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout/eval_failure/nonfinite_reward"] for r in rows] == [2.0, 2.0]
    assert all(r["train/skipped_updates"] == 0 and r["reward/mean"] == 0.5 for r in rows)


@pytest.fixture(params=sorted(INFOS))
def info_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    yield from _registered(request.param, monkeypatch)


def test_an_info_of_numpy_values_or_a_set(
    info_env: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the trajectory writer raised TypeError on both (a traceback mid-run, after the step's work)."""
    run_dir = tmp_path / "run"
    args = ["train", "--model", str(model_dir), "--run-dir", str(run_dir), "--env", info_env, "--steps", "1",
            "--set", "rollout.retries=1", *TINY_TRAIN_ARGS]  # fmt: skip
    code = main(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if info_env == "set-info":
        (line,) = [x for x in err.splitlines() if x.startswith("error:")]
        assert code == 2 and "(test_reward_values.RewardEnv.evaluate) returned info.raw, which is a set" in line
        return
    assert code == 0, err
    trajs = [t for _, t in read_trajectories(run_dir / "trajectories.jsonl")]
    assert trajs and all(t.info["eval"]["raw"] == 0.5 and t.info["eval"]["arr"] == [0, 1] for t in trajs)
