"""The data-parallel world of one rank: its device, the process group, and :class:`DDPSync` for the updater.

:class:`DDPSync` is the :class:`~tirl.trainer.update.GradSync` strategy of a
rank of ``tirl train --nproc N``. Every rank draws the same mini-batches (same
seed) and computes the micro-batches of its share of each mini-batch (rows
``rank, rank + N, ...``); each micro-loss is scaled by its share of the
*global* mini-batch. The gradients are summed by torch DDP
(``DistributedDataParallel`` with a summing comm hook) before clipping and the
optimiser step, so the gradient, the clipped norm, ``train/loss`` and the
parameters after the step equal the one-process run's, up to float summation
order. The micro-batches accumulate under ``no_sync()`` (their number differs
across ranks); then every rank runs one synced pass on a zero-weighted dummy
row whose backward triggers DDP's all-reduce: after the void filter a rank's
share of a mini-batch can be empty, and this keeps the collectives matched.
Rank 0 (the leader) broadcasts each step (:class:`UpdateStep`) to the others
at the start of its update; the followers receive it with :func:`receive_step`.

Devices (nccl): a rank's device is ``cuda:LOCAL_RANK`` — its index among the
ranks of its own node (``LOCAL_RANK`` as torch's elastic launcher and Ray
Train set it; the global rank when the ranks are local processes) — and
:func:`bind_device` makes it the current CUDA device *before* the process
group starts, so every collective, including the object collectives
(``broadcast_object_list`` stages its pickles on the current device), runs on
the rank's own GPU. On gloo (CPU) everything stays on the CPU.

Not covered: FSDP2 (every rank holds the full model and optimiser), restarting a dead rank, more than one
GPU per rank.
"""

from __future__ import annotations

import contextlib
import gc
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from tirl.errors import SetupError
from tirl.trainer.update import TOKEN_MAXES, TOKEN_MINS, TOKEN_SUMS, UpdateStats, model_device
from tirl.types import Trajectory

COLLECTIVE_TIMEOUT_S = 1800.0
PEER_GONE = ("gloo", "nccl", "Connection", "connection", "peer", "Broken pipe", "closed")

R = TypeVar("R")


def backend_for(device: str) -> str:
    """``nccl`` for a CUDA ``model.device``, else ``gloo``."""
    return "nccl" if device.startswith("cuda") else "gloo"


def local_rank(default: int) -> int:
    """The index of this process among its node's ranks: ``LOCAL_RANK`` when a launcher set it, else ``default``."""
    value = os.environ.get("LOCAL_RANK", "")
    return int(value) if value.strip().isdigit() else default


def rank_device(device: str, local: int) -> str:
    """The device of the rank with node-local index ``local``: ``cuda:LOCAL`` on GPU, else ``device``."""
    return f"cuda:{local}" if device.startswith("cuda") else device


def bind_device(device: str) -> None:
    """Make ``device`` the current CUDA device (before any collective); nothing to do on the CPU."""
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))


def collective_device(backend: str) -> torch.device:
    """Where this rank's collective tensors live: the current CUDA device under nccl, else the CPU."""
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def join_group(backend: str, addr: str, port: int, rank: int, world_size: int) -> None:
    """Join the default process group at ``tcp://addr:port`` (blocks until every rank has joined)."""
    dist.init_process_group(
        backend,
        init_method=f"tcp://{addr}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )


def _sum_hook(state: Any, bucket: Any) -> Any:
    """DDP comm hook: sum a gradient bucket over the ranks (DDP's default divides by N; the scale is global here)."""
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()  # type: ignore[union-attr]
    return fut.then(lambda f: f.value()[0])


# DDP checks the hook's annotations as objects; this module's are strings (``from __future__ import annotations``)
_sum_hook.__annotations__ = {"state": Any, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


@dataclass(frozen=True)
class UpdateStep:
    """One step as the leader sends it: the kept trajectories, their advantages (CPU) and the shuffle seed."""

    trajs: list[Trajectory]
    advantages: Tensor  # [N]
    seed: int


def lost_rank(exc: BaseException) -> SetupError | None:
    """The :class:`SetupError` of a collective that failed because a rank is gone; None for any other error."""
    text = str(exc)
    if not isinstance(exc, dist.DistError) and not any(w in text for w in PEER_GONE):
        return None  # a bug in the update itself, not a lost rank
    return SetupError(
        f"a trainer rank stopped during a collective ({text.splitlines()[0][:200] if text else repr(exc)}); the "
        "run directory keeps its last complete checkpoint: continue with `tirl train --resume RUN_DIR`"
    )


def collective(fn: Callable[[], R]) -> R:
    """Run a collective; a dead or unreachable rank becomes one :class:`SetupError`."""
    try:
        return fn()
    except (RuntimeError, dist.DistError) as exc:
        err = lost_rank(exc)
        if err is None:
            raise
        raise err from None


def receive_step(device: torch.device) -> UpdateStep | None:
    """Followers: the leader's next step, or None when the leader says the run is over."""
    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0, device=device)
    return box[0] if isinstance(box[0], UpdateStep) else None


def send_stop(device: torch.device) -> None:
    """Leader: tell the followers that the run is over."""
    dist.broadcast_object_list([None], src=0, device=device)


def sync_state(model: Any, optimizer: torch.optim.Optimizer, rank: int, device: torch.device) -> None:
    """Every rank gets rank 0's parameters, buffers and optimiser state (object collective on ``device``)."""
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=0)
    box: list[Any] = [optimizer.state_dict() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0, device=device)
    if rank != 0:
        optimizer.load_state_dict(box[0])


def share_leader_state(model: Any, optimizer: torch.optim.Optimizer, backend: str) -> None:
    """Leader: send every follower its parameters and optimiser state (a lost rank is one SetupError)."""
    dev = collective_device(backend)
    collective(lambda: sync_state(model, optimizer, 0, dev))


def stop_followers(backend: str) -> bool:
    """Leader: tell the followers the run is over; False when a rank is already gone (nothing more to tell it)."""
    try:
        send_stop(collective_device(backend))
    except (RuntimeError, dist.DistError):
        return False
    return True


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


@dataclass
class DDPSync:
    """:class:`~tirl.trainer.update.GradSync` of one rank: its share of each mini-batch, gradients summed by DDP."""

    rank: int
    world_size: int
    concurrent: bool = False  # DDP's forward and gradient hooks are not for concurrent micro-batches
    ddp: Any = field(default=None, repr=False)  # the DistributedDataParallel wrapper, made at the first update

    @contextlib.contextmanager
    def step(self, trajs: list[Trajectory], advantages: Tensor, seed: int) -> Iterator[None]:
        """The leader broadcasts the step first; a rank lost during the update becomes one :class:`SetupError`."""
        if self.rank == 0:
            step = UpdateStep(list(trajs), advantages.detach().cpu(), seed)
            collective(lambda: dist.broadcast_object_list([step], src=0, device=self.object_device()))
        try:
            yield
        except (RuntimeError, dist.DistError) as exc:
            err = lost_rank(exc)
            if err is None:
                raise
            raise err from None

    def object_device(self) -> torch.device:
        """Where object collectives stage their bytes: this rank's current CUDA device under nccl, else the CPU."""
        return collective_device(dist.get_backend())

    def attach(self, model: Any) -> Any:
        """Wrap ``model`` in DDP (every rank at the same point: its first update) and forward through it."""
        if self.ddp is None:
            dev = model_device(model)
            with warnings.catch_warnings():  # torch 2.13 deprecates broadcast_buffers, but its successor
                warnings.simplefilter("ignore", FutureWarning)  # forward_sync_buffers=False hangs here (a lazy sync)
                self.ddp = DistributedDataParallel(
                    model,
                    device_ids=[dev] if dev.type == "cuda" else None,
                    broadcast_buffers=False,  # forwards differ in number across ranks: no collective in forward
                    init_sync=False,  # sync_state already gave every rank rank 0's weights
                )
            self.ddp.register_comm_hook(None, _sum_hook)
        return self.ddp

    def local_rows(self, rows: list[int]) -> list[int]:
        """Rows ``rank, rank + N, ...`` of the mini-batch."""
        return rows[self.rank :: self.world_size]

    def accumulating(self) -> contextlib.AbstractContextManager[None]:
        """DDP's ``no_sync``: the micro-batches' gradients stay local until :meth:`reduce`."""
        return self.ddp.no_sync()  # type: ignore[no-any-return]

    def reduce(self, mb_loss: float, finite: bool) -> tuple[float, bool]:
        """One zero-weighted synced pass (DDP all-reduces the accumulated gradients), then loss and flags."""
        dev = model_device(self.ddp.module)
        ids = torch.zeros((1, 2), dtype=torch.long, device=dev)  # a dummy row of token 0: every rank, even empty
        out = self.ddp(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
        (out.logits.float().sum() * 0.0).backward()  # adds 0 to every gradient; triggers the all-reduce
        flags = torch.tensor([mb_loss, 0.0 if finite else 1.0], dtype=torch.float64, device=dev)
        dist.all_reduce(flags)
        return float(flags[0].item()), flags[1].item() == 0  # a non-finite loss on any rank: all skip the step

    def merge(self, stats: UpdateStats) -> UpdateStats:
        """Every rank's token statistics (:func:`merge_stats`)."""
        return merge_stats(stats, model_device(self.ddp.module))

    def release(self) -> None:
        """Drop the DDP wrapper (and its reducer's hold on the process group) before the group is destroyed.

        A reducer that outlives ``destroy_process_group`` can hang the process in its destructor at exit.
        """
        if self.ddp is not None:
            self.ddp = None
            gc.collect()
