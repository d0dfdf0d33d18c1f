"""Loss masking end to end: a scripted agent in the real tir-math env, through the pipeline, into the update.

The generator is scripted (no model needed for the actions), everything else
is real: the tir-math env runs the code in a sandbox (the process backend, so
the test runs anywhere; the bwrap backend returns the same text), the
observation is rendered by the chat format, the pipeline strategy collects
the episodes, and the training batches are captured inside
:meth:`PolicyUpdater.update` exactly as the loss sees them. Tool-output
positions must have mask 0 and every sampled position mask 1, and the test
checks that the observation really is in the batch (it decodes it).
"""

from __future__ import annotations

import torch
from trainer_fakes import SMALL

import tirl.trainer.update as update_mod
from tirl.config import EnvConfig, RolloutConfig, load_config
from tirl.envs.base import Task
from tirl.envs.registry import env_factory
from tirl.inference.base import GenerationResult, SamplingParams
from tirl.models.chat_format import SimpleChatFormat
from tirl.models.tiny import build_tiny_model
from tirl.rollout.agent_loop import AgentLoop
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy
from tirl.sandbox import ProcessSandbox
from tirl.trainer.batching import TrainBatch
from tirl.types import Role

CODE = "```python\nprint(6 * 7 + 1000)\n```"  # the sandbox prints 1042: text no script or prompt contains
ANSWER = "\\boxed{1042}"


class ScriptedGenerator:
    """Returns the script's turns in order (per episode, keyed by prompt length) with log-prob -0.25."""

    def __init__(self, chat: SimpleChatFormat) -> None:
        self.chat = chat
        self.sampled: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        text = ANSWER if "1042" in self.chat.tokenizer.decode(prompt_ids) else CODE
        ids = self.chat.assistant_ids(text)
        self.sampled.append(ids)
        return GenerationResult(token_ids=ids, logprobs=[-0.25] * len(ids), finish_reason="eos")

    async def close(self) -> None:
        """Nothing to release."""


async def test_tool_output_positions_have_mask_zero_in_the_training_batch(monkeypatch) -> None:
    model, tok = build_tiny_model(SMALL, seed=0)
    chat = SimpleChatFormat(tok)
    gen = ScriptedGenerator(chat)
    sandbox = ProcessSandbox(warn=False, timeout_s=10)
    factory = env_factory("tir-math", config=EnvConfig(max_turns=3), sandbox=sandbox)
    runner = AgentLoop(gen, chat, params=SamplingParams(max_new_tokens=64), max_turns=3, max_total_tokens=400)
    strategy = make_strategy(RolloutConfig(strategy="pipeline"), factory, runner)
    tasks = [Task(id="t0", prompt="What is 6 * 7 + 1000?", answer="1042")]
    try:
        batch = await strategy.collect(RolloutRequest(tasks=tasks, group_size=2))
    finally:
        await strategy.close()
    trajs = batch.trajectories
    assert len(trajs) == 2 and all(t.reward == 1.0 for t in trajs), [t.error for t in trajs]
    for t in trajs:
        tool = [m for m in t.messages if m.role is Role.TOOL]
        assert tool and "1042" in (tool[0].content or ""), "the episode must contain a real observation"

    seen: list[TrainBatch] = []
    real_collate = update_mod.collate

    def spy(*args, **kwargs):
        out = real_collate(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(update_mod, "collate", spy)
    algo = load_config(None, ["algo.minibatches=1", "algo.micro_batch_tokens=0"]).algo
    up = update_mod.PolicyUpdater(
        model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4), algo=algo, pad_id=0
    )
    up.update(trajs, torch.tensor([1.0, -1.0]), seed=0)
    assert seen
    sampled_len = sum(len(ids) for ids in gen.sampled) // len(trajs)
    for b in seen:
        for r, i in enumerate(b.rows):
            t = trajs[i]
            ids = b.input_ids[r, : len(t.token_ids)].tolist()
            assert ids == t.token_ids
            mask = b.mask[r, : len(t.token_ids) - 1].tolist()  # target positions 1..L-1
            # sampled ids: mask 1, log-prob -0.25; everything else (prompt, template, tool output): mask 0
            assert sum(mask) == sampled_len
            obs_start = t.token_ids.index(gen.sampled[0][-1], t.prompt_len) + 1  # after the first turn's EOS
            second_turn = chat.assistant_ids(ANSWER)
            obs_end = len(t.token_ids) - len(second_turn)
            observation = tok.decode(t.token_ids[obs_start:obs_end])
            assert "1042" in observation, observation  # the batch holds the sandbox's output ...
            assert all(mask[p - 1] == 0.0 for p in range(obs_start, obs_end))  # ... with mask 0
            assert all(mask[p - 1] == 1.0 for p in range(obs_end, len(t.token_ids)))
            assert all(mask[p - 1] == 0.0 for p in range(1, t.prompt_len))
            gen_lp = b.gen_logprobs[r, : len(t.token_ids) - 1]
            assert all(g == -0.25 if m else g == 0.0 for g, m in zip(gen_lp.tolist(), mask, strict=True))
