"""Asynchronous RL (``rollout.max_staleness``): a real `tirl train` run at K=1, the stale filter, the snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model

from tirl.cli import main
from tirl.config import ConfigError, RolloutConfig
from tirl.filters import FilterStats
from tirl.inference.snapshot import generator_copy, sync_snapshot
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.trainer.logging import read_metrics
from tirl.trainer.loop import drop_stale
from tirl.trainer.trainer import Collected
from tirl.types import Group, Trajectory

TINY = TINY_TRAIN_ARGS


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


@pytest.mark.slow
def test_train_with_max_staleness_1_runs_overlapped_and_records_versions(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--model", str(model_dir), "--steps", "3", "--run-dir", str(run_dir), *TINY]
    assert main([*args, "--set", "rollout.max_staleness=1"]) == 0
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["async/max_staleness"] for r in rows] == [1, 1, 1]
    # step 1 rolls out at version 0 and trains at 0; steps 2 and 3 roll out one update behind
    assert [r["async/step_lag"] for r in rows] == [0, 1, 1]
    assert [r["policy/version"] for r in rows] == [0, 1, 2]  # the version each step's update started from
    assert [r["async/version_lag_max"] for r in rows] == [0, 1, 1]
    assert all(r["async/stale_dropped"] == 0 for r in rows)
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert trajs and all(t["turns"] for t in trajs)
    for t in trajs:  # each turn records the version that sampled it; the trajectory the oldest of them
        versions = [turn["policy_version"] for turn in t["turns"]]
        assert t["policy_version"] == min(versions)
        assert t["info"]["step"] - 1 - t["policy_version"] in (0, 1)  # step s samples at s-1 or s-2
    trace = [json.loads(line) for line in (run_dir / "pipeline_trace.jsonl").read_text().splitlines()]
    assert trace and all("trainer_updating" in s for s in trace)
    assert (run_dir / "checkpoints" / "step-3").is_dir()


def _traj(i: str, v: int) -> Trajectory:
    return Trajectory(id=i, messages=[], policy_version=v)


def test_drop_stale_leaves_out_whole_groups_with_a_stale_trajectory() -> None:
    groups = [Group("a", [_traj("a0", 3), _traj("a1", 1)]), Group("b", [_traj("b0", 3), _traj("b1", 2)])]
    col = Collected(sampled=[], groups=groups, stats=FilterStats(), penalized=[_traj("p0", 0), _traj("p1", 3)])
    out, stale, stale_groups = drop_stale(col, version=3, max_staleness=1)
    assert [g.id for g in out.groups] == ["b"]
    assert [t.id for t in out.penalized] == ["p1"]
    assert (stale, stale_groups) == (2, 1)  # a1 and p0


def test_generator_snapshot_is_a_separate_copy_synced_with_its_version() -> None:
    spec = TinyModelSpec(hidden_size=16, layers=1, heads=2, kv_heads=2, intermediate_size=32, max_positions=64)
    model, _ = build_tiny_model(spec, seed=0)

    class Gen:
        def __init__(self) -> None:
            import threading

            self.model = generator_copy(model)
            self.model_lock = threading.Lock()
            self.policy_version = 0

    gen = Gen()
    assert gen.model is not model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the trainer moves; the snapshot does not
    ref = dict(model.named_parameters())
    assert any(not torch.equal(p, ref[n]) for n, p in gen.model.named_parameters())
    sync_snapshot(gen, model, 7)
    assert gen.policy_version == 7
    assert all(torch.equal(p, ref[n]) for n, p in gen.model.named_parameters())
    assert not any(p.requires_grad for p in gen.model.parameters())


def test_negative_max_staleness_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"rollout\.max_staleness"):
        RolloutConfig(max_staleness=-1)
