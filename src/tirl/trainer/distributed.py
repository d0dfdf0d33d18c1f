"""Data-parallel training: ``tirl train --nproc N`` runs N trainer processes with ``torch.distributed``.

Who does what:

- **Rank 0** is the ``tirl train`` process itself. It runs everything a
  one-process run runs — the generator, the environments (local or on Ray),
  the void filter, resampling, the advantages, the logs, the checkpoints and
  the evaluations — and, at each update, broadcasts the step's kept
  trajectories, their advantages and the shuffle seed to the other ranks.
  The advantages are therefore computed once, on the full batch, before the
  split: every rank sees the same ones.
- **Ranks 1..N-1** (``python -m tirl.trainer.distributed``, started by rank
  0; with ``--backend ray`` Ray actors spread over the cluster instead,
  :mod:`tirl.distributed.ray_ranks`) hold a copy of the policy, its optimiser
  and (with ``algo.kl_coef > 0``) the reference model; they only update.
- **The update** (:class:`ShardedUpdater`): every rank draws the same
  mini-batches (same seed), computes the micro-batches of its share of each
  mini-batch (rows ``rank, rank + N, ...``) and scales each micro-loss by its
  share of the *global* mini-batch (tokens or sequences). The gradients are
  summed by torch DDP (``DistributedDataParallel`` with a summing comm hook)
  before clipping and the optimiser step. So the gradient, the clipped norm,
  ``train/loss`` and the parameters after the step equal the one-process
  run's, up to float summation order.

Backend: gloo on CPU, nccl on GPU (``model.device`` ``cuda``; one GPU per
rank, ``cuda:RANK``). **DDP runs on CPU and GPU; FSDP2 is not used.** The
micro-batches accumulate under ``no_sync()`` (their number differs across
ranks), then every rank runs one synced pass on a zero-weighted dummy row
whose backward triggers DDP's all-reduce: after the void filter a rank's
share of a mini-batch can be empty, and this keeps the collectives matched
(the empty rank contributes zero gradients). A trainable parameter that no
forward reaches gets a zero gradient (not None) under DDP; tirl's policies
use every trainable parameter in every forward. FSDP2 (``fully_shard``) runs
on CPU/gloo in torch 2.13, but every FSDP2 forward is a collective while
rank 0 alone samples with the policy, so every rank holds the full model and
optimiser state (plain data parallelism).

Checkpoints are written by rank 0 only and hold the full model and optimiser
state, so a run resumes the same at any N (the ranks receive rank 0's
weights and optimiser state when the world starts). ``dist/world_size`` is on
every metrics line. ``train/loss`` and ``train/grad_norm`` are global, and
so are the token statistics (``train/is_ratio_*``, ``train/clip_frac``,
``train/entropy``, ``train/kl``: :func:`merge_stats` folds every rank's share
in after each update).

Failures: ``--nproc`` above the CPU count (gloo) or the GPU count (nccl) of
this machine (not checked with ``--backend ray``: the cluster holds the
ranks), a global batch (``trainer.prompts_per_step * algo.group_size``) that
does not divide by N, and a ``--master-port`` in use are set-up errors before
anything runs. A rank that dies makes the next collective fail on rank 0:
one ``error:`` line, exit 2, and the run directory keeps its last complete
checkpoint (checkpoints are atomic), so ``tirl train --resume`` continues it.

Not covered: sharding the generator or the rollout over ranks (rank 0 rolls
out), sharded old-log-prob scoring (each rank scores every row), FSDP2, gradient
checkpointing with N > 1 (untested under DDP),
multi-node launch without Ray (local ranks rendezvous on 127.0.0.1; Ray ranks
on rank 0's node address), restarting a dead rank.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tirl.errors import SetupError, TirlError
from tirl.models.memory import autocast
from tirl.trainer.update import TOKEN_MAXES, TOKEN_MINS, TOKEN_SUMS, PolicyUpdater, UpdateStats, model_device
from tirl.types import Trajectory

INIT_TIMEOUT_S = 300.0
_PEER_GONE = ("gloo", "nccl", "Connection", "connection", "peer", "Broken pipe", "closed")
COLLECTIVE_TIMEOUT_S = 1800.0


def backend_for(device: str) -> str:
    """``nccl`` for a CUDA ``model.device``, else ``gloo``."""
    return "nccl" if device.startswith("cuda") else "gloo"


def rank_device(device: str, rank: int) -> str:
    """The device of ``rank``: ``cuda:RANK`` on GPU, else ``device``."""
    return f"cuda:{rank}" if device.startswith("cuda") else device


def machine_limit(device: str) -> tuple[int, str]:
    """How many ranks this machine allows, and of what."""
    if device.startswith("cuda"):
        return (torch.cuda.device_count() if torch.cuda.is_available() else 0), "GPUs"
    return os.cpu_count() or 1, "CPUs"


def port_free(port: int) -> bool:
    """Whether ``127.0.0.1:port`` can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_world(cfg: Any, nproc: int, port: int) -> None:
    """Set-up errors of ``--nproc``/``--master-port`` (raises :class:`SetupError` naming the fix)."""
    if nproc < 1:
        raise SetupError(f"--nproc {nproc} is invalid: use 1 or more trainer processes")
    if nproc == 1:
        return
    limit, what = machine_limit(cfg.model.device)
    if nproc > limit and cfg.trainer.backend != "ray":  # on Ray the cluster, not this machine, holds the ranks
        raise SetupError(
            f"--nproc {nproc} is larger than this machine allows ({limit} {what} for model.device="
            f"{cfg.model.device}): use --nproc {max(1, limit)} or fewer"
        )
    batch = cfg.trainer.prompts_per_step * cfg.algo.group_size
    if batch % nproc:
        raise SetupError(
            f"the global batch trainer.prompts_per_step x algo.group_size = {batch} does not divide by --nproc "
            f"{nproc}: set trainer.prompts_per_step to a multiple of {nproc // _gcd(nproc, cfg.algo.group_size)} "
            f"or use an --nproc that divides {batch}"
        )
    if port and not port_free(port):
        raise SetupError(f"--master-port {port} is in use: pick a free port, or leave --master-port out (auto)")


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _sum_hook(state: Any, bucket: Any) -> Any:
    """DDP comm hook: sum a gradient bucket over the ranks (DDP's default divides by N; the scale is global here)."""
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()  # type: ignore[union-attr]
    return fut.then(lambda f: f.value()[0])


# DDP checks the hook's annotations as objects; this module's are strings (``from __future__ import annotations``)
_sum_hook.__annotations__ = {"state": Any, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


@dataclass
class ShardedUpdater(PolicyUpdater):
    """:class:`PolicyUpdater` whose rank computes its share of each mini-batch; DDP sums the gradients."""

    rank: int = 0
    world_size: int = 1
    ddp: Any = None  # the DistributedDataParallel wrapper, made at the first update (a collective on every rank)

    def _wrap(self) -> None:
        """Wrap the policy in DDP (every rank at the same point: the first update) and forward through it."""
        if self.ddp is not None:
            return
        dev = model_device(self.model)
        with warnings.catch_warnings():  # torch 2.13 deprecates broadcast_buffers, but its successor
            warnings.simplefilter("ignore", FutureWarning)  # forward_sync_buffers=False hangs here (a lazy sync)
            self.ddp = DistributedDataParallel(
                self.model,
                device_ids=[dev] if dev.type == "cuda" else None,
                broadcast_buffers=False,  # forwards differ in number across ranks: no collective in forward
                init_sync=False,  # sync_state already gave every rank rank 0's weights
            )
        self.ddp.register_comm_hook(None, _sum_hook)
        self.model = self.ddp

    def release(self) -> None:
        """Drop the DDP wrapper (and its reducer's hold on the process group) before the group is destroyed.

        A reducer that outlives ``destroy_process_group`` can hang the process in its destructor at exit.
        """
        if self.ddp is not None:
            self.model = self.ddp.module
            self.ddp = None
            gc.collect()

    def _local_rows(self, rows: list[int]) -> list[int]:
        return rows[self.rank :: self.world_size]

    def _worker_count(self) -> int:
        """One: the DDP wrapper's forward and its gradient hooks are not for concurrent micro-batches."""
        return 1

    def _minibatch(self, *args: Any, **kwargs: Any) -> None:
        """The micro-batches accumulate locally (``no_sync``); :meth:`_reduce` runs the one synced pass."""
        with self.ddp.no_sync():
            super()._minibatch(*args, **kwargs)

    def _reduce(self, mb_loss: float, finite: bool) -> tuple[float, bool]:
        """One zero-weighted synced pass (DDP all-reduces the accumulated gradients), then loss and flags."""
        dev = model_device(self.model)
        ids = torch.full((1, 2), self.pad_id, dtype=torch.long, device=dev)  # a dummy row: every rank, even empty
        self.ddp.require_backward_grad_sync = True  # leave no_sync for this pass only (as no_sync's exit does)
        try:
            with autocast(dev, self.precision):
                out = self.ddp(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
            (out.logits.float().sum() * 0.0).backward()  # adds 0 to every gradient; triggers the all-reduce
        finally:
            self.ddp.require_backward_grad_sync = False
        flags = torch.tensor([mb_loss, 0.0 if finite else 1.0], dtype=torch.float64, device=dev)
        dist.all_reduce(flags)
        return float(flags[0].item()), flags[1].item() == 0  # a non-finite loss on any rank: all skip the step

    def _update_local(self, trajs: list[Trajectory], advantages: torch.Tensor, seed: int) -> UpdateStats:
        self._wrap()
        return merge_stats(PolicyUpdater.update(self, trajs, advantages, seed=seed), model_device(self.model))

    def update(self, trajs: list[Trajectory], advantages: torch.Tensor, *, seed: int) -> UpdateStats:
        """Rank 0: send the step to the other ranks, then update on its share (the others call :meth:`follow`)."""
        _collective(lambda: dist.broadcast_object_list([(trajs, advantages.cpu(), seed)], src=0))
        return _collective(lambda: self._update_local(trajs, advantages, seed))

    def follow(self) -> bool:
        """Ranks > 0: receive one step and update on its share; False when rank 0 says the run is over."""
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        if box[0] is None:
            return False
        trajs, advantages, seed = box[0]
        self._update_local(trajs, advantages, seed)
        return True

    @classmethod
    def like(cls, base: PolicyUpdater, rank: int, world_size: int) -> ShardedUpdater:
        """A sharded updater with every setting of ``base``."""
        kw = {f.name: getattr(base, f.name) for f in dataclasses.fields(PolicyUpdater) if f.init}
        return cls(**kw, rank=rank, world_size=world_size)


#: :class:`UpdateStats` fields that are sums over tokens, minima and maxima: merged over the ranks' shares.
def merge_stats(stats: UpdateStats, dev: torch.device) -> UpdateStats:
    """Every rank's token statistics folded into each rank's ``stats`` (a collective on ``dev``: every rank calls it).

    After it ``train/is_ratio_*``, ``train/clip_frac``, ``train/entropy``, ``train/kl`` and the TIS mean cover
    the whole global batch, as in a one-process run; losses and gradient norms are already global.
    """
    sums = torch.tensor([getattr(stats, k) for k in TOKEN_SUMS], dtype=torch.float64, device=dev)
    dist.all_reduce(sums)
    for k, v in zip(TOKEN_SUMS, sums.tolist(), strict=True):
        setattr(stats, k, v)
    # one MIN over the minima and the negated maxima (two collectives in all, not one per field)
    extremes = [getattr(stats, k) for k in TOKEN_MINS] + [-getattr(stats, k) for k in TOKEN_MAXES]
    low = torch.tensor(extremes, dtype=torch.float64, device=dev)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    values = low.tolist()
    for k, v in zip(TOKEN_MINS, values, strict=False):
        setattr(stats, k, v)
    for k, v in zip(TOKEN_MAXES, values[len(TOKEN_MINS) :], strict=True):
        setattr(stats, k, -v)
    return stats


def _collective(fn: Any) -> Any:
    """Run a collective; a dead or unreachable rank becomes one :class:`SetupError`."""
    try:
        return fn()
    except (RuntimeError, dist.DistError) as exc:
        text = str(exc)
        if not isinstance(exc, dist.DistError) and not any(w in text for w in _PEER_GONE):
            raise  # a bug in the update itself, not a lost rank
        raise SetupError(
            f"a trainer rank stopped during a collective ({str(exc).splitlines()[0][:200]}); the run directory "
            "keeps its last complete checkpoint: continue with `tirl train --resume RUN_DIR`"
        ) from None


def sync_state(model: Any, optimizer: torch.optim.Optimizer, rank: int) -> None:
    """Every rank gets rank 0's parameters, buffers and optimiser state."""
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=0)
    box: list[Any] = [optimizer.state_dict() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    if rank != 0:
        optimizer.load_state_dict(box[0])


@dataclass
class World:
    """Rank 0's view of the data-parallel world: the follower processes and the process group."""

    nproc: int
    port: int
    backend: str
    run_dir: Path
    procs: list[Any] = field(default_factory=list)  # subprocess.Popen, or RayRank (same poll/kill/wait)
    config_file: str = ""
    addr: str = "127.0.0.1"  # the rendezvous: rank 0's address
    started: bool = False
    updater: ShardedUpdater | None = None  # rank 0's, released before the group is destroyed

    @classmethod
    def launch(cls, cfg: Any, run_dir: Path, nproc: int, port: int, model_path: str | None) -> World:
        """Check the request, then start ranks 1..N-1 (they wait for rank 0 at the rendezvous)."""
        from tirl.config import config_to_dict

        check_world(cfg, nproc, port)
        world = cls(nproc, port or free_port(), backend_for(cfg.model.device), Path(run_dir))
        if cfg.trainer.backend == "ray":
            world._launch_on_ray(cfg, model_path)
            return world
        fd, world.config_file = tempfile.mkstemp(prefix="tirl-dist-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(config_to_dict(cfg), fh)
        logs = world.run_dir / "ranks"
        logs.mkdir(parents=True, exist_ok=True)
        for rank in range(1, nproc):
            cmd = [sys.executable, "-m", "tirl.trainer.distributed", "--rank", str(rank), "--world", str(nproc)]
            cmd += ["--port", str(world.port), "--config", world.config_file]
            if model_path:
                cmd += ["--model", model_path]
            with (logs / f"rank-{rank}.log").open("wb") as log:
                world.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        return world

    def _launch_on_ray(self, cfg: Any, model_path: str | None) -> None:
        """Ranks 1..N-1 as Ray actors spread over the cluster (:mod:`tirl.distributed.ray_ranks`)."""
        from tirl.config import config_to_dict
        from tirl.distributed.ray_ranks import driver_address, launch_rank

        self.addr = driver_address(cfg.trainer.ray_address)
        placement = {}
        for rank in range(1, self.nproc):
            argv = ["--rank", str(rank), "--world", str(self.nproc), "--port", str(self.port), "--addr", self.addr]
            argv += ["--config", json.dumps(config_to_dict(cfg))] + (["--model", model_path] if model_path else [])
            handle = launch_rank(argv, gpu=self.backend == "nccl")
            self.procs.append(handle)
            placement[str(rank)] = handle.placement
        logs = self.run_dir / "ranks"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / "placement.json").write_text(json.dumps({"rank0": self.addr, "ranks": placement}, indent=1))

    def attach(self, trainer: Any) -> None:
        """Join the process group as rank 0, shard the trainer's updater and send it its starting state."""
        err: list[BaseException] = []

        def init() -> None:
            try:
                dist.init_process_group(
                    self.backend,
                    init_method=f"tcp://{self.addr}:{self.port}",
                    rank=0,
                    world_size=self.nproc,
                    timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
                )
            except BaseException as exc:  # reported below as one error line
                err.append(exc)

        t = threading.Thread(target=init, daemon=True)
        t.start()
        deadline = time.monotonic() + INIT_TIMEOUT_S
        while t.is_alive():
            t.join(0.2)
            dead = [i + 1 for i, p in enumerate(self.procs) if p.poll() not in (None, 0)]
            if dead or time.monotonic() > deadline:
                why = f"rank(s) {dead} exited" if dead else f"no rendezvous within {INIT_TIMEOUT_S:.0f}s"
                raise SetupError(f"--nproc {self.nproc}: {why}; see {self.run_dir / 'ranks'}")
        if err:
            raise SetupError(f"--nproc {self.nproc}: the process group did not start ({err[0]}); see the rank logs")
        self.started = True
        trainer.updater = self.updater = ShardedUpdater.like(trainer.updater, 0, self.nproc)
        _collective(lambda: sync_state(trainer.model, trainer.optimizer, 0))

    def close(self) -> None:
        """Tell the ranks the run is over, leave the group, reap the processes (kill those that hang)."""
        clean = False
        try:
            if self.started:
                try:
                    dist.broadcast_object_list([None], src=0)
                    clean = True
                except (RuntimeError, dist.DistError):
                    pass  # a rank already gone: nothing more to tell it
                if self.updater is not None:
                    self.updater.release()
                dist.destroy_process_group()
        finally:
            for p in self.procs:
                try:
                    p.wait(timeout=60 if clean else 5)  # never started or a rank died: the others cannot finish
                except (subprocess.TimeoutExpired, TimeoutError):
                    p.kill()
                    p.wait()
                if not isinstance(p, subprocess.Popen):  # a Ray actor outlives its method: end its worker
                    p.kill()
            if self.config_file:
                Path(self.config_file).unlink(missing_ok=True)


def follower(argv: list[str] | None = None) -> int:
    """Entry point of ranks 1..N-1 (started by :meth:`World.launch`)."""
    ap = argparse.ArgumentParser(description="a tirl trainer rank > 0 (started by `tirl train --nproc N`)")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--config", required=True, help="the config: a JSON file, or JSON text (Ray ranks)")
    ap.add_argument("--addr", default="127.0.0.1", help="rank 0's address")
    ap.add_argument("--model", default=None)
    args = ap.parse_args(argv)
    from transformers.utils import logging as hf_logging

    from tirl.models.loading import load_policy
    from tirl.models.memory import apply_memory_options

    hf_logging.disable_progress_bar()
    cfg = read_rank_config(args.config)
    torch.set_num_threads(max(1, cfg.trainer.threads))
    torch.manual_seed(cfg.trainer.seed)
    device = rank_device(cfg.model.device, args.rank)
    dist.init_process_group(
        backend_for(cfg.model.device),
        init_method=f"tcp://{args.addr}:{args.port}",
        rank=args.rank,
        world_size=args.world,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    m = cfg.model
    policy = load_policy(
        args.model or m.path,
        device=device,
        dtype=m.dtype,
        env=cfg.env.name,
        need_tools=cfg.env.tools,
        train_adapter=cfg.algo.lora_rank > 0,
    )
    model = apply_memory_options(policy.model, cfg.algo)
    ref = None
    if cfg.algo.kl_coef > 0:
        ref = load_policy(m.path, device=device, dtype=m.dtype, env=cfg.env.name).model
        ref.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.algo.lr, weight_decay=0.0)
    pad = policy.tokenizer.pad_token_id
    base = PolicyUpdater(
        model=model,
        optimizer=opt,
        algo=cfg.algo,
        pad_id=int(pad if pad is not None else 0),
        ref_model=ref,
        temperature=cfg.generation.temperature,
        precision=cfg.algo.autocast,
    )
    updater = ShardedUpdater.like(base, args.rank, args.world)
    sync_state(model, opt, args.rank)
    while updater.follow():
        pass
    updater.release()
    dist.destroy_process_group()
    return 0


def read_rank_config(arg: str) -> Any:
    """The run's config as rank 0 sent it (JSON text, or a JSON file's path), rebuilt exactly."""
    from tirl.config import config_from_dict

    text = arg if arg.lstrip().startswith("{") else Path(arg).read_text()
    return config_from_dict(json.loads(text))


def main() -> int:
    """``python -m tirl.trainer.distributed``: a follower rank; errors go to its log."""
    try:
        return follower()
    except TirlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
