"""Helpers for trainer tests: a tiny random Llama spec, and a scripted sequential rollout strategy.

The scripted strategy is a real :class:`RolloutStrategy` (the trainer only sees
that interface) whose assistant turns come from a script instead of a
generator, so tests control exactly which trajectories are void, failed or
correct. Token views are built with the built-in chat format; the generator
log-probs are the tiny model's own (optionally shifted, to exercise TIS).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from tirl.config import TirlConfig, load_config
from tirl.envs.base import Task
from tirl.models.chat_format import SimpleChatFormat
from tirl.models.tiny import TinyModelSpec
from tirl.rollout.base import RolloutBatch, RolloutRequest
from tirl.trainer.update import score_logprobs
from tirl.types import Group, Message, Role, TerminationReason, Trajectory

CORRECT = "```python\nprint(2+2)\n```"
ANSWER = "\\boxed{4}"
VOID = "let me double-check"


@dataclass
class Reply:
    """One scripted episode: assistant turns, reward, termination."""

    turns: list[str]
    reward: float = 0.0
    termination: TerminationReason = TerminationReason.ANSWERED


Script = Callable[[Task, int, int], Reply]  # (task, index in group, call number) -> reply


def default_script(task: Task, i: int, call: int) -> Reply:
    """Half correct, a quarter wrong, a quarter void."""
    if i % 4 == 3:
        return Reply([VOID], 0.0, TerminationReason.VOID)
    if i % 2 == 0:
        return Reply([CORRECT, ANSWER], 1.0)
    return Reply(["\\boxed{5}"], 0.0)


@dataclass
class ScriptedStrategy:
    model: torch.nn.Module
    chat: SimpleChatFormat
    script: Script = default_script
    logprob_shift: float = 0.0
    calls: int = 0
    requests: list[RolloutRequest] = field(default_factory=list)
    closed: bool = False

    def _episode(self, task: Task, i: int, request: RolloutRequest) -> Trajectory:
        reply = self.script(task, i, self.calls)
        msgs = [Message(role=Role.USER, content=task.prompt)]
        ids = self.chat.prompt_ids(msgs)
        mask = [0] * len(ids)
        for k, text in enumerate(reply.turns):
            turn = self.chat.assistant_ids(text)
            ids += turn
            mask += [1] * len(turn)
            msgs.append(Message(role=Role.ASSISTANT, content=text))
            if k + 1 < len(reply.turns):
                obs = [Message(role=Role.TOOL, content="4\n")]
                o = self.chat.observation_ids(obs, turn)
                ids += o
                mask += [0] * len(o)
                msgs.extend(obs)
        traj = Trajectory(
            id=f"{task.id}-c{self.calls}-{i}",
            group=task.id,
            messages=msgs,
            token_ids=ids,
            loss_mask=mask,
            logprobs=[0.0] * len(ids),
            prompt_len=len(self.chat.prompt_ids(msgs[:1])),
            reward=reply.reward,
            termination=reply.termination,
            policy_version=request.policy_version,
            correct=reply.reward >= 1.0,
        )
        return traj

    async def collect(self, request: RolloutRequest) -> RolloutBatch:
        self.calls += 1
        self.requests.append(request)
        groups = [
            Group(id=t.id, trajectories=[self._episode(t, i, request) for i in range(request.group_size)])
            for t in request.tasks
        ]
        trajs = [t for g in groups for t in g.trajectories]
        ok = [t for t in trajs if t.token_ids]
        if ok:
            lps = score_logprobs(self.model, ok, 0, 0)
            for t, lp in zip(ok, lps, strict=True):
                full = [0.0, *lp.tolist()]
                t.logprobs = [x + self.logprob_shift if m else 0.0 for x, m in zip(full, t.loss_mask, strict=True)]
        return RolloutBatch(groups=groups)

    async def close(self) -> None:
        self.closed = True


SMALL = TinyModelSpec(hidden_size=32, layers=1, heads=2, kv_heads=2, intermediate_size=64, max_positions=256)


def make_cfg(*overrides: str) -> TirlConfig:
    base = [
        "trainer.steps=2",
        "trainer.prompts_per_step=2",
        "algo.group_size=4",
        "algo.lr=1e-3",
        "trainer.checkpoint_every=1",
        "trainer.samples_per_step=2",
        "filter.mode=drop",  # these tests are about drop (the default before penalize)
    ]
    return load_config(None, [*base, *overrides])


def task_fn(step: int, n: int) -> list[Task]:
    return [Task(id=f"s{step}-t{k}", prompt=f"Compute {k}+{step}.", answer="4") for k in range(n)]
