"""One policy update: old log-probs, mini-batches, micro-batches, clipped loss, guarded optimiser steps.

The steps, for the trajectories kept by the filter (with their advantages):

1. ``old_logprobs``: one no-grad forward of the current policy over every
   trajectory (the PPO anchor, and the trainer side of the TIS weight).
2. For each epoch, the trajectories are shuffled into ``algo.minibatches``
   mini-batches; each mini-batch is one optimiser step. From the second
   mini-batch on, the policy has moved, so the importance ratio is a real
   measurement, not identically 1.
3. A mini-batch is cut into micro-batches of at most
   ``algo.micro_batch_tokens`` padded tokens; each micro-loss is scaled by its
   share of the mini-batch (tokens for ``token_mean``, sequences for
   ``seq_mean``), so gradient accumulation gives exactly the mini-batch loss.
   With ``workers`` > 1 (by default: a small model on the CPU, one per
   ``trainer.threads``; :mod:`tirl.trainer.parallel`) that many micro-batches
   run at once on worker threads and share the token budget; each returns its
   gradient and they are added in micro-batch order, bit for bit what the
   sequential loop over the same micro-batches gives (the scoring passes
   use the same workers).
4. A non-finite loss or gradient norm skips that optimiser step (gradients
   are dropped, the count goes to ``train/skipped_updates``).

Log-probs and entropy come from :func:`tirl.trainer.logprobs.target_logprobs`
(chunked over positions; autograd keeps the logits, not a ``[B, T, V]``
log-softmax). Each micro-batch's tensors are released before the next forward
pass, and the C heap's free pages go back to the OS before and after the update
(:func:`tirl.models.memory.release_free_memory`), so the rollout and the
update do not stack their peaks in resident memory.

With ``generation.temperature`` T != 1, every log-prob (old, current,
reference) is of ``softmax(logits / T)``, the distribution the sampler drew
from, so the ratio and the TIS weight refer to one distribution.

Memory options (:mod:`tirl.models.memory`): ``autocast="bf16"`` runs every
forward pass here under bf16 autocast (the logits stay bf16; log-probs are computed in float32);
a model with gradient checkpointing enabled is put in
:func:`~tirl.models.memory.update_mode` (eval mode, checkpointed layers
recompute); a LoRA model trains its adapter only (the optimiser is given
only the trainable parameters by the caller).

Gradient sync: the updater is given a :class:`GradSync` strategy. :class:`LocalSync` (the default) is one
process; :class:`tirl.distributed.ddp.DDPSync` makes the rank compute its share of each mini-batch and sums
the gradients over the ranks with torch DDP. The updater calls only the strategy's public methods.

Attribution (:mod:`tirl.trainer.attribution`): each micro-batch also folds its rows' ``void/*`` counts (void
rows' share of tokens, low-probability tokens, ratio outliers, gradient weight) from the tensors it already has;
the void rows ``drop``/``penalize`` took out are scored without a gradient at their mini-batch's weights.

Not covered: learning-rate schedules other than linear warm-up, mixed precision loss scaling (fp16), top-p
renormalisation in the trainer's log-probs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from tirl.algorithms.losses import LossConfig, policy_loss, tis_weights
from tirl.config import AlgoConfig
from tirl.models.memory import autocast, check_master_weights, release_free_memory, update_mode
from tirl.trainer.attribution import AttributionRows, AttributionStats, WithheldScorer, grad_weights, row_tensors
from tirl.trainer.batching import TrainBatch, collate, split_microbatches, split_minibatches
from tirl.trainer.logprobs import target_logprobs
from tirl.trainer.parallel import MicroPool, auto_workers
from tirl.types import Trajectory


def loss_config(algo: AlgoConfig) -> LossConfig:
    """The loss settings of an :class:`AlgoConfig` (every ``LossConfig`` field has an ``AlgoConfig`` namesake)."""
    return LossConfig(**{f.name: getattr(algo, f.name) for f in dataclasses.fields(LossConfig)})


def forward_logits(model: Any, batch: TrainBatch, precision: str = "off") -> Tensor:
    """Logits at every position that predicts a target, in the model's output dtype: Tensor  # [B, L-1, V].

    Under bf16 autocast they stay bf16 (no full float32 copy): :func:`~tirl.trainer.logprobs.target_logprobs`
    casts one chunk of positions at a time to float32.
    """
    with autocast(batch.input_ids.device, precision):
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    return out.logits[:, :-1, :]  # type: ignore[no-any-return]


def model_device(model: Any) -> torch.device:
    """The device of the model's parameters (where each batch is moved)."""
    return next(iter(model.parameters())).device  # type: ignore[no-any-return]


def on_device(batch: TrainBatch, device: torch.device) -> TrainBatch:
    """``batch`` with its tensors on ``device`` (collation happens on the CPU)."""
    if batch.input_ids.device == device:
        return batch
    moved: dict[str, Any] = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        moved[f.name] = value.to(device, non_blocking=True) if isinstance(value, Tensor) else value
    return TrainBatch(**moved)


def _pad_rows(rows: list[Tensor], width: int) -> Tensor:
    """Stack 1-D tensors right-padded with 0 to ``width`` (on the rows' device).

    rows: list of Tensor  # [L_i]
    returns: Tensor  # [len(rows), width]
    """
    out = torch.zeros((len(rows), width), dtype=torch.float32, device=rows[0].device if rows else None)
    for i, r in enumerate(rows):
        n = min(r.numel(), width)
        out[i, :n] = r[:n]
    return out


def score_logprobs(
    model: Any,
    trajs: list[Trajectory],
    pad_id: int,
    micro_tokens: int,
    temperature: float = 1.0,
    precision: str = "off",
    pool: MicroPool | None = None,
) -> list[Tensor]:
    """Per-trajectory target log-probs of ``softmax(logits / temperature)`` (no grad), each Tensor  # [L_i - 1].

    ``pool`` scores its workers' micro-batches at once (each row's values do not depend on the others).
    """
    lengths = [len(t.token_ids) for t in trajs]
    out: list[Tensor] = [torch.empty(0)] * len(trajs)
    zeros = torch.zeros(len(trajs))
    budget = micro_tokens if micro_tokens > 0 else 1 << 62
    micros = split_microbatches(list(range(len(trajs))), lengths, budget)

    @torch.inference_mode()  # thread-local: set in the thread that runs the forward pass
    def score(micro: list[int]) -> list[Tensor]:
        batch = on_device(collate(trajs, zeros, micro, pad_id), model_device(model))
        lp, _ = target_logprobs(forward_logits(model, batch, precision), batch.targets, temperature, entropy=False)
        return [lp[j, : lengths[i] - 1].float().clone() for j, i in enumerate(micro)]

    for micro, lps in zip(micros, (pool or MicroPool(1)).map(score, micros), strict=True):
        for i, lp in zip(micro, lps, strict=True):
            out[i] = lp
    return out


#: how each token statistic of :class:`UpdateStats` folds: summed, least, greatest (one micro-batch into
#: the update, :meth:`UpdateStats.absorb`; one rank into all, :func:`tirl.distributed.ddp.merge_stats`)
TOKEN_SUMS = ("tokens", "ratio_sum", "clip_sum", "dual_sum", "entropy_sum", "tis_sum", "kl_sum")
TOKEN_MINS = ("ratio_min",)
TOKEN_MAXES = ("ratio_max", "gap_max")


@dataclass(slots=True)
class UpdateStats:
    """Accumulated diagnostics of one update (token-weighted where it matters)."""

    tokens: float = 0.0
    ratio_min: float = math.inf
    ratio_max: float = -math.inf
    ratio_sum: float = 0.0
    clip_sum: float = 0.0
    dual_sum: float = 0.0
    entropy_sum: float = 0.0
    tis_sum: float = 0.0
    gap_max: float = 0.0
    kl_sum: float = 0.0
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    skipped: int = 0
    steps: int = 0
    attr: AttributionStats = field(default_factory=AttributionStats)  # void/* (tirl.trainer.attribution)

    def add_tokens(self, mask: Tensor, ratio: Tensor, ent: Tensor, tis: Tensor, gap: Tensor, out: Any) -> None:
        """Fold one micro-batch in (all tensors ``[B, T]``, read where ``mask`` is 1)."""
        m = mask > 0
        n = float(m.sum().item())
        if n == 0:
            return
        r = ratio[m]
        self.ratio_min = min(self.ratio_min, float(r.min().item()))
        self.ratio_max = max(self.ratio_max, float(r.max().item()))
        self.ratio_sum += float(r.sum().item())
        self.clip_sum += float(out.clip_frac.item()) * n
        self.dual_sum += float(out.dual_clip_frac.item()) * n
        self.kl_sum += float(out.kl.item()) * n
        self.entropy_sum += float(ent[m].sum().item())
        self.tis_sum += float(tis[m].sum().item())
        self.gap_max = max(self.gap_max, float(gap[m].abs().max().item()))
        self.tokens += n

    def absorb(self, part: UpdateStats) -> None:
        """Fold in the token statistics of one micro-batch (a fresh :class:`UpdateStats` given ``add_tokens``)."""
        self.attr.absorb(part.attr)
        if part.tokens == 0:
            return
        for k in TOKEN_SUMS:
            setattr(self, k, getattr(self, k) + getattr(part, k))
        for k in TOKEN_MINS:
            setattr(self, k, min(getattr(self, k), getattr(part, k)))
        for k in TOKEN_MAXES:
            setattr(self, k, max(getattr(self, k), getattr(part, k)))

    def metrics(self) -> dict[str, float | None]:
        """The ``train/*`` metrics (None where nothing was measured)."""
        n = self.tokens
        done = bool(self.grad_norms)
        return {
            "train/is_ratio_min": self.ratio_min if n else None,
            "train/is_ratio_max": self.ratio_max if n else None,
            "train/is_ratio_mean": self.ratio_sum / n if n else None,
            "train/clip_frac": self.clip_sum / n if n else None,
            "train/dual_clip_frac": self.dual_sum / n if n else None,
            "train/entropy": self.entropy_sum / n if n else None,
            "train/kl": self.kl_sum / n if n else None,
            "train/tis_weight_mean": self.tis_sum / n if n else None,
            "train/gen_logprob_gap_max": self.gap_max if n else None,
            "train/loss": sum(self.losses) / len(self.losses) if self.losses else None,
            "train/grad_norm": sum(self.grad_norms) / len(self.grad_norms) if done else None,
            "train/grad_norm_max": max(self.grad_norms) if done else None,
            "train/skipped_updates": self.skipped,
            "train/optimizer_steps": self.steps,
            "train/loss_tokens": n,
            **self.attr.metrics(),
        }


def _known(t: Tensor | None) -> Tensor:
    if t is None:
        raise RuntimeError("old log-probs missing for a row after the first mini-batch (trainer bug)")
    return t


def _loss_tokens(traj: Trajectory) -> int:
    """Loss tokens of a trajectory as the batcher sees them (targets are positions 1..L-1)."""
    return sum(traj.loss_mask[1:]) if traj.loss_weight > 0 else 0


@dataclass(slots=True)
class _MicroResult:
    """One micro-batch's share of a mini-batch step (computed on a :class:`MicroPool` worker or inline)."""

    finite: bool
    loss: float = 0.0  # the micro-batch's own loss (unscaled)
    scale: float = 0.0  # its share of the mini-batch's aggregate
    grads: tuple[Tensor | None, ...] | None = None  # its scaled gradient per parameter (None: went into .grad)
    stats: UpdateStats | None = None


def _accumulate(params: list[Tensor], grads: tuple[Tensor | None, ...]) -> None:
    """Add one micro-batch's gradients into ``.grad`` as ``backward()`` would (set when empty, else ``+=``)."""
    for p, g in zip(params, grads, strict=True):
        if g is None:
            continue
        if p.grad is None:
            p.grad = g
        else:
            p.grad.add_(g)


def _micro_scale(loss_agg: str, mask: Tensor, total_tokens: float, total_seqs: float) -> float:
    """Share of a micro-batch in its mini-batch's aggregate (mask: Tensor  # [B, T])."""
    if loss_agg == "seq_mean":
        return float((mask.sum(dim=1) > 0).sum().item()) / max(total_seqs, 1.0)
    return float(mask.sum().item()) / max(total_tokens, 1.0)


class GradSync(Protocol):
    """How one process's update joins the others': which rows it computes and how gradients are combined.

    :class:`PolicyUpdater` calls these, in this order, for every update: :meth:`step` around the whole update,
    :meth:`attach` once (the module the training forward passes go through), then per mini-batch
    :meth:`local_rows`, the micro-batches inside :meth:`accumulating`, :meth:`reduce`; :meth:`merge` on the
    finished statistics.
    """

    @property
    def rank(self) -> int:
        """The rank of this process (0 for one process)."""
        ...

    @property
    def world_size(self) -> int:
        """How many processes share each update."""
        ...

    @property
    def concurrent(self) -> bool:
        """Whether micro-batches may run side by side on worker threads (:mod:`tirl.trainer.parallel`)."""
        ...

    def step(self, trajs: list[Trajectory], advantages: Tensor, seed: int) -> AbstractContextManager[None]:
        """The span of one update (a leader shares the step with the other ranks here)."""
        ...

    def attach(self, model: Any) -> Any:
        """The module to run training forward passes through (``model`` itself, or a wrapper of it)."""
        ...

    def local_rows(self, rows: list[int]) -> list[int]:
        """The rows of a mini-batch this process computes."""
        ...

    def accumulating(self) -> AbstractContextManager[None]:
        """Around a mini-batch's micro-batches: gradients accumulate locally inside it."""
        ...

    def reduce(self, mb_loss: float, finite: bool) -> tuple[float, bool]:
        """Combine the accumulated gradients; the mini-batch loss and the all-finite flag over every process."""
        ...

    def merge(self, stats: UpdateStats) -> UpdateStats:
        """The token statistics of every process folded into ``stats``."""
        ...


@dataclass(frozen=True)
class LocalSync:
    """One process: every row is computed here, nothing is combined."""

    rank: int = 0
    world_size: int = 1
    concurrent: bool = True

    @contextlib.contextmanager
    def step(self, trajs: list[Trajectory], advantages: Tensor, seed: int) -> Iterator[None]:
        """Nothing to share."""
        yield

    def attach(self, model: Any) -> Any:
        """The model itself."""
        return model

    def local_rows(self, rows: list[int]) -> list[int]:
        """All of them."""
        return rows

    def accumulating(self) -> AbstractContextManager[None]:
        """Nothing to hold back."""
        return contextlib.nullcontext()

    def reduce(self, mb_loss: float, finite: bool) -> tuple[float, bool]:
        """The loss and flag of this process alone."""
        return mb_loss, finite

    def merge(self, stats: UpdateStats) -> UpdateStats:
        """``stats`` unchanged."""
        return stats


@dataclass
class PolicyUpdater:
    """Runs the update of one training step on ``model`` with ``optimizer``."""

    model: Any
    optimizer: torch.optim.Optimizer
    algo: AlgoConfig
    pad_id: int
    ref_model: Any = None
    temperature: float = 1.0  # the sampler's (generation.temperature): log-probs are of softmax(logits / T)
    precision: str = "off"  # algo.autocast: "bf16" runs the forward passes under bf16 autocast
    workers: int | None = None  # micro-batches computed at once (tirl.trainer.parallel); None: auto_workers
    sync: GradSync = field(default_factory=LocalSync)  # one process, or this rank's share (tirl.distributed.ddp)

    def __post_init__(self) -> None:
        check_master_weights(self.model)  # bf16/fp16 trainable parameters: refused (algo.autocast=bf16 instead)
        self.loss_cfg = loss_config(self.algo)
        self.pool = MicroPool(self._worker_count())
        self._train_model: Any = self.model  # what training forwards go through (set by sync.attach)
        self._attributed = 0  # rows [0, _attributed) of the update are attributed (tirl.trainer.attribution)

    def close(self) -> None:
        """Stop (and join) the micro-batch worker threads; a later :meth:`update` starts them again."""
        self.pool.close()

    def _worker_count(self) -> int:
        """Micro-batches at once: ``workers``, else :func:`~tirl.trainer.parallel.auto_workers`; 1 unless concurrent."""
        if not self.sync.concurrent:
            return 1
        return max(1, self.workers) if self.workers is not None else auto_workers(self.model)

    def update(
        self, trajs: list[Trajectory], advantages: Tensor, *, seed: int, attribution: AttributionRows | None = None
    ) -> UpdateStats:
        """All epochs and mini-batches of one step; ``advantages``: Tensor  # [N].

        The old log-probs of the first mini-batch's rows are read off that
        mini-batch's own forward pass (it runs at the pre-update weights, so
        they are exactly the old log-probs); only the other rows get a separate
        no-grad scoring pass before the first optimiser step. The whole update runs inside the sync
        strategy's :meth:`~GradSync.step`; the returned statistics are merged over every process.
        ``attribution``: the rows the ``void/*`` metrics cover (:mod:`tirl.trainer.attribution`; None: every
        row of ``trajs``); they are rank 0's alone.
        """
        with self.sync.step(trajs, advantages, seed):
            self._train_model = self.sync.attach(self.model)
            self._attributed = -1 if self.sync.rank else len(trajs)
            if attribution is not None and attribution.attributed is not None and not self.sync.rank:
                self._attributed = attribution.attributed
            return self.sync.merge(self._update(trajs, advantages, seed, attribution or AttributionRows()))

    def _update(self, trajs: list[Trajectory], advantages: Tensor, seed: int, rows: AttributionRows) -> UpdateStats:
        stats = UpdateStats()
        # algo.micro_batch_tokens bounds the padded tokens in flight: the pool's workers share it
        budget = self.algo.micro_batch_tokens
        micro_tokens = max(1, budget // self.pool.workers) if budget > 0 else 1 << 62
        release_free_memory()  # the rollout's freed pages go back before the activations are allocated
        update_mode(self.model)  # eval mode throughout (dropout would make the ratio noisy even at step 0);
        # checkpointed layers keep their own training flag so that they recompute (tirl.models.memory)
        rng = random.Random(seed)
        plan = [split_minibatches(len(trajs), self.algo.minibatches, rng) for _ in range(self.algo.epochs)]
        first = set(self.sync.local_rows(plan[0][0]))  # rows whose old log-probs this process's first forward gives
        old: list[Tensor | None] = [None] * len(trajs)
        self._score_into(old, trajs, [i for i in range(len(trajs)) if i not in first], micro_tokens)
        ref = (
            score_logprobs(
                self.ref_model, trajs, self.pad_id, micro_tokens, self.temperature, self.precision, self.pool
            )
            if self._use_ref()
            else None
        )
        withheld = None
        if rows.withheld and not self.sync.rank:  # drop/penalize: the void rows the filter took out

            def score(part: list[Trajectory]) -> list[Tensor]:
                return score_logprobs(
                    self.model, part, self.pad_id, micro_tokens, self.temperature, self.precision, self.pool
                )

            withheld = WithheldScorer(rows, plan, seed, self.sync.world_size, score)
        lengths = [len(t.token_ids) for t in trajs]
        for e, epoch in enumerate(plan):
            for k, mb in enumerate(epoch):
                if withheld is not None:  # at the weights this mini-batch's rows see
                    withheld.attribute(e, k, self.loss_cfg, self.algo.tis_cap, stats.attr)
                self._minibatch(trajs, advantages, mb, lengths, old, ref, stats, micro_tokens)
                if e == 0 and k == 0:  # skipped or empty first mini-batch: weights unchanged, score what is missing
                    self._score_into(old, trajs, [i for i in mb if old[i] is None], micro_tokens)
        release_free_memory()  # and the activations' pages before the next rollout
        return stats

    def _score_into(self, old: list[Tensor | None], trajs: list[Trajectory], rows: list[int], micro: int) -> None:
        """Fill ``old[i]`` for ``rows`` with a no-grad scoring pass at the current weights."""
        if rows:
            scored = score_logprobs(
                self.model, [trajs[i] for i in rows], self.pad_id, micro, self.temperature, self.precision, self.pool
            )
            for i, lp in zip(rows, scored, strict=True):
                old[i] = lp

    def _warm_up(self) -> None:
        """Linear learning-rate warm-up over the first ``algo.warmup_steps`` optimiser steps.

        The count comes from the optimiser's own state (Adam's ``step``), so it survives a resume. It is the
        largest count of any parameter: Adam keeps no state for a parameter that never had a gradient (the
        first one read alone, unused, held the rate at ``lr / warmup_steps`` for good).
        """
        warmup = self.algo.warmup_steps
        if warmup <= 0:
            return
        done = 0
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                state = self.optimizer.state.get(p)
                if state and "step" in state:
                    done = max(done, int(float(state["step"])))
        factor = min(1.0, (done + 1) / warmup)
        for group in self.optimizer.param_groups:
            group["lr"] = self.algo.lr * factor

    def _use_ref(self) -> bool:
        return self.ref_model is not None and self.algo.kl_coef > 0

    def _micro(
        self,
        trajs: list[Trajectory],
        advantages: Tensor,
        micro: list[int],
        lengths: list[int],
        old: list[Tensor | None],
        ref: list[Tensor] | None,
        total_tokens: float,
        total_seqs: float,
        params: list[Tensor] | None,
    ) -> _MicroResult:
        """Forward, loss and backward of one micro-batch: into ``.grad``, or returned when ``params`` are given.

        Rows whose ``old`` entry is None take their old log-probs from this forward pass (detached).
        """
        batch = on_device(collate(trajs, advantages, micro, self.pad_id), model_device(self.model))
        width = batch.targets.shape[1]
        logits = forward_logits(self._train_model, batch, self.precision)
        lp, ent = target_logprobs(logits, batch.targets, self.temperature)
        for j, i in enumerate(micro):
            if old[i] is None:  # first mini-batch at the pre-update weights: these are the old log-probs
                old[i] = lp[j, : lengths[i] - 1].detach().clone()
        old_lp = _pad_rows([_known(old[i]) for i in micro], width)  # [B, T]
        tis = tis_weights(old_lp, batch.gen_logprobs, self.algo.tis_cap)
        ref_lp = _pad_rows([ref[i] for i in micro], width) if ref is not None else None
        out = policy_loss(lp, old_lp, batch.advantages, batch.mask, self.loss_cfg, tis=tis, ref_logprobs=ref_lp)
        scale = _micro_scale(self.algo.loss_agg, batch.mask, total_tokens, total_seqs)
        if not torch.isfinite(out.loss):
            return _MicroResult(finite=False)
        grads: tuple[Tensor | None, ...] | None = None
        if params is None:
            (out.loss * scale).backward()
        else:
            grads = torch.autograd.grad(out.loss * scale, params, allow_unused=True)
        part = UpdateStats()
        part.add_tokens(batch.mask, out.ratio, ent, tis, old_lp - batch.gen_logprobs, out)
        self._attribute(part.attr, [trajs[i] for i in micro], micro, batch, out.ratio, tis)
        return _MicroResult(finite=True, loss=float(out.loss.item()), scale=scale, grads=grads, stats=part)

    def _attribute(
        self, into: AttributionStats, picked: list[Trajectory], micro: list[int], batch: Any, ratio: Tensor, tis: Tensor
    ) -> None:
        """Fold this micro-batch's attributed rows (index below ``_attributed``) into ``into``, whatever their mask."""
        keep = [j for j, i in enumerate(micro) if i < self._attributed]
        if not keep:
            return
        void, mask, _ = row_tensors([picked[j] for j in keep], ratio.shape[1])
        sel = torch.tensor(keep, device=ratio.device)
        r, w = ratio.index_select(0, sel), tis.index_select(0, sel)
        mask = mask.to(ratio.device)
        weight = grad_weights(r, batch.advantages.index_select(0, sel), w, mask, self.loss_cfg)
        into.add(void.to(ratio.device), mask, batch.gen_logprobs.index_select(0, sel), r, weight, self.algo.dual_clip)

    def _minibatch(
        self,
        trajs: list[Trajectory],
        advantages: Tensor,
        rows: list[int],
        lengths: list[int],
        old: list[Tensor | None],
        ref: list[Tensor] | None,
        stats: UpdateStats,
        micro_tokens: int,
    ) -> None:
        """One optimiser step over ``rows`` (gradient accumulation across micro-batches).

        Rows whose ``old`` entry is None take their old log-probs from this forward pass (detached).
        """
        counts = [_loss_tokens(trajs[i]) for i in rows]
        total_tokens = float(sum(counts))
        total_seqs = float(sum(1 for c in counts if c > 0))
        if total_tokens == 0:
            return
        self.optimizer.zero_grad(set_to_none=True)
        # with more than one worker each micro-batch returns its gradient, added here in micro-batch order
        params = [p for p in self.model.parameters() if p.requires_grad] if self.pool.workers > 1 else None
        mb_loss = 0.0
        finite = True
        micros = split_microbatches(self.sync.local_rows(rows), lengths, micro_tokens)

        def run(micro: list[int]) -> _MicroResult:
            return self._micro(trajs, advantages, micro, lengths, old, ref, total_tokens, total_seqs, params)

        with self.sync.accumulating(), contextlib.closing(self.pool.map(run, micros)) as results:
            for res in results:  # closing: waits for started workers
                if not res.finite:
                    finite = False
                    break
                if params is not None and res.grads is not None:
                    _accumulate(params, res.grads)
                mb_loss += res.loss * res.scale
                if res.stats is not None:
                    stats.absorb(res.stats)
        mb_loss, finite = self.sync.reduce(mb_loss, finite)
        if not finite:
            stats.skipped += 1
            self.optimizer.zero_grad(set_to_none=True)
            return
        with_grad = [p for p in self.model.parameters() if p.grad is not None]
        max_norm = self.algo.grad_clip if self.algo.grad_clip > 0 else math.inf
        norm = float(torch.nn.utils.clip_grad_norm_(with_grad, max_norm).item())
        if not math.isfinite(norm):
            stats.skipped += 1
            self.optimizer.zero_grad(set_to_none=True)
            return
        self._warm_up()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        stats.steps += 1
        stats.losses.append(mb_loss)
        stats.grad_norms.append(norm)
