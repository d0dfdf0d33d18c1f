"""Policy losses: PPO clip with clip-higher and dual clip, KL to a reference, TIS, aggregation.

All per-token tensors are aligned on *target* positions: ``logprobs[b, t]`` is
the log-prob of token ``t + 1`` of sequence ``b`` given tokens ``0..t``, and
``mask[b, t]`` is 1 exactly where that token was sampled by the policy.

With sampling temperature ``T`` != 1, every log-prob here is of
``softmax(logits / T)``, the distribution the sampler drew from, so the PPO
ratio and the TIS weight compare like with like.

Variants are tables of small functions (``AGGREGATIONS``, ``KL_ESTIMATORS``),
chosen by name from :class:`~tirl.config.AlgoConfig`, never if/elif chains.

The per-token PPO term (``A`` is the trajectory's advantage, ``r`` the
importance ratio ``exp(logp - old_logp)``)::

    l = max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))     # clip-higher when clip_high > clip_low
    l = min(l, -A * dual_clip)               if A < 0               # dual clip bounds the loss of a huge r

When the sampler's log-probs differ from the trainer's (another engine, or a
stale policy version), each token is re-weighted by the truncated importance
weight ``w = min(exp(old_logp - gen_logp), cap)``, detached (TIS).

Not covered: value-function losses (no critic), sequence-level importance
ratios (GSPO), and entropy bonuses (entropy is logged, not optimised).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

AggregateFn = Callable[[Tensor, Tensor], Tensor]
KLFn = Callable[[Tensor, Tensor], Tensor]


def token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean over every unmasked token of the batch (long sequences weigh more).

    values: Tensor  # [B, T]
    mask: Tensor  # [B, T] 0/1
    returns: Tensor  # []
    """
    return (values * mask).sum() / mask.sum().clamp(min=1)


def seq_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean over sequences of each sequence's token mean (every trajectory weighs the same).

    values: Tensor  # [B, T]
    mask: Tensor  # [B, T] 0/1
    returns: Tensor  # []
    """
    per_seq = (values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # [B]
    has_tokens = (mask.sum(dim=1) > 0).to(values.dtype)  # [B]
    return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1)


AGGREGATIONS: dict[str, AggregateFn] = {"token_mean": token_mean, "seq_mean": seq_mean}


KL_VALUE_CLAMP = 10.0  # verl's bound on the per-token k3 value (k3 reached 3.3e6 at a log-ratio of -15)


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k1 estimator of KL(pi || ref): ``logp - ref_logp`` (unbiased value, can be negative).

    Its gradient, ``grad logp``, has expectation 0 under pi: as a loss term it pulls nothing.

    logprobs, ref_logprobs: Tensor  # [B, T]
    returns: Tensor  # [B, T]
    """
    return logprobs - ref_logprobs


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k2 estimator: ``0.5 * (logp - ref_logp) ** 2`` (biased value, always >= 0).

    Its gradient ``(logp - ref_logp) * grad logp`` is, on samples of pi, an
    unbiased estimate of the gradient of KL(pi || ref).

    logprobs, ref_logprobs: Tensor  # [B, T]
    returns: Tensor  # [B, T]
    """
    return 0.5 * (logprobs - ref_logprobs).square()


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 estimator: ``exp(ref - logp) - (ref - logp) - 1``, clamped to at most 10 (verl's ``low_var_kl``).

    Unbiased, low-variance value (always >= 0), but its gradient is not the
    gradient of KL(pi || ref) (it estimates the gradient of the forward KL);
    use ``k3+`` for that. The clamp bounds the value where the policy has
    moved far from the reference (a log-ratio beyond about -12); there the
    term has no gradient.

    logprobs, ref_logprobs: Tensor  # [B, T]
    returns: Tensor  # [B, T]
    """
    log_r = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.exp(log_r) - log_r - 1.0).clamp(-KL_VALUE_CLAMP, KL_VALUE_CLAMP)


def kl_k3_plus(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``k3+`` (verl's name): the value of :func:`kl_k3`, the gradient of :func:`kl_k2` (straight-through).

    The logged KL is the low-variance k3 value, while the gradient is an
    unbiased estimate of the gradient of KL(pi || ref) on on-policy samples.

    logprobs, ref_logprobs: Tensor  # [B, T]
    returns: Tensor  # [B, T]
    """
    k2 = kl_k2(logprobs, ref_logprobs)
    return k2 - k2.detach() + kl_k3(logprobs, ref_logprobs).detach()


KL_ESTIMATORS: dict[str, KLFn] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3, "k3+": kl_k3_plus}


def tis_weights(old_logprobs: Tensor, gen_logprobs: Tensor, cap: float | None) -> Tensor:
    """Truncated importance weights ``min(exp(old - gen), cap)``, detached; all ones when ``cap`` is None.

    old_logprobs: Tensor  # [B, T] trainer log-probs before the update
    gen_logprobs: Tensor  # [B, T] log-probs reported by the generator when sampling
    returns: Tensor  # [B, T]
    """
    if cap is None:
        return torch.ones_like(old_logprobs)
    log_w = (old_logprobs - gen_logprobs).detach().clamp(max=20.0)
    return torch.exp(log_w).clamp(max=cap)


def ppo_clip_terms(
    ratio: Tensor,
    advantages: Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token PPO loss with clip-higher and dual clip.

    ratio: Tensor  # [B, T] exp(logp - old_logp)
    advantages: Tensor  # [B, T] (broadcast per trajectory by the caller)
    returns: (loss, clipped, dual_clipped), each Tensor  # [B, T]; the last two are bool
    """
    unclipped = -advantages * ratio
    clipped_loss = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped_loss)
    clipped = clipped_loss > unclipped
    if dual_clip is None:
        return loss, clipped, torch.zeros_like(clipped)
    bound = -advantages * dual_clip
    dual = (advantages < 0) & (loss > bound)
    return torch.where(dual, bound, loss), clipped, dual


@dataclass(frozen=True, slots=True)
class LossConfig:
    """The loss settings of :class:`~tirl.config.AlgoConfig`, in one place."""

    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    loss_agg: str = "token_mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"

    def __post_init__(self) -> None:
        if self.loss_agg not in AGGREGATIONS:
            raise ValueError(f"loss_agg {self.loss_agg!r} is not one of {', '.join(AGGREGATIONS)}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator {self.kl_estimator!r} is not one of {', '.join(KL_ESTIMATORS)}")


@dataclass(slots=True)
class LossOutput:
    """The differentiable loss and its detached diagnostics.

    ``kl``, ``clip_frac`` and ``dual_clip_frac`` are token means over the unmasked tokens whatever
    ``loss_agg`` is, so that a caller can weight them by token count and add micro-batches up (under
    ``seq_mean`` the KL that enters ``loss`` is the mean of per-sequence means; the logged one is not).
    """

    loss: Tensor  # [] differentiable
    pg_loss: Tensor  # [] aggregated by loss_agg, as in loss
    kl: Tensor  # [] token mean of the KL estimator; 0 when no reference
    clip_frac: Tensor  # []
    dual_clip_frac: Tensor  # []
    ratio: Tensor  # [B, T] detached importance ratio (read only where mask is 1)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    *,
    tis: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
) -> LossOutput:
    """The clipped policy-gradient loss of one mini-batch, aggregated by ``cfg.loss_agg``.

    logprobs: Tensor  # [B, T] current policy, requires grad
    old_logprobs: Tensor  # [B, T] trainer policy before this batch's first update (detached)
    advantages: Tensor  # [B] one per trajectory
    mask: Tensor  # [B, T] 1 on sampled tokens of kept trajectories
    tis: Tensor | None  # [B, T] truncated importance weights (detached), from :func:`tis_weights`
    ref_logprobs: Tensor | None  # [B, T] reference policy (for the KL term)
    """
    mask = mask.to(logprobs.dtype)
    agg = AGGREGATIONS[cfg.loss_agg]
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)  # [B, T]
    adv = advantages.detach().to(logprobs.dtype)[:, None].expand_as(logprobs)  # [B, T]
    per_token, clipped, dual = ppo_clip_terms(ratio, adv, cfg.clip_low, cfg.clip_high, cfg.dual_clip)
    if tis is not None:
        per_token = per_token * tis.detach()
    pg = agg(per_token, mask)
    kl = kl_mean = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    if ref_logprobs is not None and cfg.kl_coef > 0:
        per_token_kl = KL_ESTIMATORS[cfg.kl_estimator](logprobs, ref_logprobs.detach())  # [B, T]
        kl = agg(per_token_kl, mask)
        kl_mean = token_mean(per_token_kl.detach(), mask)  # the logged value: additive over micro-batches
    loss = pg + cfg.kl_coef * kl
    return LossOutput(
        loss=loss,
        pg_loss=pg.detach(),
        kl=kl_mean,
        clip_frac=token_mean(clipped.to(logprobs.dtype), mask).detach(),
        dual_clip_frac=token_mean(dual.to(logprobs.dtype), mask).detach(),
        ratio=ratio.detach(),
    )
