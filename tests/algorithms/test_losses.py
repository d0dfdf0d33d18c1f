import math
import random

import pytest
import torch

from tirl.algorithms.losses import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    LossConfig,
    policy_loss,
    tis_weights,
)
from tirl.trainer.logprobs import target_logprobs


def _ref_token_loss(
    lp: float, old: float, a: float, lo: float, hi: float, dual: float | None
) -> tuple[float, bool, bool]:
    """(loss, clipped, held by the dual clip) of one token."""
    r = math.exp(lp - old)
    unclipped = -a * r
    clipped = -a * min(max(r, 1 - lo), 1 + hi)
    loss = max(unclipped, clipped)
    held = dual is not None and a < 0 and loss > -a * dual
    if dual is not None and a < 0:
        loss = min(loss, -a * dual)
    return loss, clipped > unclipped, held


def _ref_kl(lp: float, ref: float, kind: str) -> float:
    """The value of each estimator, one token at a time (k3 and k3+ clamped to 10 as verl does)."""
    if kind == "k1":
        return lp - ref
    if kind == "k2":
        return 0.5 * (lp - ref) ** 2
    return min(math.exp(ref - lp) - (ref - lp) - 1, 10.0)


def _ref_kl_grad(lp: float, ref: float, kind: str) -> float:
    """d(estimator)/d(logp), by hand: k3+ takes k2's gradient; a clamped k3 has none."""
    if kind == "k1":
        return 1.0
    if kind in ("k2", "k3+"):
        return lp - ref
    if math.exp(ref - lp) - (ref - lp) - 1 > 10.0:
        return 0.0
    return 1.0 - math.exp(ref - lp)


def _reference(lp, old, adv, mask, cfg: LossConfig, tis=None, ref=None):
    """Plain loops over sequences and tokens."""
    per_seq: list[list[tuple[float, float, bool]]] = []
    for b in range(len(lp)):
        row = []
        for t in range(len(lp[b])):
            if not mask[b][t]:
                continue
            loss, clipped, _ = _ref_token_loss(lp[b][t], old[b][t], adv[b], cfg.clip_low, cfg.clip_high, cfg.dual_clip)
            if tis is not None:
                loss *= tis[b][t]
            kl = _ref_kl(lp[b][t], ref[b][t], cfg.kl_estimator) if ref is not None else 0.0
            row.append((loss, kl, clipped))
        per_seq.append(row)
    if cfg.loss_agg == "token_mean":
        flat = [x for row in per_seq for x in row]
        pg = sum(x[0] for x in flat) / len(flat)
        kl = sum(x[1] for x in flat) / len(flat)
    else:
        rows = [row for row in per_seq if row]
        pg = sum(sum(x[0] for x in row) / len(row) for row in rows) / len(rows)
        kl = sum(sum(x[1] for x in row) / len(row) for row in rows) / len(rows)
    flat = [x for row in per_seq for x in row]
    clip_frac = sum(x[2] for x in flat) / len(flat)
    return pg + cfg.kl_coef * kl, clip_frac


def _random_batch(rng: random.Random, b: int = 3, t: int = 5):
    lp = [[rng.uniform(-3, -0.1) for _ in range(t)] for _ in range(b)]
    old = [[x + rng.uniform(-0.6, 0.6) for x in row] for row in lp]
    adv = [rng.uniform(-2, 2) for _ in range(b)]
    mask = [[int(rng.random() < 0.7) for _ in range(t)] for _ in range(b)]
    mask[0][0] = 1
    mask[-1] = [0] * t  # a fully masked sequence must not count in seq_mean
    ref = [[x + rng.uniform(-0.5, 0.5) for x in row] for row in lp]
    tis = [[rng.uniform(0.5, 2.0) for _ in range(t)] for _ in range(b)]
    return lp, old, adv, mask, ref, tis


@pytest.mark.parametrize("agg", sorted(AGGREGATIONS))
@pytest.mark.parametrize("kl", sorted(KL_ESTIMATORS))
@pytest.mark.parametrize("dual", [None, 3.0])
@pytest.mark.parametrize("with_tis", [False, True])
def test_policy_loss_matches_reference_loop(agg: str, kl: str, dual: float | None, with_tis: bool) -> None:
    rng = random.Random(hash((agg, kl, dual, with_tis)) % 1000)
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, dual_clip=dual, loss_agg=agg, kl_coef=0.1, kl_estimator=kl)
    for _ in range(5):
        lp, old, adv, mask, ref, tis = _random_batch(rng)
        out = policy_loss(
            torch.tensor(lp, dtype=torch.float64),
            torch.tensor(old, dtype=torch.float64),
            torch.tensor(adv, dtype=torch.float64),
            torch.tensor(mask),
            cfg,
            tis=torch.tensor(tis, dtype=torch.float64) if with_tis else None,
            ref_logprobs=torch.tensor(ref, dtype=torch.float64),
        )
        want_loss, want_clip = _reference(lp, old, adv, mask, cfg, tis if with_tis else None, ref)
        assert out.loss.item() == pytest.approx(want_loss, rel=1e-9, abs=1e-12)
        assert out.clip_frac.item() == pytest.approx(want_clip)
        sampled = [(b, t) for b in range(len(lp)) for t in range(len(lp[b])) if mask[b][t]]
        # the logged diagnostics are token means whatever the aggregation (the loss itself uses cfg.loss_agg)
        want_kl = sum(_ref_kl(lp[b][t], ref[b][t], kl) for b, t in sampled) / len(sampled)
        assert out.kl.item() == pytest.approx(want_kl, rel=1e-9, abs=1e-12)
        held = [_ref_token_loss(lp[b][t], old[b][t], adv[b], 0.2, 0.28, dual)[2] for b, t in sampled]
        assert out.dual_clip_frac.item() == pytest.approx(sum(held) / len(sampled))


def test_clip_higher_is_asymmetric() -> None:
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, dual_clip=None)
    old = torch.zeros(1, 1)
    pos = torch.ones(1)
    # ratio 1.25 with positive advantage: inside clip-high (0.28) so not clipped
    out = policy_loss(torch.tensor([[math.log(1.25)]]), old, pos, torch.ones(1, 1), cfg)
    assert out.clip_frac.item() == 0.0
    # ratio 0.75 with negative advantage: outside clip-low (0.2), clipped
    out = policy_loss(torch.tensor([[math.log(0.75)]]), old, -pos, torch.ones(1, 1), cfg)
    assert out.clip_frac.item() == 1.0
    assert out.loss.item() == pytest.approx(0.8)


def test_dual_clip_bounds_negative_advantage_loss() -> None:
    lp = torch.tensor([[math.log(10.0)]], requires_grad=True)
    out = policy_loss(lp, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1), LossConfig(dual_clip=3.0))
    assert out.loss.item() == pytest.approx(3.0)
    assert out.dual_clip_frac.item() == 1.0
    out.loss.backward()
    assert lp.grad is not None and lp.grad.abs().item() == 0.0  # bounded: no gradient through the huge ratio


def test_gradient_at_ratio_one_is_minus_advantage_over_tokens() -> None:
    lp = torch.tensor([[-1.0, -2.0], [-0.5, -0.7]], requires_grad=True)
    out = policy_loss(lp, lp.detach().clone(), torch.tensor([1.0, -2.0]), torch.ones(2, 2), LossConfig())
    out.loss.backward()
    assert lp.grad is not None
    assert lp.grad.flatten().tolist() == pytest.approx([-0.25, -0.25, 0.5, 0.5])


def test_tis_weights_truncated_and_detached() -> None:
    old = torch.tensor([[0.0, -1.0, -5.0]], requires_grad=True)
    gen = torch.tensor([[0.0, 0.0, -1.0]])
    w = tis_weights(old, gen, cap=2.0)
    want = [min(math.exp(o - g), 2.0) for o, g in zip([0.0, -1.0, -5.0], [0.0, 0.0, -1.0], strict=True)]
    assert w.tolist()[0] == pytest.approx(want)
    assert not w.requires_grad
    assert tis_weights(old, gen, cap=None).tolist() == [[1.0, 1.0, 1.0]]
    assert tis_weights(torch.tensor([[10.0]]), torch.tensor([[0.0]]), cap=2.0).item() == 2.0


@pytest.mark.parametrize("kind", sorted(KL_ESTIMATORS))
def test_kl_estimators_value_and_gradient_match_loops(kind: str) -> None:
    rng = random.Random(7)
    lp_vals = [rng.uniform(-4, -0.05) for _ in range(40)] + [-15.0, -0.01]
    ref_vals = [x + rng.uniform(-3, 3) for x in lp_vals[:-2]] + [0.0, -15.0]  # the last two hit the clamp
    lp = torch.tensor(lp_vals, dtype=torch.float64, requires_grad=True)
    out = KL_ESTIMATORS[kind](lp, torch.tensor(ref_vals, dtype=torch.float64))
    out.sum().backward()
    assert lp.grad is not None
    for i, (a, r) in enumerate(zip(lp_vals, ref_vals, strict=True)):
        assert out[i].item() == pytest.approx(_ref_kl(a, r, kind), rel=1e-9, abs=1e-12)
        assert lp.grad[i].item() == pytest.approx(_ref_kl_grad(a, r, kind), rel=1e-9, abs=1e-12)


def test_k3_is_clamped_where_it_used_to_explode() -> None:
    """At a log-ratio of -15 the unclamped k3 was exp(15) - 16 = 3.3e6; verl bounds it at 10."""
    k3 = KL_ESTIMATORS["k3"](torch.tensor([0.0]), torch.tensor([15.0]))
    assert k3.item() == 10.0
    assert KL_ESTIMATORS["k3"](torch.tensor([-1.0]), torch.tensor([-1.5])).item() == pytest.approx(
        math.exp(-0.5) + 0.5 - 1
    )


def test_k3_plus_gradient_is_unbiased_for_reverse_kl() -> None:
    """Exact expectation over a categorical pi: E_pi[grad k3+] equals grad KL(pi || ref); E_pi[grad k3] does not."""
    torch.manual_seed(3)
    theta = torch.randn(6, dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.randn(6, dtype=torch.float64), dim=0)
    logp = torch.log_softmax(theta, dim=0)
    exact = torch.autograd.grad((logp.exp() * (logp - ref)).sum(), theta)[0]

    def expected_grad(kind: str) -> torch.Tensor:
        lp = torch.log_softmax(theta, dim=0)
        per_sample = KL_ESTIMATORS[kind](lp, ref)  # one "sampled token" per category
        p = lp.exp().detach()  # sampling weights, no gradient (the sample is drawn, not differentiated)
        return torch.autograd.grad((p * per_sample).sum(), theta)[0]

    assert torch.allclose(expected_grad("k3+"), exact, atol=1e-12)
    assert torch.allclose(expected_grad("k2"), exact, atol=1e-12)
    assert not torch.allclose(expected_grad("k3"), exact, atol=1e-3)
    assert expected_grad("k1").abs().max().item() == pytest.approx(0.0, abs=1e-12)


def test_logprobs_divide_by_temperature() -> None:
    """The trainer's log-prob of a token sampled at temperature 0.7 is the sampler's, computed by a loop."""
    from tirl.inference.hf import sample_tokens

    torch.manual_seed(1)
    logits = torch.randn(4, 9) * 3
    temps = torch.full((4,), 0.7)
    tokens, sampler_lp = sample_tokens(logits, temps, torch.ones(4), torch.rand(4))
    lp, ent = target_logprobs(logits[None], tokens[None], 0.7)
    assert torch.allclose(lp[0], sampler_lp, atol=1e-5)
    assert not torch.allclose(target_logprobs(logits[None], tokens[None], 1.0)[0][0], sampler_lp, atol=1e-2)
    for b in range(4):
        row = [x / 0.7 for x in logits[b].tolist()]
        z = math.log(sum(math.exp(x) for x in row))
        assert lp[0, b].item() == pytest.approx(row[int(tokens[b])] - z, abs=1e-5)
        assert ent[0, b].item() == pytest.approx(-sum(math.exp(x - z) * (x - z) for x in row), abs=1e-5)
    # greedy sampling (temperature 0) and 1 both leave the logits alone
    greedy, _ = target_logprobs(logits[None], tokens[None], 0.0)
    assert torch.equal(greedy, target_logprobs(logits[None], tokens[None], 1.0)[0])


def test_bad_names_rejected() -> None:
    with pytest.raises(ValueError, match="loss_agg"):
        LossConfig(loss_agg="sum")
    with pytest.raises(ValueError, match="kl_estimator"):
        LossConfig(kl_estimator="k4")
