"""A real two-node local Ray cluster: envs and sandboxes on actors, the local pipeline scheduling them, and
``tirl train --backend ray --nproc 2`` with its ranks as Ray Train workers.

A head and a second node are started with ``ray start`` (one CPU each, a small
object store, a private HOME with and without a Ray auth token), a rollout of
tir-math episodes runs through the pipeline with env hosts on both nodes, one
host is killed while episodes are running on it, and every trajectory must
still be accounted for.

The ranks tests run on the token-free cluster (one cluster start serves every test of a parametrisation): the
ranks are a Ray Train ``TorchTrainer`` worker group (one bundle per rank, ``SPREAD``), one rank per node, so rank
0 (the recipe: rollout on Ray env hosts, logs, checkpoints) and rank 1 (the follower) talk over the process group
that Ray Train formed. The one-step update must equal the one-process run's (same checks as
``tests/distributed/test_follower.py``), and ``RUN_DIR/ranks/placement.json`` must show the two ranks in two Ray
worker processes on two different nodes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from tests.distributed.cluster import free_port, node_args, ray_cli, stop_cluster

ray = pytest.importorskip("ray")

from safetensors.torch import load_file  # noqa: E402
from tests.distributed.test_follower import ONE_STEP, assert_same_step, run_once  # noqa: E402
from tests.tiny_run import save_tiny_model  # noqa: E402

from tirl.config import EnvConfig, RolloutConfig, SandboxConfig  # noqa: E402
from tirl.distributed.ray_backend import EnvRecipe, RayEnvPool, RayEnvProxy  # noqa: E402
from tirl.envs.base import Env, Task  # noqa: E402
from tirl.envs.registry import load_tasks  # noqa: E402
from tirl.rollout.base import RolloutRequest  # noqa: E402
from tirl.rollout.strategies import make_strategy  # noqa: E402
from tirl.trainer.logging import read_metrics  # noqa: E402
from tirl.trainer.trainer import rollout_metrics  # noqa: E402
from tirl.types import Message, Role, TerminationReason, Trajectory  # noqa: E402

# one multi-node Ray cluster at a time per session; a cluster start and two Ray Train ranks took over 300 s at load
# 12-21 (two other test runs beside make test), 54 s at load 5
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # first, on one xdist worker: tests/conftest.py SAME_WORKER
ray_train = pytest.importorskip("ray.train.torch")


@pytest.fixture(scope="module", params=["no-token", "token"])
def cluster(request, tmp_path_factory):
    """A two-node cluster in a private HOME: with a Ray auth token there ("token") and without ("no-token").

    Ray writes ``~/.ray/auth_token`` on a first local ``ray.init()``; from then on ``ray start --head`` turns
    token authentication on, and a node or driver that does not send the token fails with InvalidAuthToken.
    Both states are tested, whatever the machine's own ``~/.ray`` holds. The other nodes run with
    ``RAY_AUTH_MODE=token`` when there is a token (Ray's rule for multi-node clusters); the driver is not told:
    tirl's ``--ray-address`` must find the token by itself.
    """
    home = tmp_path_factory.mktemp(f"home-{request.param}")
    temp_dir = tempfile.mkdtemp(prefix="tirlray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port = free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_AUTH_MODE", None)
    if request.param == "token":
        ray_cli(env, "get-auth-token", "--generate")
        assert (home / ".ray" / "auth_token").is_file()
    node_env = {**env, "RAY_AUTH_MODE": "token"} if request.param == "token" else env
    common = node_args(temp_dir, 1)
    mp = pytest.MonkeyPatch()
    auth_mode = os.environ.get("RAY_AUTH_MODE")  # Ray sets it in this process when it turns token auth on
    try:
        ray_cli(env, "start", "--head", "--port", str(port), "--include-dashboard", "false", *common)
        ray_cli(node_env, "start", "--address", address, *common)
        mp.setenv("HOME", str(home))
        mp.delenv("RAY_AUTH_MODE", raising=False)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        mp.undo()
        if auth_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        stop_cluster((temp_dir, f":{port}"))
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_driver():
    """Each test connects anew, through tirl's own code path (RayEnvPool with an explicit address)."""
    if ray.is_initialized():
        ray.shutdown()
    yield


class ScriptedRunner:
    """Solves a tir-math task in two turns (code, then the boxed answer), sleeping as if generating."""

    def __init__(self, gen_s: float, signal_after: int) -> None:
        self.gen_s = gen_s
        self.first_steps = 0
        self.signal_after = signal_after
        self.victim: asyncio.Future[int] | None = None

    async def __call__(self, env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        traj.messages = list(initial)
        turns = [f"```python\nprint({task.answer})\n```", f"The answer is \\boxed{{{task.answer}}}."]
        for i, content in enumerate(turns):
            await asyncio.sleep(self.gen_s)
            action = Message(role=Role.ASSISTANT, content=content)
            result = await env.step(action)
            traj.messages += [action, *result.observation]
            if i == 0:
                self.first_steps += 1
                if self.first_steps == self.signal_after and self.victim is not None and not self.victim.done():
                    assert isinstance(env, RayEnvProxy)
                    self.victim.set_result(env.host)  # kill the host this episode is running on
            if result.terminated or result.truncated:
                traj.termination = result.reason or TerminationReason.ANSWERED
                return
        traj.termination = TerminationReason.MAX_TURNS


def test_rollout_on_two_nodes_survives_a_killed_host(cluster):
    env_cfg = EnvConfig(name="tir-math", max_turns=3)
    recipe = EnvRecipe("tir-math", env_cfg, SandboxConfig(backend="process", warm_pool=False, timeout_s=10))
    tasks: list[Task] = load_tasks(env_cfg, 8, seed=3)
    group = 2
    cfg = RolloutConfig(
        strategy="pipeline",
        init_workers=2,
        run_workers=6,
        eval_workers=2,
        run_queue_size=4,
        eval_queue_size=4,
        retries=1,
        init_timeout_s=60,
        run_timeout_s=60,
        eval_timeout_s=60,
    )

    async def main():
        pool = RayEnvPool(recipe, address=cluster)
        infos = await pool.ready()
        runner = ScriptedRunner(gen_s=0.3, signal_after=3)
        runner.victim = asyncio.get_running_loop().create_future()
        strategy = make_strategy(cfg, pool.make_env, runner)

        async def killer() -> int:
            host = await runner.victim
            ray.kill(pool.handles[host])
            return host

        try:
            kill_task = asyncio.create_task(killer())
            batch = await strategy.collect(RolloutRequest(tasks=tasks, group_size=group, step=1))
            killed = await kill_task
            dead = [i for i, ok in enumerate(pool.alive) if not ok]
        finally:
            await strategy.close()
            await pool.close()
        return infos, batch, killed, dead

    infos, batch, killed, dead = asyncio.run(main())
    assert dead == [killed]  # the pool noticed the death and stopped placing envs there
    assert len({i["node_id"] for i in infos}) == 2  # one env host per node
    trajs = batch.trajectories
    assert len(trajs) == len(tasks) * group  # every trajectory is in the batch
    assert len({t.id for t in trajs}) == len(trajs)
    assert all(t.termination is not None for t in trajs)
    failed = [t for t in trajs if t.failed]
    ok = [t for t in trajs if not t.failed]
    assert failed, "the killed host had episodes in flight; they must be accounted as failures"
    for t in failed:
        assert t.termination in (TerminationReason.ERROR, TerminationReason.INIT_FAILED, TerminationReason.EVAL_FAILED)
        assert f"env host {killed}" in (t.error or "") or "no live Ray env host" in (t.error or "")
    assert ok and all(t.reward == 1.0 for t in ok)  # the surviving host kept solving tasks
    row = rollout_metrics(batch.trajectories)  # what the trainer writes for this batch
    counted = sum(v for k, v in row.items() if k.startswith("rollout/termination/"))
    assert counted == len(trajs)
    assert row["rollout/failed"] == len(failed)


def test_tirl_train_with_ray_backend(cluster, tmp_path):
    """`tirl train --backend ray --ray-address ADDR`: one step with env hosts on the cluster."""
    from tirl.cli import main
    from tirl.models.tiny import build_tiny_model, save_policy

    model, tok = build_tiny_model(seed=0)
    model_dir = save_policy(model, tok, tmp_path / "tiny")
    run_dir = tmp_path / "run"
    overrides = [
        "trainer.steps=1",
        "trainer.prompts_per_step=2",
        "algo.group_size=2",
        "trainer.eval_before_after=false",
        "generation.max_new_tokens=16",
        "generation.max_total_tokens=160",
        "env.max_turns=2",
        "sandbox.backend=process",
        "sandbox.warm_pool=false",
        "filter.mode=off",
        "filter.min_valid_per_group=1",
        "filter.max_resample_rounds=0",
        "algo.minibatches=1",
    ]
    args = [
        "train",
        "--model",
        str(model_dir),
        "--backend",
        "ray",
        "--ray-address",
        cluster,
        "--run-dir",
        str(run_dir),
        "--no-progress",
    ]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["rollout/trajectories"] == 4
    assert rows[0]["rollout/failed"] == 0  # every episode ran on a Ray env host and came back


def _ranks_train(address: str, model: Path, run_dir: Path) -> subprocess.CompletedProcess[str]:
    """``tirl train --backend ray --nproc 2`` against the cluster, as its own driver process."""
    cmd = [sys.executable, "-m", "tirl.cli", "train", "--model", str(model), "--run-dir", str(run_dir), *ONE_STEP]
    cmd += ["--backend", "ray", "--ray-address", address, "--nproc", "2"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}  # HOME is the cluster's (the fixture set it)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=800)


@pytest.mark.parametrize("cluster", ["no-token"], indirect=True)
def test_nproc_2_as_ray_train_workers_on_two_nodes_equals_nproc_1(cluster: str, tmp_path: Path) -> None:
    """About 40-80 s on a 2-core machine (a Ray Train worker group, two tiny runs)."""
    model_dir = save_tiny_model(tmp_path / "tiny")
    start = load_file(str(model_dir / "model.safetensors"))
    run_dir = tmp_path / "ray"
    done = _ranks_train(cluster, model_dir, run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = read_metrics(run_dir)
    weights = load_file(str(run_dir / "checkpoints" / "step-1" / "model" / "model.safetensors"))
    one = run_once(model_dir, tmp_path / "one")  # the reference: one process, envs local
    assert_same_step(one, (row, weights), start)
    ranks = json.loads((run_dir / "ranks" / "placement.json").read_text())["ranks"]
    assert sorted(ranks) == ["0", "1"]
    assert ranks["0"]["node_id"] != ranks["1"]["node_id"]  # SPREAD: one rank per node
    assert os.getpid() not in {ranks["0"]["pid"], ranks["1"]["pid"]}


@pytest.mark.parametrize("cluster", ["no-token"], indirect=True)
def test_a_bad_model_on_ray_ranks_is_one_error_line(cluster: str, tmp_path: Path) -> None:
    """Rank 0's set-up error comes back from the Ray Train worker as one ``error:`` line, exit 2.

    The model's files pass the driver's checks (``config.json``, a tokenizer: a missing one is refused before any
    rank starts, ``test_ray_connect.py``); its weights are damaged, which only loading finds, on the ranks.
    """
    bad = save_tiny_model(tmp_path / "damaged")
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    done = _ranks_train(cluster, bad, tmp_path / "r")
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert done.returncode == 2 and len(lines) == 1 and str(bad) in lines[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr
