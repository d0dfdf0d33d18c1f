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


def attribution_loop(
    rows: list[tuple[bool, float, list[tuple[int, float, float, float]]]],
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    seq_mean: bool = False,
) -> dict[str, float | None]:
    """The ``void/*`` attribution metrics token by token, written from their definitions.

    rows: one ``(void, advantage, tokens)`` per row; ``tokens``: ``(sampled, gen_logprob, ratio, tis)`` per
    target position. A token's gradient weight is ``|A * r * tis|`` when its PPO term passes a gradient (the
    clipped branch is not the larger one, and the dual clip does not hold it), divided by the row's sampled
    token count under ``seq_mean``.
    """
    count = {k: [0.0, 0.0] for k in ("rows", "tokens", "lowprob", "outliers", "dual", "grad")}  # [void, all]
    low = {True: None, False: None}  # type: dict[bool, float | None]

    def add(key: str, void: bool, amount: float) -> None:
        count[key][1] += amount
        if void:
            count[key][0] += amount

    for void, adv, tokens in rows:
        add("rows", void, 1.0)
        n_sampled = sum(1 for s, _, _, _ in tokens if s)
        for sampled, gen_lp, ratio, tis in tokens:
            if not sampled:
                continue
            add("tokens", void, 1.0)
            add("lowprob", void, 1.0 if gen_lp < -5.0 else 0.0)
            add("outliers", void, 1.0 if ratio > 2.0 else 0.0)
            add("dual", void, 1.0 if dual_clip is not None and ratio > dual_clip else 0.0)
            unclipped = -adv * ratio
            clipped = -adv * min(max(ratio, 1.0 - clip_low), 1.0 + clip_high)
            passes = not clipped > unclipped
            if dual_clip is not None and adv < 0 and max(unclipped, clipped) > -adv * dual_clip:
                passes = False
            weight = abs(adv * ratio * tis) if passes else 0.0
            add("grad", void, weight / max(n_sampled, 1) if seq_mean else weight)
            if low[void] is None or gen_lp < low[void]:  # type: ignore[operator]
                low[void] = gen_lp

    def share(key: str) -> float | None:
        v, total = count[key]
        return v / total if total > 0 else None

    return {
        "void/share_trajectories": share("rows"),
        "void/share_tokens": share("tokens"),
        "void/share_lowprob_tokens": share("lowprob"),
        "void/share_ratio_outliers": share("outliers"),
        "void/share_ratio_dual_clip": share("dual"),
        "void/share_grad_norm": share("grad"),
        "void/min_logprob_void": low[True],
        "void/min_logprob_valid": low[False],
    }
