import math
import random

import pytest
import torch

from tirl.algorithms.advantages import ADVANTAGE_ESTIMATORS, group_advantages


def _reference(rewards: list[float], groups: list[int], estimator: str, std_normalize: bool, eps: float) -> list[float]:
    """Plain-Python loops: the definition, one trajectory at a time."""
    out = []
    for i, r in enumerate(rewards):
        members = [rewards[j] for j in range(len(rewards)) if groups[j] == groups[i]]
        n = len(members)
        if n < 2:
            out.append(0.0)
            continue
        mean = sum(members) / n
        if estimator == "rloo":
            others = [rewards[j] for j in range(len(rewards)) if groups[j] == groups[i] and j != i]
            out.append(r - sum(others) / len(others))
        else:
            std = math.sqrt(sum((m - mean) ** 2 for m in members) / (n - 1))
            out.append((r - mean) / (std + eps) if std_normalize else r - mean)
    return out


@pytest.mark.parametrize("estimator", sorted(ADVANTAGE_ESTIMATORS))
@pytest.mark.parametrize("std_normalize", [True, False])
def test_matches_reference_loop_on_ragged_groups(estimator: str, std_normalize: bool) -> None:
    rng = random.Random(0)
    for _ in range(20):
        sizes = [rng.randint(1, 6) for _ in range(rng.randint(1, 5))]
        groups = [g for g, n in enumerate(sizes) for _ in range(n)]
        rewards = [rng.choice([0.0, 1.0, 0.5, -1.0]) for _ in groups]
        got = group_advantages(
            torch.tensor(rewards), torch.tensor(groups), estimator=estimator, std_normalize=std_normalize
        )
        want = _reference(rewards, groups, estimator, std_normalize, 1e-6)
        assert got.tolist() == pytest.approx(want, abs=1e-5)


def test_grpo_known_values() -> None:
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([0, 0, 0, 0]))
    # mean 0.25, unbiased std 0.5
    assert adv.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-4)


def test_single_member_and_constant_groups_give_zero() -> None:
    adv = group_advantages(torch.tensor([1.0, 1.0, 1.0, 0.3]), torch.tensor([0, 0, 0, 1]))
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_weights_zero_advantage_but_stay_in_statistics() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0])
    ids = torch.tensor([0, 0, 0])
    full = group_advantages(rewards, ids)
    weighted = group_advantages(rewards, ids, weights=torch.tensor([1.0, 1.0, 0.0]))
    assert weighted[:2].tolist() == pytest.approx(full[:2].tolist())
    assert weighted[2].item() == 0.0


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="estimator 'ppo'"):
        group_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), estimator="ppo")
    with pytest.raises(ValueError, match="must be equal"):
        group_advantages(torch.zeros(2), torch.zeros(3, dtype=torch.long))
    assert group_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).numel() == 0


@pytest.mark.parametrize("estimator", sorted(ADVANTAGE_ESTIMATORS))
@pytest.mark.parametrize(
    "rewards",
    [
        [-1e30, 0.0, 0.0, 1.0],  # float32 statistics: the std overflowed to inf, every advantage was 0
        [3e38, 3e38, 0.0],  # float32 statistics: the sum overflowed to inf, every advantage was NaN
        [1e20, -1e20, 5.0, 2.5],
    ],
)
def test_large_finite_rewards_keep_their_signal(rewards: list[float], estimator: str) -> None:
    """Rewards a float32 holds (a reward function's ``-abs(pred - truth)`` of an answer the model wrote as 1e30)."""
    groups = [0] * len(rewards)
    got = group_advantages(torch.tensor(rewards), torch.tensor(groups), estimator=estimator)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    as_float32 = torch.tensor(rewards).tolist()  # the reference sees the rewards the function sees
    want = _reference(as_float32, groups, estimator, std_normalize=True, eps=1e-6)
    assert got.tolist() == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_nonfinite_reward_is_refused_naming_it(bad: float) -> None:
    """One NaN made the whole group's advantages NaN, and every optimiser step holding the group was skipped."""
    rewards = torch.tensor([1.0, 0.0, 1.0, bad, 0.0])
    with pytest.raises(ValueError, match=rf"^rewards\[3\] is {bad} \(1 of 5 rewards are not finite\) — a reward"):
        group_advantages(rewards, torch.tensor([0, 0, 1, 1, 1]))
