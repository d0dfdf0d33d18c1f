"""The ``void/*`` attribution metrics (tirl.trainer.attribution) against a plain per-token loop.

Three levels: the tensor fold on hand-built rows (known void rows, the dual-clip threshold, the None cases);
the gradient weight against autograd's ``dL/dlogp``; and the real :class:`PolicyUpdater` on a tiny model
under ``off``, ``mask`` and ``drop`` (withheld rows), where the reference replays each mini-batch's weights
(recorded by a real AdamW subclass before each step) and runs the loop on the ratios they give.
"""

from __future__ import annotations

import copy
import math
import random

import pytest
import torch
from tests.reference import attribution_loop
from trainer_fakes import SMALL

from tirl.algorithms.losses import LossConfig, policy_loss
from tirl.config import AlgoConfig
from tirl.models.tiny import build_tiny_model
from tirl.trainer.attribution import AttributionRows, AttributionStats, grad_weights
from tirl.trainer.batching import split_minibatches
from tirl.trainer.update import PolicyUpdater, loss_config, score_logprobs
from tirl.types import Trajectory


def _close(fast: dict[str, float | None], ref: dict[str, float | None]) -> None:
    assert set(ref) <= set(fast), set(ref) - set(fast)
    for key, want in ref.items():
        got = fast[key]
        assert (got is None) == (want is None), (key, got, want)
        if want is not None:
            assert got == pytest.approx(want, rel=1e-5, abs=1e-7), key


def _hand_rows() -> tuple[list[bool], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """4 rows x 6 positions: rows 1 and 3 void; ratios hit 2 (not above), 2.5, 3 (not above) and 3.5."""
    void = [False, True, False, True]
    mask = torch.tensor(
        [[0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0]], dtype=torch.float32
    )
    gen = torch.tensor(
        [
            [-9.0, -0.5, -6.0, -1.0, 0.0, 0.0],  # the -9 is not sampled: never counted
            [0.0, -7.0, -0.2, -5.0, -5.5, -0.1],  # -5.0 is not below -5
            [0.0, 0.0, -0.3, -0.4, -0.9, 0.0],
            [0.0, -8.0, -0.7, 0.0, 0.0, 0.0],
        ]
    )
    ratio = torch.tensor(
        [
            [1.0, 1.1, 2.5, 0.7, 9.0, 1.0],  # the 9 is not sampled
            [1.0, 3.5, 2.0, 0.6, 1.0, 1.3],
            [1.0, 1.0, 0.9, 3.0, 1.2, 1.0],
            [1.0, 4.0, 0.5, 1.0, 1.0, 1.0],
        ]
    )
    tis = torch.tensor([[1.0, 0.9, 1.0, 2.0, 1.0, 1.0]] * 4)
    adv = torch.tensor([0.8, -1.2, -0.4, 0.6])
    return void, mask, gen, ratio, tis, adv


def _loop_rows(void, mask, gen, ratio, tis, adv) -> list:  # type: ignore[no-untyped-def]
    return [
        (void[b], float(adv[b]), [(bool(mask[b, t]), float(gen[b, t]), float(ratio[b, t]), float(tis[b, t]))
                                  for t in range(mask.shape[1])])
        for b in range(len(void))
    ]  # fmt: skip


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
@pytest.mark.parametrize("dual", [3.0, None])
def test_fold_equals_the_per_token_loop_on_hand_built_rows(agg: str, dual: float | None) -> None:
    void, mask, gen, ratio, tis, adv = _hand_rows()
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, dual_clip=dual, loss_agg=agg)
    stats = AttributionStats()
    stats.add(torch.tensor(void), mask, gen, ratio, grad_weights(ratio, adv, tis, mask, cfg), dual)
    ref = attribution_loop(_loop_rows(void, mask, gen, ratio, tis, adv), 0.2, 0.28, dual, agg == "seq_mean")
    _close(stats.metrics(), ref)
    m = stats.metrics()
    # the hand-counted values: 2 of 4 rows, 7 of 13 tokens; below -5: -6 (valid), -7, -5.5, -8 (void)
    assert m["void/share_trajectories"] == 0.5 and m["void/share_tokens"] == pytest.approx(7 / 13)
    assert m["void/share_lowprob_tokens"] == 0.75
    # ratio > 2: 2.5, 3.0 (valid), 3.5, 4 (void), 2.0 is not above; > 3: only 3.5 and 4 (3.0 is not above)
    assert m["void/share_ratio_outliers"] == 0.5
    assert m["void/share_ratio_dual_clip"] == (1.0 if dual else None)  # 3.5 and 4 only; no dual clip: None
    assert m["void/min_logprob_void"] == -8.0 and m["void/min_logprob_valid"] == -6.0


def test_shares_with_no_such_token_are_none_not_zero() -> None:
    _, mask, gen, ratio, tis, adv = _hand_rows()
    ratio = torch.ones_like(ratio)  # the first mini-batch: no outlier anywhere
    gen = gen.clamp(min=-1.0)  # no low-probability token
    stats = AttributionStats()
    valid_only = torch.tensor([False] * 4)
    cfg = LossConfig()
    stats.add(valid_only, mask, gen, ratio, grad_weights(ratio, adv, tis, mask, cfg), 3.0)
    m = stats.metrics()
    assert m["void/share_lowprob_tokens"] is None and m["void/share_ratio_outliers"] is None
    assert m["void/share_ratio_dual_clip"] is None and m["void/min_logprob_void"] is None
    assert m["void/share_tokens"] == 0.0 and m["void/share_grad_norm"] == 0.0  # tokens exist, none void
    assert AttributionStats().metrics() == {}  # nothing attributed: no keys at all


def test_swapping_void_and_valid_moves_every_share_to_its_complement() -> None:
    """The mutant "void and valid swapped" cannot pass: each share becomes 1 - share (none is 0.5 here)."""
    void, mask, gen, ratio, tis, adv = _hand_rows()
    cfg = LossConfig()
    w = grad_weights(ratio, adv, tis, mask, cfg)
    a, b = AttributionStats(), AttributionStats()
    a.add(torch.tensor(void), mask, gen, ratio, w, 3.0)
    b.add(~torch.tensor(void), mask, gen, ratio, w, 3.0)
    ma, mb = a.metrics(), b.metrics()
    for key in ("void/share_lowprob_tokens", "void/share_ratio_dual_clip", "void/share_grad_norm"):
        assert ma[key] != pytest.approx(0.5) and ma[key] == pytest.approx(1 - mb[key])  # type: ignore[operator]
    assert ma["void/min_logprob_void"] == mb["void/min_logprob_valid"]


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
def test_grad_weight_is_autograds_dl_dlogp(agg: str) -> None:
    """|dL/dlogp| from autograd, times the loss's normaliser, is the weight the share sums."""
    _, mask, _, ratio, tis, adv = _hand_rows()
    old = torch.zeros_like(ratio)
    lp = torch.log(ratio).clone().requires_grad_(True)  # so that exp(lp - old) is the hand-built ratio
    cfg = LossConfig(loss_agg=agg, dual_clip=3.0)
    policy_loss(lp, old, adv, mask, cfg, tis=tis).loss.backward()
    norm = mask.sum() if agg == "token_mean" else (mask.sum(dim=1) > 0).sum()
    assert lp.grad is not None
    torch.testing.assert_close(lp.grad.abs() * norm, grad_weights(ratio, adv, tis, mask, cfg), rtol=1e-5, atol=1e-7)
    assert (grad_weights(ratio, adv, tis, mask, cfg)[1, 1] == 0).item()  # A < 0, r = 3.5 > dual clip: held


# ------------------------------------------------------------------------------------------- the real update
def _traj(i: int, n: int, void: bool, weight: float = 1.0) -> Trajectory:
    ids = [(i * 13 + 5 * k) % 90 + 7 for k in range(n)]
    mask = [0] * 3 + [1] * (n - 3)
    lps = [0.0] * 3 + [(-6.5 if (i + k) % 5 == 0 else -0.3 * ((i + k) % 4 + 1)) for k in range(n - 3)]
    t = Trajectory(id=str(i), messages=[], token_ids=ids, loss_mask=mask, logprobs=lps, reward=float(i % 2))
    t.void, t.loss_weight = void, weight
    return t


VOID = [i % 3 == 1 for i in range(9)]
ADV = torch.tensor([(-1.0) ** i * (0.3 + 0.2 * i) for i in range(9)])


class RecordingAdamW(torch.optim.AdamW):
    """A real AdamW that keeps a copy of the model's weights before each step (the reference replays them)."""

    def __init__(self, model: torch.nn.Module, **kw: float) -> None:
        super().__init__(model.parameters(), **kw)
        self.model = model
        self.before: list[dict[str, torch.Tensor]] = []

    def step(self, closure=None):  # type: ignore[no-untyped-def, override]
        self.before.append(copy.deepcopy(self.model.state_dict()))
        return super().step(closure)


def _reference(trajs, adv, draws, snaps, model, algo):  # type: ignore[no-untyped-def]
    """The loop's metrics: each row's ratio at its mini-batch's weights against the pre-update log-probs."""
    old = score_logprobs(model, trajs, 0, 0)
    cfg = loss_config(algo)
    rows = []
    for k, part in enumerate(draws):
        model.load_state_dict(snaps[k])
        now = score_logprobs(model, [trajs[i] for i in part], 0, 0)
        for i, lp in zip(part, now, strict=True):
            t = trajs[i]
            tokens = []
            for p in range(len(t.token_ids) - 1):
                r = math.exp(max(-20.0, min(20.0, float(lp[p] - old[i][p]))))
                w = min(math.exp(float(old[i][p]) - t.logprobs[p + 1]), algo.tis_cap)
                tokens.append((bool(t.loss_mask[p + 1]), t.logprobs[p + 1], r, w))
            rows.append((t.void, float(adv[i]), tokens))
    return attribution_loop(rows, cfg.clip_low, cfg.clip_high, cfg.dual_clip)


def _updater(seed: int = 1) -> tuple[PolicyUpdater, RecordingAdamW, torch.nn.Module, AlgoConfig]:
    model, _ = build_tiny_model(SMALL, seed=seed)
    opt = RecordingAdamW(model, lr=0.05, weight_decay=0.0)  # big steps: ratios far from 1 in mini-batch 2
    algo = AlgoConfig(minibatches=2, epochs=1, warmup_steps=0, micro_batch_tokens=60, tis_cap=2.0)
    return PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0, workers=1), opt, model, algo


@pytest.mark.parametrize("mode", ["off", "mask"])
def test_update_attributes_its_rows_as_the_loop_does(mode: str) -> None:
    trajs = [_traj(i, 7 + (3 * i) % 8, VOID[i], 0.0 if mode == "mask" and VOID[i] else 1.0) for i in range(9)]
    up, opt, model, algo = _updater()
    start = copy.deepcopy(model.state_dict())
    stats = up.update(trajs, ADV, seed=4)
    up.close()
    assert stats.steps == 2 and len(opt.before) == 2
    draws = split_minibatches(len(trajs), 2, random.Random(4))
    model.load_state_dict(start)
    ref = _reference(trajs, ADV, draws, opt.before, model, algo)
    _close(stats.metrics(), ref)
    assert ref["void/share_ratio_outliers"] is not None, "the test needs ratio outliers to mean anything"
    assert ref["void/share_tokens"] not in (0.0, 1.0) and ref["void/min_logprob_void"] == -6.5


def test_withheld_rows_are_attributed_at_their_mini_batchs_weights() -> None:
    """``drop``: the void rows are not in the update, but scored where their own draw puts them."""
    everyone = [_traj(i, 7 + (3 * i) % 8, VOID[i]) for i in range(9)]
    kept = [i for i in range(9) if not VOID[i]]
    back = [i for i in range(9) if VOID[i]]
    trained = [everyone[i] for i in kept]
    up, opt, model, algo = _updater()
    start = copy.deepcopy(model.state_dict())
    rows = AttributionRows(attributed=len(trained), withheld=[everyone[i] for i in back], withheld_advantages=ADV[back])
    stats = up.update(trained, ADV[kept], seed=4, attribution=rows)
    up.close()
    assert stats.steps == 2
    model.load_state_dict(start)
    draws = [[kept[j] for j in part] for part in split_minibatches(len(kept), 2, random.Random(4))]
    for k, part in enumerate(split_minibatches(len(back), 2, random.Random(4 * 31 + 7))):
        draws[k] += [back[j] for j in part]
    ref = _reference(everyone, ADV, draws, opt.before, model, algo)
    _close(stats.metrics(), ref)
    assert ref["void/share_ratio_outliers"] is not None and 0 < ref["void/share_tokens"] < 1  # type: ignore[operator]


def test_penalty_copies_after_the_attributed_rows_are_left_out() -> None:
    trajs = [_traj(i, 9, False) for i in range(4)] + [_traj(9, 9, True)]  # the last row: a penalty copy
    up, _, _, _ = _updater()
    stats = up.update(trajs, torch.tensor([1.0, -1.0, 0.5, -0.5, -1.0]), seed=0, attribution=AttributionRows(4))
    up.close()
    m = stats.metrics()
    assert m["void/share_trajectories"] == 0.0 and m["void/min_logprob_void"] is None
