"""Where a step's spikes sit: the void rows' share of its tokens, low-probability tokens, ratio outliers and gradient.

The seed's chain is out-of-distribution tool output -> low-probability tokens -> importance-ratio and
gradient spikes -> collapse, with void turns as the visible sign. Whether a run has it is a question of
attribution, not of totals: what share of the spikes sits in void rows, against their share of the tokens.
Every update logs (one prefix, ``void/``; a share is None when the step has no such token at all, never 0):

* ``void/share_trajectories``: void rows / rows.
* ``void/share_tokens``: the void rows' share of the sampled tokens (the tokens the loss sees under ``off``).
* ``void/share_lowprob_tokens``: of the sampled tokens whose *generator* log-prob is below
  :data:`LOWPROB_LOGPROB` (-5), the share in void rows.
* ``void/share_ratio_outliers``: of the sampled tokens whose PPO ratio exceeds :data:`RATIO_OUTLIER` (2), the
  share in void rows; ``void/share_ratio_dual_clip``: the same above ``algo.dual_clip`` (None with no dual clip).
* ``void/share_grad_norm``: the void rows' share of the policy-gradient *weight*
  ``sum |dL/dlogp_t|`` (:func:`grad_weights`: ``|A| * r * tis`` on the tokens whose PPO branch passes a
  gradient, divided by the row's token count under ``seq_mean``). It is the loss-gradient share, not the share
  of the parameter-gradient norm: per-row parameter norms need one backward per row, and on the main job's
  model 8 rows of 400 tokens took 3.6x the batched forward+backward that way (docs/training.md); this costs a
  few elementwise operations. The KL term is not attributed.
* ``void/min_logprob_void`` / ``void/min_logprob_valid``: the lowest generator log-prob of a sampled token in
  void / valid rows (None when the step has no such row).

What "ratio" means: the PPO ratio ``exp(logp - old_logp)`` a row has at the mini-batch it is drawn into (1
exactly in the update's first mini-batch; a real measurement from the second on), counted once per epoch. Rows
in the loss (``off``, ``roc``, the valid rows of every mode) give it from the real update. Under ``mask`` a
void row sits in the batch with a zero loss mask, so its forward pass already gives the ratio. Under ``drop``
and ``penalize`` the void rows the filter took out (:class:`AttributionRows` ``withheld``) are drawn into the
mini-batches like the others, by their own shuffle (the trained rows' draw is unchanged), and scored without a
gradient at their mini-batch's weights: one pass at the update's start (their old log-probs) and one at their
mini-batch when it is not the first. Their advantage is the one they would have had under ``off`` (their
group's statistics with them in); the ``penalize`` copies trained on the void turn are not attributed (the
whole withheld row is). So under every mode the metrics describe the step before the void rows leave.

Tokens are counted once per epoch they are drawn into (shares are unchanged by that). Under ``--nproc N`` the
metrics are rank 0's share of every mini-batch (its rows and every N-th withheld row), a 1/N sample.

Not covered: steps without an update (``train/no_signal``, skipped steps) log no ``void/*`` keys; the
withheld rows of groups left out after resampling are not attributed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from tirl.algorithms.advantages import group_advantages
from tirl.algorithms.losses import LossConfig, ppo_clip_terms, tis_weights
from tirl.trainer.batching import split_minibatches
from tirl.types import Group, Trajectory

PREFIX = "void/"
LOWPROB_LOGPROB = -5.0  # a sampled token below this generator log-prob is "low-probability"
RATIO_OUTLIER = 2.0  # a PPO ratio above this is an outlier

#: the summed and the least fields of :class:`AttributionStats` (each is one count or weight, void then all)
SUMS = (
    "rows", "void_rows", "tokens", "void_tokens", "lowprob", "void_lowprob",
    "outliers", "void_outliers", "dual", "void_dual", "grad", "void_grad",
)  # fmt: skip
MINS = ("min_lp_void", "min_lp_valid")


@dataclass(slots=True)
class AttributionStats:
    """Counts and weights of one update, all rows and void rows, folded micro-batch by micro-batch."""

    rows: float = 0.0
    void_rows: float = 0.0
    tokens: float = 0.0
    void_tokens: float = 0.0
    lowprob: float = 0.0
    void_lowprob: float = 0.0
    outliers: float = 0.0
    void_outliers: float = 0.0
    dual: float = 0.0
    void_dual: float = 0.0
    grad: float = 0.0
    void_grad: float = 0.0
    min_lp_void: float = math.inf
    min_lp_valid: float = math.inf

    def add(
        self, void: Tensor, mask: Tensor, gen_lp: Tensor, ratio: Tensor, weight: Tensor, dual_clip: float | None
    ) -> None:
        """Fold in rows (read where ``mask`` is 1).

        void: Tensor  # [B] bool
        mask, gen_lp, ratio, weight: Tensor  # [B, T] (sampled-token mask, generator log-prob, PPO ratio,
        :func:`grad_weights`)
        """
        m = mask > 0
        v = void.to(torch.bool)[:, None].expand_as(m) & m
        dual_bound = math.inf if dual_clip is None else dual_clip
        hits = torch.stack([m, m & (gen_lp < LOWPROB_LOGPROB), m & (ratio > RATIO_OUTLIER), m & (ratio > dual_bound)])
        w = torch.where(m, weight, torch.zeros_like(weight)).double()
        inf = torch.full_like(gen_lp, math.inf)
        folded = torch.cat(
            [
                hits.flatten(1).sum(dim=1).double(),  # tokens, lowprob, outliers, dual
                (hits & v).flatten(1).sum(dim=1).double(),  # the same in void rows
                torch.stack([w.sum(), (w * v).sum()]),
                torch.stack([torch.where(v, gen_lp, inf).min(), torch.where(m & ~v, gen_lp, inf).min()]).double(),
            ]
        ).tolist()  # one read-back for the whole micro-batch
        self.rows += float(void.numel())
        self.void_rows += float(void.sum().item())
        for k, name in enumerate(("tokens", "lowprob", "outliers", "dual")):
            setattr(self, name, getattr(self, name) + folded[k])
            setattr(self, "void_" + name, getattr(self, "void_" + name) + folded[4 + k])
        self.grad += folded[8]
        self.void_grad += folded[9]
        self.min_lp_void = min(self.min_lp_void, folded[10])
        self.min_lp_valid = min(self.min_lp_valid, folded[11])

    def absorb(self, part: AttributionStats) -> None:
        """Fold in another micro-batch's statistics."""
        for k in SUMS:
            setattr(self, k, getattr(self, k) + getattr(part, k))
        for k in MINS:
            setattr(self, k, min(getattr(self, k), getattr(part, k)))

    def metrics(self) -> dict[str, float | None]:
        """The ``void/*`` metrics; {} when no row was attributed, None for a share with no such token."""
        if self.rows == 0:
            return {}

        def share(void: float, total: float) -> float | None:
            return void / total if total > 0 else None

        return {
            "void/share_trajectories": share(self.void_rows, self.rows),
            "void/share_tokens": share(self.void_tokens, self.tokens),
            "void/share_lowprob_tokens": share(self.void_lowprob, self.lowprob),
            "void/share_ratio_outliers": share(self.void_outliers, self.outliers),
            "void/share_ratio_dual_clip": share(self.void_dual, self.dual),
            "void/share_grad_norm": share(self.void_grad, self.grad),
            "void/min_logprob_void": self.min_lp_void if math.isfinite(self.min_lp_void) else None,
            "void/min_logprob_valid": self.min_lp_valid if math.isfinite(self.min_lp_valid) else None,
        }


def grad_weights(ratio: Tensor, advantages: Tensor, tis: Tensor, mask: Tensor, cfg: LossConfig) -> Tensor:
    """Each token's policy-gradient weight ``|dL/dlogp|`` up to the batch's common normaliser.

    ``|A * r * tis|`` where the PPO term passes a gradient (not clipped, not dual-clipped), 0 elsewhere; under
    ``seq_mean`` divided by the row's token count (the loss's own per-row weighting).

    ratio, tis, mask: Tensor  # [B, T]
    advantages: Tensor  # [B]
    returns: Tensor  # [B, T]
    """
    adv = advantages.to(ratio.dtype)[:, None].expand_as(ratio)
    _, clipped, dual = ppo_clip_terms(ratio, adv, cfg.clip_low, cfg.clip_high, cfg.dual_clip)
    w = (adv * ratio * tis).abs() * (~clipped & ~dual).to(ratio.dtype) * mask
    if cfg.loss_agg == "seq_mean":
        w = w / mask.sum(dim=1, keepdim=True).clamp(min=1)
    return w


def row_tensors(trajs: list[Trajectory], width: int) -> tuple[Tensor, Tensor, Tensor]:
    """Void flags, sampled-token mask and generator log-probs on target positions, whatever the loss weight.

    returns: (void: Tensor  # [B] bool, mask: Tensor  # [B, width], gen_lp: Tensor  # [B, width])
    """
    mask = torch.zeros((len(trajs), width))
    gen = torch.zeros((len(trajs), width))
    for r, t in enumerate(trajs):
        n = min(len(t.token_ids) - 1, width)
        if n > 0:
            mask[r, :n] = torch.tensor(t.loss_mask[1 : n + 1], dtype=torch.float32)
            gen[r, :n] = torch.tensor(t.logprobs[1 : n + 1], dtype=torch.float32)
    return torch.tensor([t.void for t in trajs], dtype=torch.bool), mask, gen


@dataclass(frozen=True, slots=True)
class AttributionRows:
    """Which rows an update attributes: its first ``attributed`` rows and the ``withheld`` void rows.

    ``attributed`` None: every row of the update (no penalty copies after them).
    """

    attributed: int | None = None
    withheld: list[Trajectory] = field(default_factory=list)  # void rows the filter took out (drop, penalize)
    withheld_advantages: Tensor | None = None  # [len(withheld)]: each one's advantage under ``off``


def withheld_rows(
    groups: list[Group], withheld: list[list[Trajectory]], trained: int, estimator: str, std_normalize: bool
) -> AttributionRows:
    """The :class:`AttributionRows` of a step: ``trained`` rows in the loss, and each group's withheld void rows.

    A withheld row's advantage is the one its group's statistics give it with every void row back in (``off``).
    """
    rows: list[Trajectory] = []
    advs: list[Tensor] = []
    for group, back in zip(groups, withheld, strict=True):
        if not back:
            continue
        everyone = [*group.trajectories, *back]
        rewards = torch.tensor([float(t.reward or 0.0) for t in everyone], dtype=torch.float32)
        adv = group_advantages(
            rewards, torch.zeros(len(everyone), dtype=torch.long), estimator=estimator, std_normalize=std_normalize
        )
        rows.extend(back)
        advs.append(adv[len(group.trajectories) :])
    return AttributionRows(trained, rows, torch.cat(advs) if advs else torch.zeros(0))


ScoreFn = Callable[[list[Trajectory]], list[Tensor]]  # no-grad log-probs at the current weights, each [L_i - 1]


class WithheldScorer:
    """Draws the withheld rows into an update's mini-batches and attributes each at its mini-batch's weights."""

    def __init__(self, rows: AttributionRows, plan: list[list[list[int]]], seed: int, world: int, score: ScoreFn):
        keep = [i for i in range(len(rows.withheld)) if i % world == 0]  # rank 0's share under --nproc N
        self.trajs = [rows.withheld[i] for i in keep]
        adv = rows.withheld_advantages if rows.withheld_advantages is not None else torch.zeros(len(rows.withheld))
        self.advantages = adv[keep] if keep else torch.zeros(0)
        rng = random.Random(seed * 31 + 7)  # its own draw: the trained rows' mini-batches do not change
        self.draw = [split_minibatches(len(self.trajs), max(1, len(epoch)), rng) for epoch in plan]
        self.score = score
        self.old = score(self.trajs) if self.trajs else []

    def attribute(self, epoch: int, k: int, cfg: LossConfig, tis_cap: float | None, into: AttributionStats) -> None:
        """Fold in the withheld rows drawn into mini-batch ``k`` of ``epoch`` (call before its optimiser step)."""
        parts = self.draw[epoch]
        rows = parts[k] if k < len(parts) else []
        if not rows:
            return
        trajs = [self.trajs[i] for i in rows]
        now = [self.old[i] for i in rows] if epoch == 0 and k == 0 else self.score(trajs)
        width = max(len(t.token_ids) for t in trajs) - 1
        void, mask, gen = row_tensors(trajs, width)
        old = _pad([self.old[i] for i in rows], width)
        ratio = torch.exp((_pad(now, width) - old).clamp(-20.0, 20.0))
        tis = tis_weights(old, gen, tis_cap)
        into.add(void, mask, gen, ratio, grad_weights(ratio, self.advantages[rows], tis, mask, cfg), cfg.dual_clip)


def _pad(rows: list[Tensor], width: int) -> Tensor:
    """1-D tensors right-padded with 0 to ``width``: Tensor  # [len(rows), width]."""
    out = torch.zeros((len(rows), width))
    for i, r in enumerate(rows):
        n = min(r.numel(), width)
        out[i, :n] = r[:n].float().cpu()
    return out
