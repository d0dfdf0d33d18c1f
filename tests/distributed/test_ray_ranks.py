"""``tirl train --backend ray --nproc 2``: rank 1 runs as a Ray actor on a real local Ray instance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model  # noqa: E402

from tirl.trainer.logging import read_metrics  # noqa: E402

TINY = TINY_TRAIN_ARGS


@pytest.mark.slow
def test_nproc_2_on_ray_places_rank_1_in_an_actor(tmp_path: Path) -> None:
    model_dir = save_tiny_model(tmp_path / "tiny")
    # A process of its own, in a private HOME (Ray's auth token goes there): Ray keeps process-wide state (token
    # authentication turned on by an earlier test's cluster made this test's local GCS refuse to start in CI).
    env = {**os.environ, "HOME": str(tmp_path / "home"), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_AUTH_MODE", None)
    run_dir = tmp_path / "run"
    args = ["train", "--model", str(model_dir), "--run-dir", str(run_dir), "--steps", "2", *TINY]
    done = subprocess.run(
        [sys.executable, "-m", "tirl.cli", *args, "--backend", "ray", "--nproc", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(run_dir)
    assert [r["dist/world_size"] for r in rows] == [2, 2]
    assert all(r["train/optimizer_steps"] for r in rows)
    placement = json.loads((run_dir / "ranks" / "placement.json").read_text())
    rank1 = placement["ranks"]["1"]
    assert rank1["pid"] != os.getpid() and rank1["node_id"]
    deadline = time.monotonic() + 30
    while Path(f"/proc/{rank1['pid']}").exists() and time.monotonic() < deadline:
        time.sleep(0.5)  # the actor's worker is ended when the run ends
    assert not Path(f"/proc/{rank1['pid']}").exists()
