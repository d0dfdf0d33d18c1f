"""The optional wandb sink: real wandb in offline mode (no network), beside metrics.jsonl and TensorBoard."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("wandb")

from tirl.cli import main
from tirl.config import load_config
from tirl.integrations.wandb_sink import WandbSink, metric_sinks
from tirl.trainer.logging import RunLogger


@pytest.fixture(scope="module", autouse=True)
def _stop_the_wandb_service() -> Any:
    """wandb keeps its service process (wandb-core) and its threads for the life of the process after a run;
    stop them after this module, so the suite ends with no leftover process (tests/conftest.py)."""
    import wandb

    yield
    wandb.teardown()


class ListSink:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, Any]]] = []
        self.closed = False

    def log(self, step: int, row: dict[str, Any]) -> None:
        self.rows.append((step, dict(row)))

    def close(self) -> None:
        self.closed = True


def _wandb_file(run_dir: Path, *needles: bytes) -> bytes:
    """The offline run's record file, once it holds every needle: wandb's service process writes it on its own
    schedule, and on a loaded machine the records can land a moment after ``finish()`` returns (CI saw only the
    7-byte header). Waits at most 30 s, then returns what is there so the caller's assert shows it."""
    (path,) = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    deadline = time.monotonic() + 30.0
    data = path.read_bytes()
    while not all(n in data for n in needles) and time.monotonic() < deadline:
        time.sleep(0.1)
        data = path.read_bytes()
    return data


def test_sinks_get_exactly_the_rows_of_metrics_jsonl(tmp_path: Path) -> None:
    sink = ListSink()
    logger = RunLogger(tmp_path, tensorboard=False, sinks=[sink])
    logger.log_step(1, {"train/loss": 0.5, "reward/mean": float("nan")})
    logger.log_step(2, {"train/loss": 0.25})
    logger.close()
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row for _, row in sink.rows] == written and [s for s, _ in sink.rows] == [1, 2] and sink.closed


def test_off_by_default_and_offline_writes_a_local_run(tmp_path: Path) -> None:
    assert metric_sinks(load_config(None), tmp_path) == []
    cfg = load_config(None, ["trainer.wandb=offline", "trainer.wandb_project=tirl-test"])
    (sink,) = metric_sinks(cfg, tmp_path)
    assert isinstance(sink, WandbSink)
    logger = RunLogger(tmp_path, tensorboard=False, sinks=[sink])
    logger.log_step(1, {"train/loss": 0.5, "filter/void_trajectories": 3})
    logger.close()
    data = _wandb_file(tmp_path, b"train/loss", b"filter/void_trajectories", b"tirl-test")
    assert b"train/loss" in data and b"filter/void_trajectories" in data and b"tirl-test" in data
    assert b"rollout/trajectories" not in data  # null values are left out, as in TensorBoard


def test_a_bad_mode_is_a_config_error() -> None:
    from tirl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"trainer\.wandb"):
        load_config(None, ["trainer.wandb=cloud"])


@pytest.mark.slow
def test_tirl_train_logs_to_an_offline_wandb_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--steps", "1", "--run-dir", str(run_dir), "--no-progress", "--set", "trainer.wandb=offline",
            "--set", "trainer.prompts_per_step=2", "--set", "algo.group_size=2", "--set", "generation.max_new_tokens=8",
            "--set", "generation.max_total_tokens=200", "--set", "env.eval_size=2", "--set", "trainer.threads=1",
            "--set", "trainer.eval_before_after=false"]  # fmt: skip
    assert main(args) == 0
    data = _wandb_file(run_dir, b"filter/valid_trajectories", b"time/step_s")
    assert b"filter/valid_trajectories" in data and b"time/step_s" in data
    assert (run_dir / "metrics.jsonl").read_text().count("\n") == 1 and (run_dir / "tb").is_dir()
