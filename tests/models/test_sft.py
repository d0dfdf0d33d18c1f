"""Warm start: demonstrations through the real tir-math env, the masked loss, a short training run."""

from __future__ import annotations

import math

import pytest
import torch

from tirl.config import SandboxConfig
from tirl.envs.registry import env_factory
from tirl.envs.tasks.math_gen import expert_solution, generate_tasks
from tirl.models.chat_format import SimpleChatFormat
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.sandbox import create_sandbox
from tirl.sft import SFTConfig, build_demonstrations, copy_curriculum, masked_lm_loss, pad_batch, train_sft
from tirl.types import Role, TerminationReason


def test_masked_lm_loss_matches_a_reference_loop() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)  # [B, T, V]
    ids = torch.randint(0, 7, (2, 5), generator=g)  # [B, T]
    mask = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 0, 1, 1]])
    total, count = 0.0, 0
    for b in range(2):
        for t in range(1, 5):
            if mask[b, t]:
                total -= float(torch.log_softmax(logits[b, t - 1], -1)[ids[b, t]])
                count += 1
    assert float(masked_lm_loss(logits, ids, mask)) == pytest.approx(total / count, rel=1e-6)


@pytest.fixture(scope="module")
def demos():  # type: ignore[no-untyped-def]
    import asyncio

    tok_chat = SimpleChatFormat(
        build_tiny_model(TinyModelSpec(hidden_size=16, layers=1, heads=1, kv_heads=1, intermediate_size=16))[1]
    )
    tasks = generate_tasks(12, difficulty=1, seed=7)

    async def make():  # type: ignore[no-untyped-def]
        sandbox = create_sandbox(SandboxConfig(), warn=False)
        try:
            factory = env_factory("tir-math", sandbox=sandbox, max_turns=4)
            return await build_demonstrations(tasks, expert_solution, tok_chat, factory)
        finally:
            await sandbox.close()

    return tasks, tok_chat, asyncio.run(make())


def test_demonstrations_run_through_the_real_env(demos) -> None:  # type: ignore[no-untyped-def]
    tasks, chat, trajs = demos
    assert len(trajs) == len(tasks)  # every expert solution is judged correct by the env
    by_id = {t.id: t for t in tasks}
    saw_fix = False
    for traj in trajs:
        traj.check_token_view()
        assert traj.termination is TerminationReason.ANSWERED and traj.reward == 1.0
        contents = [m.content for m in traj.assistant_messages]
        assert contents == expert_solution(by_id[traj.group])
        tool = [m.content for m in traj.messages if m.role is Role.TOOL]
        assert tool[-1] == f"```output\n{by_id[traj.group].answer}\n```"  # the real sandbox output
        saw_fix |= len(contents) == 3
        sampled = [i for i, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
        assert sampled == [i for c in contents for i in chat.assistant_ids(c)]
    assert saw_fix


def test_copy_curriculum_masks_only_the_copying_turn() -> None:
    chat = SimpleChatFormat(build_tiny_model(TinyModelSpec(hidden_size=16, layers=1, heads=1, kv_heads=1))[1])
    trajs = copy_curriculum(30, chat, seed=1)
    assert [t.token_ids for t in trajs] == [t.token_ids for t in copy_curriculum(30, chat, seed=1)]
    for traj in trajs:
        traj.check_token_view()
        text = chat.tokenizer.decode(traj.token_ids)
        user = text.split("<|user|>")[1].split("<|end|>")[0]
        reply = chat.assistant_text([i for i, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m])
        digits = "".join(c for c in reply if c.isdigit())
        assert digits and digits in "".join(c for c in user if c.isdigit())  # every digit is copied
        assert traj.loss_mask[-1] == 1 and traj.token_ids[-1] == chat.end_id


def test_a_short_training_run_lowers_the_loss(demos) -> None:  # type: ignore[no-untyped-def]
    _, _, trajs = demos
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the test machine is shared: one thread is faster than two under load
    model, tok = build_tiny_model(TinyModelSpec(hidden_size=32, layers=2, heads=2, kv_heads=2, intermediate_size=64))
    ids, attn, mask = pad_batch(trajs, tok.pad_token_id)
    with torch.no_grad():
        before = float(masked_lm_loss(model(input_ids=ids, attention_mask=attn).logits, ids, mask))
    assert before == pytest.approx(math.log(len(tok)), rel=0.2)
    cfg = SFTConfig(steps=12, batch_size=12, lr=1e-2, warmup_steps=2, log=lambda _: None)
    try:
        result = train_sft(model, trajs, cfg, pad_id=tok.pad_token_id)
    finally:
        torch.set_num_threads(threads)
    with torch.no_grad():
        after = float(masked_lm_loss(model(input_ids=ids, attention_mask=attn).logits, ids, mask))
    assert result.steps == 12 and after < before * 0.75
