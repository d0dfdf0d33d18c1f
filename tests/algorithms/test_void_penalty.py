"""The ``penalize`` remedy's loss term against a plain loop; its masks; its bounds."""

from __future__ import annotations

import math

import pytest
import torch
from tests.reference import penalty_term

from tirl.algorithms.losses import LossConfig, policy_loss
from tirl.algorithms.void_penalty import penalty_rows, sampled_runs, void_turn_mask
from tirl.types import Trajectory


def _traj(mask: list[int], void_turns: list[int]) -> Trajectory:
    t = Trajectory(id="v", messages=[], token_ids=list(range(len(mask))), loss_mask=list(mask))
    t.logprobs = [0.0] * len(mask)
    t.void, t.void_turns, t.loss_weight = True, list(void_turns), 0.0
    return t


def test_sampled_runs_and_void_turn_mask_pick_only_the_void_turn() -> None:
    mask = [0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1]
    assert sampled_runs(mask) == [(2, 4), (6, 7), (8, 11)]
    assert void_turn_mask(_traj(mask, [2])) == [0] * 8 + [1, 1, 1]
    assert void_turn_mask(_traj(mask, [1])) == [0] * 6 + [1] + [0] * 4
    assert void_turn_mask(_traj(mask, [7])) == [0] * 8 + [1, 1, 1]  # past the runs: the last one
    assert void_turn_mask(_traj(mask, [])) == [0] * len(mask)
    assert void_turn_mask(_traj([0, 0], [0])) == [0, 0]


def test_penalty_rows_copy_and_leave_the_originals_alone() -> None:
    t = _traj([0, 1, 1, 0, 1], [1])
    rows, adv = penalty_rows([t, _traj([0, 0, 0], [0])], 0.5)
    assert len(rows) == 1 and adv.tolist() == [-0.5]
    assert rows[0].loss_mask == [0, 0, 0, 0, 1] and rows[0].loss_weight == 1.0
    assert t.loss_mask == [0, 1, 1, 0, 1] and t.loss_weight == 0.0
    with pytest.raises(ValueError, match="penalty"):
        penalty_rows([t], -1.0)


@pytest.mark.parametrize("dual", [3.0, None])
def test_policy_loss_on_penalty_rows_is_the_penalty_term(dual: float | None) -> None:
    """What the trainer runs (policy_loss on the rows) equals the penalty term, token-mean over void tokens only."""
    mask_list = [0, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1]  # three turns; the last one is void
    t = _traj(mask_list, [2])
    rows, adv = penalty_rows([t], 1.0)
    mask = torch.tensor([rows[0].loss_mask[1:]], dtype=torch.float32)  # target-aligned
    g = torch.Generator().manual_seed(1)
    old = torch.randn(1, len(mask_list) - 1, generator=g)
    logp = (old + torch.randn(1, len(mask_list) - 1, generator=g)).requires_grad_(True)
    out = policy_loss(logp, old, adv, mask, LossConfig(dual_clip=dual))
    total, n = 0.0, 0
    for i in range(mask.shape[1]):
        if mask[0, i] > 0:
            r = math.exp(float(logp[0, i].detach() - old[0, i]))
            total += penalty_term(r, 1.0, 0.2, 0.28, dual)
            n += 1
    assert n == 3
    assert math.isclose(float(out.loss.detach()), total / n, rel_tol=1e-5)
    out.loss.backward()
    grad = logp.grad
    assert grad is not None
    assert torch.all(grad[0, mask[0] == 0] == 0)  # earlier, correct turns are not blamed


def test_the_push_is_down_and_stops_where_the_clips_say() -> None:
    """policy_loss at advantage -1 on ratios 0.5, 1, 1.5 and 5: flat below 1 - clip_low and above dual_clip."""
    ratio = torch.tensor([[0.5, 1.0, 1.5, 5.0]])
    logp = ratio.log().requires_grad_(True)
    out = policy_loss(logp, torch.zeros_like(ratio), torch.tensor([-1.0]), torch.ones_like(ratio), LossConfig())
    out.loss.backward()
    assert logp.grad is not None
    # d loss / d logp = r * d term / d r / 4 tokens: the term grows with r where it is not flat
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.25, 0.375, 0.0])
    want = sum(penalty_term(float(r), 1.0, 0.2, 0.28, 3.0) for r in ratio[0]) / 4
    assert float(out.loss) == pytest.approx(want)
