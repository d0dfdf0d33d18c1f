"""``tirl train --backend ray --nproc 2`` on a two-node local Ray cluster equals ``tirl train --nproc 1``.

The cluster is two real ``ray start`` processes (a head and a second node, one CPU each and a resource
naming the node), started and stopped by the fixture, in a private HOME. The ranks are a Ray Train
``TorchTrainer`` worker group (one bundle per rank, ``SPREAD``): one rank per node, so rank 0 (the recipe:
rollout on Ray env hosts, logs, checkpoints) and rank 1 (the follower) talk over the process group that Ray
Train formed. The one-step update must equal the one-process run's (same checks as
``tests/distributed/test_follower.py``), and ``RUN_DIR/ranks/placement.json`` must show the two ranks in
two Ray worker processes on two different nodes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.train.torch")

from safetensors.torch import load_file  # noqa: E402
from tests.distributed.cluster import free_port, node_args, ray_cli, stop_cluster  # noqa: E402
from tests.distributed.test_follower import ONE_STEP, assert_same_step, run_once  # noqa: E402
from tests.tiny_run import save_tiny_model  # noqa: E402

from tirl.trainer.logging import read_metrics  # noqa: E402

# one multi-node Ray cluster at a time per session; a cluster start and two Ray Train ranks took over 300 s at load
# 12-21 (two other test runs beside make test), 54 s at load 5
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # one xdist worker: tests/conftest.py SAME_WORKER


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A head and a worker node (``ray start`` each); the address and the environment to reach it with."""
    home = tmp_path_factory.mktemp("home")
    temp_dir = tempfile.mkdtemp(prefix="tirlrt", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port = free_port()
    env = {**os.environ, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_AUTH_MODE", None)
    try:
        ray_cli(env, "start", "--head", "--port", str(port), "--include-dashboard", "false",
                *node_args(temp_dir, 1, {"head_node": 1}))  # fmt: skip
        ray_cli(env, "start", "--address", f"127.0.0.1:{port}", *node_args(temp_dir, 1, {"second_node": 1}))
        yield f"127.0.0.1:{port}", env
    finally:
        stop_cluster((temp_dir, f":{port}"))
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_nproc_2_as_ray_train_workers_on_two_nodes_equals_nproc_1(
    two_nodes: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """About 80 s on a busy 2-core machine (two node start-ups, a Ray Train worker group, two tiny runs)."""
    address, env = two_nodes
    model_dir = save_tiny_model(tmp_path / "tiny")
    start = load_file(str(model_dir / "model.safetensors"))
    run_dir = tmp_path / "ray"
    cmd = [sys.executable, "-m", "tirl.cli", "train", "--model", str(model_dir), "--run-dir", str(run_dir), *ONE_STEP]
    cmd += ["--backend", "ray", "--ray-address", address, "--nproc", "2"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = read_metrics(run_dir)
    weights = load_file(str(run_dir / "checkpoints" / "step-1" / "model" / "model.safetensors"))
    one = run_once(model_dir, tmp_path / "one")  # the reference: one process, envs local
    assert_same_step(one, (row, weights), start)
    ranks = json.loads((run_dir / "ranks" / "placement.json").read_text())["ranks"]
    assert sorted(ranks) == ["0", "1"]
    assert ranks["0"]["node_id"] != ranks["1"]["node_id"]  # SPREAD: one rank per node
    assert os.getpid() not in {ranks["0"]["pid"], ranks["1"]["pid"]}


def test_a_bad_model_on_ray_ranks_is_one_error_line(two_nodes: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """Rank 0's set-up error comes back from the Ray Train worker as one ``error:`` line, exit 2.

    About 60 s: Ray Train waits for the failed worker group to shut down before ``fit()`` returns.
    """
    address, env = two_nodes
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    cmd = [sys.executable, "-m", "tirl.cli", "train", "--model", str(bad), "--run-dir", str(tmp_path / "r"), *ONE_STEP]
    cmd += ["--backend", "ray", "--ray-address", address, "--nproc", "2"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=800)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert done.returncode == 2 and len(lines) == 1 and str(bad) in lines[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr
