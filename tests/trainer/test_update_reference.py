"""One whole update against a plain loop: the ``train/*`` statistics of :class:`PolicyUpdater` from their definitions.

The loop scores each trajectory alone (no padding, no micro-batches) with the full-vocabulary reference of
:mod:`tests.reference`, reads position ``t``'s logits for token ``t + 1``, and keeps exactly the tokens whose
``loss_mask`` bit is 1 (the prompt, tool output and template ids are 0; a ``loss_weight`` 0 row has none). With the
learning rate at 0 every ratio is 1, so the loss per token is ``-A * tis``. Not covered here: ratios away from 1
(tests/algorithms/test_losses.py checks the clipped terms against a loop).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from tests.reference import logprobs_loop
from trainer_fakes import SMALL

from tirl.config import AlgoConfig
from tirl.models.tiny import build_tiny_model
from tirl.trainer.update import PolicyUpdater
from tirl.types import Trajectory

T = 0.7
CAP = 1.5


def _traj(i: int, n: int, runs: list[tuple[int, int]], weight: float = 1.0) -> Trajectory:
    """A trajectory whose sampled tokens are ``runs`` (two turns with tool output between, say)."""
    ids = [(i * 11 + 3 * k) % 90 + 7 for k in range(n)]
    mask = [1 if any(a <= k < b for a, b in runs) else 0 for k in range(n)]
    lps = [-0.05 * (k % 7) - 0.1 * i if m else 0.0 for k, m in enumerate(mask)]
    return Trajectory(id=str(i), messages=[], token_ids=ids, loss_mask=mask, logprobs=lps, loss_weight=weight)


def _plain(model: torch.nn.Module, t: Trajectory) -> tuple[list[float], list[float]]:
    """Log-prob and entropy of each sampled target of ``t`` (position t predicts token t + 1)."""
    ids = torch.tensor([t.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]
    lp, ent = logprobs_loop(logits, ids[:, 1:], T)
    keep = [k for k in range(len(t.token_ids) - 1) if t.loss_mask[k + 1] and t.loss_weight > 0]
    return [lp[0, k].item() for k in keep], [ent[0, k].item() for k in keep]


def test_update_statistics_equal_a_plain_loop() -> None:
    trajs = [
        _traj(0, 14, [(3, 7), (10, 14)]),
        _traj(1, 9, [(0, 9)]),  # id 0 marked sampled: no position predicts it, so it is no target
        _traj(2, 12, [(4, 12)], weight=0.0),  # filter.mode=mask: in the batch, not in the loss
        _traj(3, 20, [(5, 8), (12, 13), (16, 20)]),  # the last id sampled (an EOS) is a loss token
    ]
    adv = torch.tensor([0.8, -1.1, 0.5, -0.3])
    model, _ = build_tiny_model(SMALL, seed=5)
    ref, _ = build_tiny_model(SMALL, seed=6)
    algo = AlgoConfig(minibatches=1, micro_batch_tokens=24, tis_cap=CAP, kl_coef=0.1, kl_estimator="k1")
    algo = dataclasses.replace(algo, warmup_steps=0)  # a warm-up sets the optimiser's lr from algo.lr
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # weights stay: every ratio is 1
    plain = [(_plain(model, t), _plain(ref, t)[0]) for t in trajs]
    upd = PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0, ref_model=ref, temperature=T, workers=1)
    got = upd.update(trajs, adv, seed=0).metrics()

    loss = kl = ent_sum = tis_sum = gap = 0.0
    n = 0
    for t, a, ((lps, ents), ref_lps) in zip(trajs, adv.tolist(), plain, strict=True):
        gen = [g for k, g in enumerate(t.logprobs[1:]) if t.loss_mask[k + 1] and t.loss_weight > 0]
        for lp, e, r, g in zip(lps, ents, ref_lps, gen, strict=True):
            w = min(math.exp(lp - g), CAP)
            loss += -a * w
            kl += lp - r
            ent_sum += e
            tis_sum += w
            gap = max(gap, abs(lp - g))
            n += 1
    assert n == (4 + 4) + (9 - 1) + 0 + (3 + 1 + 4)
    assert got["train/loss_tokens"] == n
    assert got["train/loss"] == pytest.approx(loss / n + 0.1 * kl / n, rel=1e-4)
    assert got["train/kl"] == pytest.approx(kl / n, rel=1e-4, abs=1e-7)
    assert got["train/entropy"] == pytest.approx(ent_sum / n, rel=1e-5)
    assert got["train/tis_weight_mean"] == pytest.approx(tis_sum / n, rel=1e-5)
    assert got["train/gen_logprob_gap_max"] == pytest.approx(gap, rel=1e-5)
    assert got["train/is_ratio_min"] == pytest.approx(1.0, abs=1e-6) == got["train/is_ratio_max"]
    assert got["train/clip_frac"] == 0.0
