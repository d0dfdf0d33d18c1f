"""Target log-probs and entropy from logits without a full-vocabulary log-softmax copy.

``target_logprobs(logits, targets, T)`` returns, at every position, the
log-prob of the target token under ``softmax(logits / T)`` (differentiable)
and the entropy of that distribution (detached). It gives the same values and
the same gradient as ``log_softmax(logits / T).gather(targets)`` (tested
against that plain reference), but:

- the forward pass walks the positions in chunks of at most
  ``chunk_elements`` logits, so the float32 temporaries (the tempered logits,
  their softmax for the entropy) exist for one chunk at a time;
- autograd keeps only the logits it was given and the per-position
  log-normaliser ``[B, T]``, not a ``[B, T, V]`` log-softmax; the backward
  pass recomputes the softmax chunk by chunk.

With a real vocabulary (V ~ 150k) a 2048-token micro-batch's log-softmax is
1.2 GB in float32, and the plain version holds it plus two more such
temporaries at the peak; this keeps one (the logits the model returned).

Temperature: ``T <= 0`` (greedy sampling) and ``T == 1`` leave the logits
as they are (:func:`logit_divisor`, the one rule of the trainer and of the tests' references).

Not covered: the logits themselves are still materialised by the model (the
language-model head is not fused in), and top-p renormalisation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

#: default chunk size: 16M float32 elements (64 MB) of tempered logits at a time
CHUNK_ELEMENTS = 1 << 24


def logit_divisor(temperature: float) -> float:
    """What the logits are divided by: ``temperature``, or 1 for greedy (<= 0) and 1."""
    return temperature if temperature > 0 and temperature != 1.0 else 1.0


def _spans(logits: Tensor, chunk_elements: int) -> list[tuple[int, int]]:
    """``[t0, t1)`` position ranges of at most ``chunk_elements`` logits each (at least one position)."""
    b, t, v = logits.shape
    step = max(1, chunk_elements // max(b * v, 1))
    return [(t0, min(t0 + step, t)) for t0 in range(0, t, step)]


def _tempered_chunk(logits: Tensor, t0: int, t1: int, div: float) -> Tensor:
    """Positions ``t0:t1`` of ``logits`` in float32, divided by ``div`` (a new tensor): [B, t1 - t0, V]."""
    x = logits[:, t0:t1]
    if div != 1.0:
        return x.float() / div
    return x.clone() if x.dtype == torch.float32 else x.float()  # a copy either way: callers write into it


class _TargetLogprobs(torch.autograd.Function):
    """Autograd function: (logits, targets) -> (target log-probs, entropy), softmax recomputed in backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, logits: Tensor, targets: Tensor, div: float, chunk: int, entropy: bool
    ) -> tuple[Tensor, Tensor]:
        b, t, _ = logits.shape
        lp = torch.empty((b, t), dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(lp)
        ent = torch.empty_like(lp) if entropy else torch.zeros_like(lp)
        for t0, t1 in _spans(logits, chunk):
            x = _tempered_chunk(logits, t0, t1, div)
            norm = torch.logsumexp(x, dim=-1)  # [B, c]
            lse[:, t0:t1] = norm
            lp[:, t0:t1] = x.gather(-1, targets[:, t0:t1].unsqueeze(-1)).squeeze(-1) - norm
            if entropy:
                x.sub_(norm.unsqueeze(-1))  # x: log-probs of the chunk
                ent[:, t0:t1] = -(x.exp() * x).sum(dim=-1)
            del x
        ctx.save_for_backward(logits, targets, lse)
        ctx.div = div
        ctx.chunk = chunk
        ctx.mark_non_differentiable(ent)
        return lp, ent

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_lp: Tensor, grad_ent: Tensor | None
    ) -> tuple[Tensor, None, None, None, None]:
        logits, targets, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        g = grad_lp.float()
        for t0, t1 in _spans(logits, ctx.chunk):
            x = _tempered_chunk(logits, t0, t1, ctx.div)
            # d lp / d x = onehot(target) - softmax(x); times the incoming gradient, over the divisor
            x.sub_(lse[:, t0:t1].unsqueeze(-1)).exp_().mul_(-g[:, t0:t1].unsqueeze(-1))
            x.scatter_add_(-1, targets[:, t0:t1].unsqueeze(-1), g[:, t0:t1].unsqueeze(-1))
            if ctx.div != 1.0:
                x.div_(ctx.div)
            grad[:, t0:t1] = x
            del x
        return grad, None, None, None, None


def target_logprobs(
    logits: Tensor,
    targets: Tensor,
    temperature: float = 1.0,
    chunk_elements: int = CHUNK_ELEMENTS,
    *,
    entropy: bool = True,
) -> tuple[Tensor, Tensor]:
    """Log-prob of each target under ``softmax(logits / temperature)`` and that distribution's entropy.

    ``entropy=False`` skips the entropy (zeros are returned in its place).

    logits: Tensor  # [B, T, V] (position t predicts targets[:, t]); any float dtype
    targets: Tensor  # [B, T] long
    returns: (logprobs  # [B, T] float32, differentiable; entropy  # [B, T] float32, detached)
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)}: want [B, T, V] and [B, T]")
    if chunk_elements <= 0:
        raise ValueError(f"chunk_elements={chunk_elements}: use > 0")
    lp, ent = _TargetLogprobs.apply(logits, targets, logit_divisor(temperature), chunk_elements, entropy)
    return lp, ent
