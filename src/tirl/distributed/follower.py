"""A follower rank (1..N-1) of ``tirl train --nproc N``: it builds the same learner as rank 0 and only updates.

Entry points: ``python -m tirl.distributed.follower`` (a process started by
:class:`tirl.distributed.launch.LocalRanks`; errors go to its log in
``RUN_DIR/ranks/``), and :func:`serve` inside a Ray Train worker whose
process group Ray Train has already formed (:mod:`tirl.distributed.ray_ranks`).

Steps: read the run's config exactly as rank 0 wrote it
(:func:`read_rank_config`: ``config_to_dict`` → JSON → ``config_from_dict``);
bind the rank's device (``cuda:LOCAL_RANK`` under nccl,
:func:`tirl.distributed.ddp.bind_device`) before any collective; join the
process group; load the policy (:func:`tirl.trainer.learner.load_training_policy`)
and build the learner with :func:`tirl.trainer.learner.build_learner` — the
same factory, so the same optimiser, temperature, precision and reference
model as rank 0 — with a :class:`~tirl.distributed.ddp.DDPSync`; receive rank
0's weights and optimiser state; then update on every step rank 0 sends until
it says the run is over.

Stopping: rank 0 ends a follower with the stop message, or with SIGTERM when rank 0 was interrupted or
failed (:meth:`tirl.distributed.launch.LocalRanks.close`). Ctrl-C in a terminal reaches the follower too: it
writes one line to its log and exits 130 (no traceback). When rank 0's process is gone without a word
(``kill -9``), :func:`watch_parent` ends the follower within a second, wherever it waits (the rendezvous, a
collective), instead of leaving it to the 30-minute collective timeout.

Not covered: a follower never samples, evaluates, logs or checkpoints (rank 0 does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from tirl.config import TirlConfig, config_from_dict
from tirl.distributed.ddp import (
    DDPSync,
    backend_for,
    bind_device,
    collective_device,
    join_group,
    local_rank,
    rank_device,
    receive_step,
    sync_state,
)
from tirl.errors import TirlError
from tirl.trainer.learner import build_learner, load_reference, load_training_policy


def read_rank_config(arg: str) -> TirlConfig:
    """The run's config as rank 0 sent it (JSON text, or a JSON file's path), rebuilt exactly."""
    text = arg if arg.lstrip().startswith("{") else Path(arg).read_text()
    return config_from_dict(json.loads(text))


def serve(cfg: TirlConfig, rank: int, world_size: int, model_path: str | None, device: str) -> int:
    """Build the learner on ``device``, take rank 0's state, update until told to stop; the steps taken.

    The process group must already be up, with ``device`` bound (:func:`run`, or Ray Train).
    """
    policy = load_training_policy(cfg, model_path, device)
    sync = DDPSync(rank=rank, world_size=world_size)
    ref = load_reference(cfg, device)
    learner = build_learner(cfg, policy.model, policy.tokenizer, ref_model=ref, sync=sync)
    objects = collective_device(backend_for(cfg.model.device))
    sync_state(learner.model, learner.optimizer, rank, objects)
    steps = 0
    while (step := receive_step(objects)) is not None:
        learner.updater.update(step.trajs, step.advantages, seed=step.seed)
        steps += 1
    sync.release()
    return steps


def run(cfg: TirlConfig, rank: int, world_size: int, addr: str, port: int, model_path: str | None) -> int:
    """A follower process: seed and threads, bind the device, join rank 0's group, :func:`serve`, leave."""
    torch.set_num_threads(max(1, cfg.trainer.threads))
    torch.manual_seed(cfg.trainer.seed)
    device = rank_device(cfg.model.device, local_rank(rank))
    bind_device(device)  # before the first collective: nccl stages every collective on the current device
    join_group(backend_for(cfg.model.device), addr, port, rank, world_size)
    try:
        serve(cfg, rank, world_size, model_path, device)
    finally:
        dist.destroy_process_group()
    return 0


def watch_parent(parent: int, rank: int) -> threading.Thread:
    """A daemon thread that ends this process once ``parent`` (rank 0) is no longer its parent (it died)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        print(f"rank {rank}: rank 0 (pid {parent}) is gone; stopping", file=sys.stderr, flush=True)
        os._exit(1)  # from this thread: the main thread may be inside a C++ wait that no exception reaches

    t = threading.Thread(target=watch, name="tirl-parent-watch", daemon=True)
    t.start()
    return t


def main(argv: list[str] | None = None) -> int:
    """``python -m tirl.distributed.follower``: one follower rank; an error is one ``error:`` line in its log."""
    ap = argparse.ArgumentParser(description="a tirl trainer rank > 0 (started by `tirl train --nproc N`)")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--config", required=True, help="the config: a JSON file written by rank 0, or JSON text")
    ap.add_argument("--addr", default="127.0.0.1", help="rank 0's address")
    ap.add_argument("--model", default=None)
    ap.add_argument("--parent", type=int, default=None, help="rank 0's pid: stop when it is gone")
    args = ap.parse_args(argv)
    if args.parent is not None:
        watch_parent(args.parent, args.rank)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        return run(read_rank_config(args.config), args.rank, args.world, args.addr, args.port, args.model)
    except TirlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C reaches every rank of the terminal's group; rank 0 reports the run
        print(f"rank {args.rank}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
