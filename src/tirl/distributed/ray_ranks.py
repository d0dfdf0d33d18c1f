"""``tirl train --backend ray --nproc N``: the N trainer ranks as a Ray Train ``TorchTrainer`` worker group.

Ray Train launches the ranks: it reserves one placement group of N bundles
(``ScalingConfig``: one CPU per rank on CPU, one GPU per rank with
``model.device=cuda``; ``placement_strategy="SPREAD"``, so the ranks spread
over the nodes), starts one worker per bundle, sets ``RANK``/``LOCAL_RANK``
and forms the torch process group (``TorchConfig``: gloo on CPU, nccl on
GPU, with tirl's collective timeout). tirl then runs in the workers:

- **rank 0** (``get_context().get_world_rank() == 0``) runs the whole
  training recipe (:func:`tirl.trainer.run.train_run`): rollouts (envs on
  Ray env hosts, as with ``--backend ray --nproc 1``), the void filter, the
  advantages, logs, checkpoints and evaluations, with a
  :class:`RayTrainRanks` as its :class:`~tirl.trainer.learner.RankGroup`;
- **ranks 1..N-1** run the follower (:func:`tirl.distributed.follower.serve`).

The config travels as JSON text (``config_to_dict`` → ``config_from_dict``:
exact). The ``tirl train`` process (the driver) only waits: it writes
``RUN_DIR/ranks/placement.json`` (each rank's node, host and process) and
prints rank 0's summary. Rank 0 writes the run directory on its node: on a
real cluster the run directory (``--run-dir``) and the model path must be on
a file system every node sees (the same path), and tirl must be installed
on every node. An error in rank 0 (a bad model, a lost rank) comes back as
one ``error:`` line (the lowest failed rank's; the failing worker ends the group, so no rank waits for it
in a collective); a worker that dies makes ``fit()`` fail, also one line.

Not covered: elastic worker groups (``num_workers`` is fixed at N), restarts
(``FailureConfig(max_failures=0)``: a resumed run is ``tirl train --resume``),
Ray Train checkpoints (tirl writes its own), GPU runs (tested on a two-node
local cluster on CPU only).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.config import TirlConfig, config_to_dict
from tirl.distributed.ddp import (
    COLLECTIVE_TIMEOUT_S,
    DDPSync,
    backend_for,
    bind_device,
    local_rank,
    rank_device,
    share_leader_state,
    stop_followers,
)
from tirl.distributed.follower import read_rank_config, serve
from tirl.distributed.ray_backend import connect, ray_module
from tirl.errors import SetupError, TirlError
from tirl.trainer import run_files
from tirl.trainer.learner import Learner


class Outcome:
    """A small actor the ranks report to: where each ran, and rank 0's summary or error."""

    def __init__(self) -> None:
        self.placement: dict[str, dict[str, Any]] = {}
        self.summary: dict[str, Any] | None = None
        self.errors: dict[int, str] = {}

    def place(self, rank: int, info: dict[str, Any]) -> None:
        """Record where ``rank`` runs."""
        self.placement[str(rank)] = info

    def finish(self, summary: dict[str, Any]) -> None:
        """Rank 0's summary."""
        self.summary = summary

    def fail(self, rank: int, error: str) -> None:
        """The error line of ``rank``."""
        self.errors.setdefault(rank, error)

    def read(self) -> dict[str, Any]:
        """Everything recorded; ``error`` is the lowest failed rank's."""
        first = min(self.errors, default=None)
        error = self.errors[first] if first is not None else ""
        return {"placement": self.placement, "summary": self.summary, "error": error}


@dataclass
class RayTrainRanks:
    """Rank 0's :class:`~tirl.trainer.learner.RankGroup` inside a Ray Train worker (Ray Train formed the group)."""

    world_size: int
    backend: str
    sync: DDPSync | None = None
    shared: bool = False  # the followers took rank 0's state: they now wait for steps (or the stop)

    def start(self, device: str) -> DDPSync:
        """Bind rank 0's device (``cuda:LOCAL_RANK``); the group is Ray Train's."""
        bind_device(rank_device(device, local_rank(0)))
        self.sync = DDPSync(rank=0, world_size=self.world_size)
        return self.sync

    def share_state(self, learner: Learner) -> None:
        """Send every follower rank 0's weights and optimiser state."""
        share_leader_state(learner.model, learner.optimizer, self.backend)
        self.shared = True

    def close(self, *, abort: bool = False) -> None:
        """Tell the followers to stop (Ray Train destroys the process group when the workers return).

        ``abort``: no stop message (rank 0 may be mid-collective); rank 0's error ends Ray Train's worker group.
        """
        if self.sync is None:
            return
        if self.shared and not abort:  # before that they wait in sync_state; rank 0's failure ends the group
            stop_followers(self.backend)
        self.sync.release()
        self.sync = None


def rank_main(config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``: rank 0 runs the recipe, the others follow."""
    import ray
    import ray.train

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    cfg = read_rank_config(config["config"])
    outcome = config["outcome"]
    where = {"pid": os.getpid(), "host": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id()}
    ray.get(outcome.place.remote(rank, where))
    try:
        if rank != 0:
            device = rank_device(cfg.model.device, local_rank(rank))
            bind_device(device)
            serve(cfg, rank, world, config["model"], device)
            return
        from tirl.trainer.run import train_run

        ranks = RayTrainRanks(world, backend_for(cfg.model.device))
        # the driver (`tirl train`) holds the run directory's lock for the whole run: rank 0 writes under it
        run = train_run(
            cfg, Path(config["run_dir"]), resume=config["resume"], progress=config["progress"], ranks=ranks, lock=False
        )
        summary = asyncio.run(run)
    except TirlError as exc:
        ray.get(outcome.fail.remote(rank, str(exc)))
        # fail the worker: Ray Train then ends the group (the other ranks may be waiting in a collective)
        raise RuntimeError(f"tirl rank {rank} failed: {exc}") from None
    ray.get(outcome.finish.remote(json.loads(json.dumps(summary, default=str))))


def train_on_ray(
    cfg: TirlConfig, run_dir: Path, nproc: int, *, resume: bool, progress: bool, model_path: str | None
) -> dict[str, Any]:
    """Run the training job on ``nproc`` Ray Train workers of the cluster ``trainer.ray_address``; the summary."""
    ray = ray_module()
    if not ray.is_initialized():
        connect(ray, cfg.trainer.ray_address)
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    gpu = backend_for(cfg.model.device) == "nccl"
    outcome = ray.remote(Outcome).options(num_cpus=0).remote()
    logs = Path(run_dir) / run_files.RANKS
    logs.mkdir(parents=True, exist_ok=True)
    trainer = TorchTrainer(
        rank_main,
        train_loop_config={
            "config": json.dumps(config_to_dict(cfg)),
            "run_dir": str(Path(run_dir).resolve()),
            "resume": resume,
            "progress": progress,
            "model": model_path,
            "outcome": outcome,
        },
        torch_config=TorchConfig(backend=backend_for(cfg.model.device), timeout_s=int(COLLECTIVE_TIMEOUT_S)),
        scaling_config=ScalingConfig(
            num_workers=nproc,
            use_gpu=gpu,
            resources_per_worker={"GPU": 1} if gpu else {"CPU": 1},
            placement_strategy="SPREAD",
        ),
        run_config=RunConfig(
            name=f"tirl-{int(time.time())}-{os.getpid()}",
            storage_path=str(logs.resolve() / "ray_train"),
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    try:
        trainer.fit()
        failed = ""
    except Exception as exc:  # Ray Train's TrainingFailedError: a worker died or raised
        failed = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    got = ray.get(outcome.read.remote())
    ray.kill(outcome)
    (logs / "placement.json").write_text(json.dumps({"ranks": got["placement"]}, indent=1))
    if got["error"]:
        raise SetupError(str(got["error"]))
    if failed or got["summary"] is None:
        raise SetupError(
            f"--backend ray --nproc {nproc}: a trainer rank failed ({failed or 'no summary from rank 0'}); the run "
            "directory keeps its last complete checkpoint: continue with `tirl train --resume RUN_DIR`"
        )
    return dict(got["summary"])
