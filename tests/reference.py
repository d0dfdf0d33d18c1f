"""Plain reference computations that tests compare tirl's fast code against; nothing in ``src`` uses them.

Each is written the textbook way (a loop over positions, or the full-vocabulary log-softmax), so that a test
can check the chunked, fused or vectorised version in ``src`` against it. The log-prob temperature rule is
not restated here: it is :func:`tirl.trainer.logprobs.logit_divisor`, the one the trainer uses.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tirl.trainer.logprobs import logit_divisor


def logprobs_loop(logits: Tensor, targets: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    """For each position: the tempered log-softmax over the vocabulary, its target entry, and its entropy.

    logits: Tensor  # [B, T, V]
    targets: Tensor  # [B, T] long
    returns: (logprobs  # [B, T] differentiable, entropy  # [B, T])
    """
    b, t, _ = logits.shape
    div = logit_divisor(temperature)
    lp = torch.zeros(b, t)
    ent = torch.zeros(b, t)
    for i in range(b):
        for j in range(t):
            row = torch.log_softmax(logits[i, j].float() / div, dim=-1)
            lp[i, j] = row[targets[i, j]]
            ent[i, j] = -(row.exp() * row).sum()
    return lp, ent


def full_vocab_logprobs(logits: Tensor, targets: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    """The vectorised full-vocabulary version: one ``[B, T, V]`` log-softmax kept for autograd.

    logits: Tensor  # [B, T, V]
    targets: Tensor  # [B, T] long
    returns: (logprobs  # [B, T] differentiable, entropy  # [B, T] detached)
    """
    logp = torch.log_softmax(logits.float() / logit_divisor(temperature), dim=-1)  # [B, T, V]
    picked = torch.gather(logp, -1, targets.unsqueeze(-1)).squeeze(-1)  # [B, T]
    with torch.no_grad():
        ent = -(logp.exp() * logp).sum(dim=-1)
    return picked, ent


def penalty_term(r: float, penalty: float, clip_low: float, clip_high: float, dual_clip: float | None) -> float:
    """The PPO loss of one token at advantage ``-penalty`` and ratio ``r`` (the ``penalize`` remedy's term)."""
    clipped = min(max(r, 1.0 - clip_low), 1.0 + clip_high)
    term = penalty * max(r, clipped)
    if dual_clip is not None:
        term = min(term, penalty * dual_clip)
    return term
