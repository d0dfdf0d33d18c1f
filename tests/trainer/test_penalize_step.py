"""A training step under ``filter.mode=penalize``: void trajectories stay out of the group statistics and
come back to the update only as their void turn's tokens, with advantage ``-filter.void_penalty``."""

from __future__ import annotations

import torch
from trainer_fakes import ANSWER, CORRECT, Reply, TerminationReason

import tirl.trainer.trainer as trainer_module
from tirl.algorithms.void_penalty import sampled_runs

GARBAGE = "ĠĠ the )))) ]]]] lorem"
VOID_REWARD = 0.625


def script(task, i: int, call: int) -> Reply:
    if i == 1:  # two correct code turns, then a void turn that ends the episode
        return Reply([CORRECT, CORRECT, GARBAGE], VOID_REWARD, TerminationReason.VOID)
    if i % 2 == 0:
        return Reply([CORRECT, ANSWER], 1.0)
    return Reply(["\\boxed{5}"], 0.0)


async def test_penalize_trains_only_the_void_turn_and_keeps_it_out_of_the_groups(make_trainer, monkeypatch) -> None:
    trainer = make_trainer("trainer.steps=1", "filter.mode=penalize", "filter.void_penalty=0.5", script=script)
    received: list[torch.Tensor] = []
    real = trainer_module.group_advantages

    def spy(rewards: torch.Tensor, group_ids: torch.Tensor, **kw):
        received.append(rewards.clone())
        return real(rewards, group_ids, **kw)

    monkeypatch.setattr(trainer_module, "group_advantages", spy)
    seen: list[tuple[list, torch.Tensor]] = []
    real_update = trainer.updater.update

    def update_spy(trajs, adv, *, seed, **kw):
        seen.append((list(trajs), adv.clone()))
        return real_update(trajs, adv, seed=seed, **kw)

    trainer.updater.update = update_spy
    rows = await trainer.run()
    assert VOID_REWARD not in received[0].tolist() and received[0].numel() == 6  # as drop: absent from mean/std
    trajs, adv = seen[0]
    void_rows = [(t, a) for t, a in zip(trajs, adv.tolist(), strict=True) if t.reward == VOID_REWARD]
    assert len(void_rows) == 2 and all(a == -0.5 for _, a in void_rows)
    valid_adv = [a for t, a in zip(trajs, adv.tolist(), strict=True) if t.reward != VOID_REWARD]
    assert len(valid_adv) == 6
    for t, _ in void_rows:
        runs = sampled_runs(t.loss_mask)
        assert len(runs) == 1  # only the void (third) turn carries loss
        assert runs[0][1] == len(t.token_ids)  # ... the last sampled run: not the two correct code turns
    assert rows[0]["filter/penalized_trajectories"] == 2
    assert rows[0]["train/optimizer_steps"] >= 1


async def test_zero_penalty_is_drop(make_trainer) -> None:
    trainer = make_trainer("trainer.steps=1", "filter.mode=penalize", "filter.void_penalty=0", script=script)
    rows = await trainer.run()
    assert "filter/penalized_trajectories" not in rows[0] or rows[0]["filter/penalized_trajectories"] is None
