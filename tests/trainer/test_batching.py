import random

import pytest
import torch
from trainer_fakes import SMALL

from tirl.config import AlgoConfig
from tirl.models.tiny import build_tiny_model
from tirl.trainer.batching import collate, split_microbatches, split_minibatches
from tirl.trainer.update import PolicyUpdater
from tirl.types import Trajectory


def _traj(i: int, n: int, mask_from: int, weight: float = 1.0) -> Trajectory:
    ids = [(i * 7 + k) % 90 + 7 for k in range(n)]
    mask = [0] * mask_from + [1] * (n - mask_from)
    lps = [0.0] * mask_from + [-0.1 * (k + 1) for k in range(n - mask_from)]
    return Trajectory(id=str(i), messages=[], token_ids=ids, loss_mask=mask, logprobs=lps, loss_weight=weight)


def test_collate_aligns_targets_mask_and_logprobs_like_a_loop() -> None:
    trajs = [_traj(0, 5, 2), _traj(1, 8, 3), _traj(2, 3, 1, weight=0.0)]
    batch = collate(trajs, torch.tensor([1.0, -1.0, 0.5]), [0, 1, 2], pad_id=0)
    assert batch.input_ids.shape == (3, 8) and batch.targets.shape == (3, 7)
    for r, t in enumerate(trajs):
        for pos in range(7):
            if pos + 1 < len(t.token_ids):
                assert batch.targets[r, pos].item() == t.token_ids[pos + 1]
                want = t.loss_mask[pos + 1] if t.loss_weight > 0 else 0
                assert batch.mask[r, pos].item() == want
                assert batch.gen_logprobs[r, pos].item() == pytest.approx(t.logprobs[pos + 1])
            else:
                assert batch.mask[r, pos].item() == 0 and batch.attention_mask[r, pos + 1].item() == 0
    assert batch.advantages.tolist() == [1.0, -1.0, 0.5]


def test_minibatches_partition_and_microbatches_respect_the_budget() -> None:
    parts = split_minibatches(10, 3, random.Random(0))
    assert sorted(i for p in parts for i in p) == list(range(10)) and len(parts) == 3
    assert split_minibatches(2, 5, random.Random(0)) in ([[0], [1]], [[1], [0]])
    lengths = [5, 50, 7, 30, 8, 9]
    micro = split_microbatches(list(range(6)), lengths, max_tokens=60)
    assert sorted(i for m in micro for i in m) == list(range(6))
    for m in micro:
        assert len(m) == 1 or len(m) * max(lengths[i] for i in m) <= 60


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
def test_microbatch_accumulation_gives_the_whole_batch_gradient(agg: str, workers: int) -> None:
    # workers=2: micro-batches on two threads (tirl.trainer.parallel), gradients summed by the caller
    trajs = [_traj(i, 6 + 3 * i, 2) for i in range(5)]
    adv = torch.tensor([1.0, -0.5, 0.3, -1.2, 0.7])
    grads = []
    for budget in (0, 20 * workers):
        model, _ = build_tiny_model(SMALL, seed=3)
        algo = AlgoConfig(minibatches=1, micro_batch_tokens=budget, loss_agg=agg, lr=1e-3)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: keep weights, read the gradient
        upd = PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0, workers=workers if budget else 1)
        captured = {}
        real_step = opt.step

        def step(*a, _m=model, _c=captured, _r=real_step, **k):
            _c["g"] = torch.cat([p.grad.flatten() for p in _m.parameters() if p.grad is not None]).clone()
            return _r(*a, **k)

        opt.step = step
        stats = upd.update(trajs, adv, seed=0)
        assert stats.steps == 1
        grads.append(captured["g"])
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_old_logprobs_from_the_first_minibatch_match_the_scoring_pass() -> None:
    # with lr 0 the weights never move: every ratio must be exactly 1, whether a row's old log-probs came
    # from the no-grad scoring pass or from the first mini-batch's own forward (warm-up off: it would set the
    # optimiser's lr from algo.lr, and the weights would move a little)
    trajs = [_traj(i, 6 + 3 * i, 2) for i in range(6)]
    model, _ = build_tiny_model(SMALL, seed=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    algo = AlgoConfig(minibatches=3, epochs=2, micro_batch_tokens=25, warmup_steps=0)
    stats = PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0).update(
        trajs, torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0]), seed=1
    )
    assert stats.steps == 6
    assert stats.ratio_min == pytest.approx(1.0, abs=1e-5) and stats.ratio_max == pytest.approx(1.0, abs=1e-5)


def test_train_metrics_do_not_depend_on_the_micro_batch_split() -> None:
    """Every ``train/*`` statistic is a property of the mini-batch, not of how it is cut (``seq_mean``, KL on).

    ``train/kl`` was the ``seq_mean`` KL of each micro-batch weighted by its tokens, so it moved with
    ``algo.micro_batch_tokens`` (and with ``--nproc``); it is the token mean of the KL estimator.
    """
    trajs = [_traj(i, 6 + 3 * i, 2 + i % 3, weight=0.0 if i == 1 else 1.0) for i in range(6)]
    adv = torch.tensor([1.0, -0.5, 0.3, -1.2, 0.7, -0.2])
    rows = []
    for budget in (0, 20):
        model, _ = build_tiny_model(SMALL, seed=3)
        ref, _ = build_tiny_model(SMALL, seed=4)
        algo = AlgoConfig(minibatches=2, micro_batch_tokens=budget, loss_agg="seq_mean", kl_coef=0.5, lr=1e-2)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        upd = PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0, ref_model=ref, workers=1)
        rows.append(upd.update(trajs, adv, seed=0).metrics())
    one, cut = rows
    assert one["train/optimizer_steps"] == 2 and one["train/kl"] > 0
    for key, value in one.items():
        if key.startswith("train/") and isinstance(value, float):
            assert cut[key] == pytest.approx(value, rel=1e-4, abs=1e-7), key
