"""The seed's regression test (seed 000): a garbage third turn never reaches advantage computation.

A trajectory whose third assistant turn has neither code nor an answer must be
detected as void and be absent from what the advantage function *receives*
(asserted on the function's arguments, not on a flag).
"""

from __future__ import annotations

import torch
from trainer_fakes import ANSWER, CORRECT, Reply, TerminationReason

import tirl.trainer.trainer as trainer_module
from tirl.filters.void_turn import judge_trajectory

GARBAGE = "ĠĠ的 the the )))) ]]]] ＜＜ lorem ipsum 我再确认一下"  # turn 3: no fence, no answer
VOID_REWARD = 0.625  # a reward no other trajectory has, so its presence would show in the rewards tensor


def script(task, i: int, call: int) -> Reply:
    if i == 1:
        return Reply([CORRECT, CORRECT, GARBAGE, ANSWER], VOID_REWARD, TerminationReason.ANSWERED)
    if i % 2 == 0:
        return Reply([CORRECT, ANSWER], 1.0)
    return Reply(["\\boxed{5}"], 0.0)


async def test_garbage_third_turn_is_absent_from_advantage_inputs(make_trainer, monkeypatch) -> None:
    trainer = make_trainer("trainer.steps=1", script=script)
    received: list[tuple[torch.Tensor, torch.Tensor]] = []
    real = trainer_module.group_advantages

    def spy(rewards: torch.Tensor, group_ids: torch.Tensor, **kw):
        received.append((rewards.clone(), group_ids.clone()))
        return real(rewards, group_ids, **kw)

    monkeypatch.setattr(trainer_module, "group_advantages", spy)
    updated: list[str] = []
    real_update = trainer.updater.update

    def update_spy(trajs, adv, *, seed, **kw):
        updated.extend(t.id for t in trajs)
        return real_update(trajs, adv, seed=seed, **kw)

    trainer.updater.update = update_spy
    col = await trainer.collect(1)
    garbage = [t for t in col.sampled if t.reward == VOID_REWARD]
    assert len(garbage) == 2  # one per group (prompts_per_step=2)
    for t in garbage:
        verdict = judge_trajectory(t)
        assert verdict.void and verdict.void_turns == (2,)  # the third assistant turn, counted from 0

    rows = await trainer.run()
    assert rows[0]["filter/void_trajectories"] == 2
    assert len(received) == 1
    rewards, group_ids = received[0]
    assert VOID_REWARD not in rewards.tolist()
    assert rewards.numel() == 6 and group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    # and the same trajectories are absent from the ratio / KL computation (the update)
    assert updated and not any(i.endswith("-1") for i in updated)


async def test_mask_mode_would_let_it_into_the_group_statistics(make_trainer, monkeypatch) -> None:
    """The comparison the seed argues about: SimpleTIR's masking keeps the void reward in the group mean."""
    trainer = make_trainer("trainer.steps=1", "filter.mode=mask", script=script)
    received: list[torch.Tensor] = []
    real = trainer_module.group_advantages

    def spy(rewards: torch.Tensor, group_ids: torch.Tensor, **kw):
        received.append(rewards.clone())
        return real(rewards, group_ids, **kw)

    monkeypatch.setattr(trainer_module, "group_advantages", spy)
    await trainer.run()
    assert VOID_REWARD in received[0].tolist()
    assert received[0].numel() == 8


def test_tool_text_does_not_shift_the_void_turn_index() -> None:
    from tirl.types import Message, Role, Trajectory

    msgs = [
        Message(Role.USER, "q"),
        Message(Role.ASSISTANT, CORRECT),
        Message(Role.TOOL, GARBAGE),
        Message(Role.ASSISTANT, CORRECT),
        Message(Role.TOOL, GARBAGE),
        Message(Role.ASSISTANT, GARBAGE),
    ]
    verdict = judge_trajectory(Trajectory(id="x", messages=msgs))
    assert verdict.void_turns == (2,)
