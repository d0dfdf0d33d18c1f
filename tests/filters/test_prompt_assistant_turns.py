"""A task file's few-shot assistant turns are prompt, not policy: the void rule and the penalty mask skip them.

A real episode: the tir-math env (process sandbox) starts from a task chat with an assistant demonstration that
has no action ("1+1 is 2."), the scripted policy writes its turns through :class:`AgentLoop`, and the filter
judges the result. The demonstration made every such trajectory void (every episode of the task dropped or
penalised), and under ``penalize`` its index masked the policy's first turn (correct code) as the void one.
The audit's reasons use the same indexes. Not covered: trajectories read from JSONL, which carry no turn
records (every assistant message is judged).
"""

from __future__ import annotations

from tirl.algorithms.void_penalty import void_turn_mask
from tirl.config import EnvConfig
from tirl.diagnostics.audit import audit_trajectories
from tirl.envs.base import Task
from tirl.envs.registry import env_factory
from tirl.filters import VoidTurnFilter
from tirl.inference.base import GenerationResult, SamplingParams
from tirl.models.chat_format import SimpleChatFormat
from tirl.models.tokenizer import build_char_tokenizer
from tirl.rollout.agent_loop import AgentLoop
from tirl.sandbox import ProcessSandbox
from tirl.types import Group, Message, Role, TerminationReason, Trajectory, TurnRecord

CODE = "```python\nprint(6 * 7)\n```"
FEW_SHOT = (
    Message(role=Role.USER, content="What is 1 + 1?"),
    Message(role=Role.ASSISTANT, content="1+1 is 2."),  # a demonstration without an action
    Message(role=Role.USER, content="What is 6 * 7? Put the answer in \\boxed{}."),
)


class Script:
    """Returns ``turns`` in order, log-prob -0.25 per id."""

    def __init__(self, chat: SimpleChatFormat, turns: list[str]) -> None:
        self.chat, self.turns = chat, list(turns)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        ids = self.chat.assistant_ids(self.turns.pop(0))
        return GenerationResult(token_ids=ids, logprobs=[-0.25] * len(ids), finish_reason="eos")

    async def close(self) -> None:
        """Nothing to release."""


async def _episode(turns: list[str], chat: SimpleChatFormat, tid: str) -> Trajectory:
    factory = env_factory("tir-math", config=EnvConfig(max_turns=3), sandbox=ProcessSandbox(warn=False, timeout_s=10))
    task = Task(id="t0", prompt="What is 6 * 7?", answer="42", messages=FEW_SHOT)
    env = factory(task)
    traj = Trajectory(id=tid, messages=[])
    try:
        runner = AgentLoop(Script(chat, turns), chat, params=SamplingParams(max_new_tokens=64), max_turns=3,
                           max_total_tokens=600)  # fmt: skip
        await runner(env, task, await env.reset(task), traj)
    finally:
        await env.close()
    return traj


async def test_prompt_assistant_turns_are_not_judged_and_not_masked() -> None:
    chat = SimpleChatFormat(build_char_tokenizer())
    valid = await _episode([CODE, "\\boxed{42}"], chat, "valid")
    void = await _episode([CODE, "let me think again"], chat, "void")
    assert [len(t.turns) for t in (valid, void)] == [2, 2] and len(valid.assistant_messages) == 3

    res = VoidTurnFilter("penalize").apply([Group("g", [valid, void])])
    assert not valid.void and valid.void_turns == []
    assert void.void and void.void_turns == [2]  # indexes count every assistant message, the prompt's too
    assert [t.id for t in res.groups[0].trajectories] == ["valid"] and [t.id for t in res.penalized] == ["void"]
    mask = void_turn_mask(void)
    sampled = [k for k, bit in enumerate(void.loss_mask) if bit]
    second = sampled[len(chat.assistant_ids(CODE)) :]  # the ids of the policy's second (void) turn
    assert [k for k, bit in enumerate(mask) if bit] == second


def test_the_audit_names_a_cut_policy_turn_after_a_demonstration_truncated() -> None:
    """``TurnRecord.index`` counts the policy's turns, ``void_turns`` every assistant message: the audit adds the
    prompt's demonstrations before comparing (it called the cut turn ``prose_only`` and the demonstration void)."""
    record = TurnRecord(index=0, action="void", sampled_tokens=64, observation_tokens=0, gen_s=0.0, env_s=0.0,
                        finish_reason="length")  # fmt: skip
    cut = Message(role=Role.ASSISTANT, content="Let me compute 6 times")
    traj = Trajectory(id="cut", messages=[*FEW_SHOT, cut], termination=TerminationReason.MAX_TURNS, turns=[record])
    assert audit_trajectories([traj]).to_dict()["void_reasons"] == {"truncated": {"turns": 1, "examples": ["cut"]}}
    assert traj.prompt_assistant_messages == 1
