"""Fail fast: `tirl train` on an env whose every episode fails stops with one `error:` line, or says it tolerated it.

Real runs through the CLI in this process (the tiny random model of tests/tiny_run.py, a real pipeline and
the real tir-chain tasks); only the env is a stand-in whose ``reset`` raises, as an env with a broken set-up
does. Each run takes a few seconds on a CPU. Last, the end of a run: its micro-batch threads are joined.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model, with_sets

from tirl.cli import main
from tirl.config import load_config
from tirl.envs import register_env, unregister_env
from tirl.errors import SetupError
from tirl.trainer.failfast import fix_for, reason_of, summarize_failures
from tirl.types import TerminationReason, Trajectory


class BrokenEnv:
    """An env whose set-up always fails (as a missing workspace or an unreachable service does)."""

    name = "broken-test"

    def __init__(self, **_: Any) -> None:
        pass

    async def reset(self, task: Any, *, seed: int | None = None) -> list[Any]:
        raise SetupError("the workspace image 'repo:latest' is missing — build it first")

    async def step(self, action: Any) -> Any:
        raise AssertionError("never reached")

    async def evaluate(self) -> Any:
        raise AssertionError("never reached")

    async def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "model")


@pytest.fixture
def broken() -> Iterator[str]:
    register_env("broken-test", BrokenEnv, tasks="tirl.envs.tasks.chain_gen:task_source")
    try:
        yield "broken-test"
    finally:
        unregister_env("broken-test")


def _train(model_dir: Path, run_dir: Path, *extra: str, progress: bool = False, sets: tuple[str, ...] = ()) -> int:
    """``sets``: ``KEY=VALUE`` items that replace the tiny run's own (a key may be given once)."""
    tiny = [a for a in with_sets(TINY_TRAIN_ARGS, *sets) if not (progress and a == "--no-progress")]
    args = ["train", "--model", str(model_dir), "--run-dir", str(run_dir), "--env", "broken-test",
            "--set", "rollout.retries=0", *tiny, *extra]  # fmt: skip
    return main(args)


def test_a_step_whose_every_trajectory_failed_stops_the_run_with_one_error_line(
    broken: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the fix this run exited 0 after 3 steps of `step N skipped ... failed 4` (checked at the parent)."""
    run_dir = tmp_path / "run"
    assert _train(model_dir, run_dir, "--steps", "3") == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert errors[0].startswith("error: step 1: every one of the 4 trajectories failed in env broken-test")
    assert "workspace image 'repo:latest' is missing" in errors[0]
    assert "trainer.tolerate_failed_steps" in errors[0]
    assert "Traceback" not in err
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]  # the failed step is logged, no later step ran
    assert rows[0]["rollout/failed"] == 4 and rows[0]["filter/resample_rounds"] == 0  # nothing resampled


def test_tolerated_failed_steps_say_so_in_the_step_line(
    broken: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    extra = ["--steps", "2", "--set", "trainer.tolerate_failed_steps=2"]
    assert _train(model_dir, run_dir, *extra) == 0
    # --no-progress hides step lines; the metrics row carries the count the step line shows
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/tolerated_failed_steps"] for r in rows] == [1, 2]
    assert "error:" not in capsys.readouterr().err


def test_an_evaluation_whose_every_episode_failed_stops_before_training(
    broken: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With progress on, what is printed before the error: the run directory, then the evaluation's start."""
    run_dir = tmp_path / "run"
    assert _train(model_dir, run_dir, "--steps", "1", "--set", "env.eval_size=3", progress=True,
                  sets=("trainer.eval_before_after=true",)) == 2  # fmt: skip
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"run directory: {run_dir}  (tensorboard --logdir {run_dir / 'tb'})"
    assert lines[1] == "evaluating 3 held-out broken-test tasks (before training)..."
    (line,) = [x for x in lines if x.startswith("error:")]
    assert line.startswith("error: the held-out evaluation (before training): every one of the 3 trajectories")
    assert not (run_dir / "metrics.jsonl").exists()  # no step ran


def _failed(error: str, reason: TerminationReason = TerminationReason.INIT_FAILED) -> Trajectory:
    return Trajectory(id="t", messages=[], termination=reason, error=error)


def test_equal_causes_compare_equal_without_attempt_counts_and_turn_numbers() -> None:
    trajs = [
        _failed("env reset failed: SetupError: no image [2 attempt(s)]"),
        _failed("env reset failed: SetupError: no image [1 attempt(s)]"),
        _failed("env.step failed in turn 3: OSError: disk full", TerminationReason.ERROR),
    ]
    summary = summarize_failures(trajs)
    assert summary.all_failed and summary.same == 2 and summary.reason == "env reset failed: SetupError: no image"
    assert reason_of(trajs[2]) == "OSError: disk full"
    ok = Trajectory(id="u", messages=[], termination=TerminationReason.ANSWERED)
    assert not summarize_failures([*trajs, ok]).all_failed
    assert not summarize_failures([]).all_failed


def test_the_fix_is_named_after_the_cause() -> None:
    assert "env.offer_tools=false" in fix_for("SetupError: the built-in chat format has no tool definitions")
    assert "sandbox.backend=process" in fix_for("SetupError: bubblewrap (bwrap) cannot create a namespace")
    assert "run_timeout_s" in fix_for("agent runner timed out after 600s")
    assert "error` field" in fix_for("ValueError: something else")


def test_the_key_is_validated() -> None:
    with pytest.raises(Exception, match=r"trainer\.tolerate_failed_steps"):
        load_config(None, ["trainer.tolerate_failed_steps=-1"])


async def test_a_finished_run_joins_its_micro_batch_threads(make_trainer: Any) -> None:
    """Before: the updater's worker threads lived until the trainer was garbage-collected (never joined)."""
    import threading

    from tirl.trainer.parallel import MicroPool

    trainer = make_trainer("algo.micro_batch_tokens=40")  # several micro-batches per mini-batch
    trainer.updater.pool = MicroPool(2)
    seen: list[str] = []
    real_close = trainer.updater.close

    def close() -> None:
        seen.extend(t.name for t in threading.enumerate())
        real_close()

    trainer.updater.close = close
    await trainer.run()
    assert any(name.startswith("tirl-micro") for name in seen)  # the pool really ran on its threads
    assert not any(t.name.startswith("tirl-micro") for t in threading.enumerate())
