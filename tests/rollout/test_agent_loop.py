"""AgentLoop: token view, loss mask, termination reasons, timings — with a small fake env."""

from __future__ import annotations

import pytest
import torch
from tests.tiny_run import saved_two_layer_policy

from tirl.envs.base import EvalResult, StepResult, Task
from tirl.inference.base import GenerationResult, SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.models.chat_format import SimpleChatFormat
from tirl.models.loading import Policy
from tirl.models.tokenizer import build_char_tokenizer
from tirl.parsing import judge_message
from tirl.rollout.agent_loop import AgentLoop
from tirl.rollout.base import EpisodeRunner
from tirl.rollout.evaluation import evaluate_accuracy
from tirl.types import Message, Role, TerminationReason, Trajectory

TASK = Task(id="t0", prompt="Compute 2+3.", answer="5")


class FakeEnv:
    """Runs nothing: a code turn gets a fixed tool output, an answer ends the episode, 'boom' raises."""

    name = "fake"

    def __init__(self, max_turns: int = 10) -> None:
        self.max_turns = max_turns
        self.steps = 0
        self.answer: str | None = None
        self.closed = False

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        return [Message(role=Role.SYSTEM, content="Use python."), Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        self.steps += 1
        if "boom" in (action.content or ""):
            raise RuntimeError("sandbox exploded")
        verdict = judge_message(action)
        if verdict.answer is not None:
            self.answer = verdict.answer
            return StepResult([], terminated=True, reason=TerminationReason.ANSWERED)
        if verdict.is_void:
            return StepResult([], terminated=True, reason=TerminationReason.VOID)
        obs = [Message(role=Role.TOOL, content="```output\n5\n```")]
        if self.steps >= self.max_turns:
            return StepResult(obs, truncated=True, reason=TerminationReason.MAX_TURNS)
        return StepResult(obs)

    async def evaluate(self) -> EvalResult:
        return EvalResult(reward=float(self.answer == "5"), correct=self.answer == "5")

    async def close(self) -> None:
        self.closed = True


class Scripted:
    """Returns fixed turns; ``close`` says whether a turn ends with the EOS id; log-probs are -0.5."""

    def __init__(self, chat: SimpleChatFormat, turns: list[str], close: bool = True) -> None:
        self.chat, self.turns, self.close_turns = chat, list(turns), close
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        self.prompts.append(list(prompt_ids))
        ids = self.chat.assistant_ids(self.turns.pop(0))
        if not self.close_turns:
            ids = ids[:-1]
        ids = ids[: params.max_new_tokens]
        reason = "eos" if ids and ids[-1] in self.chat.eos_ids else "length"
        return GenerationResult(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason=reason, policy_version=3)

    async def close(self) -> None:
        pass


CODE = "```python\nprint(2+3)\n```"
ANSWER = "\\boxed{5}"


async def _run(loop: AgentLoop, env: FakeEnv | None = None) -> Trajectory:
    env = env or FakeEnv()
    traj = Trajectory(id="x", messages=[])
    initial = await env.reset(TASK)
    await loop(env, TASK, initial, traj)
    return traj


async def test_token_view_is_the_concatenation_of_prompt_turns_and_observations() -> None:
    chat = SimpleChatFormat(build_char_tokenizer())
    gen = Scripted(chat, [CODE, ANSWER])
    loop = AgentLoop(gen, chat)
    assert isinstance(loop, EpisodeRunner)
    traj = await _run(loop)
    traj.check_token_view()
    prompt = chat.prompt_ids(await FakeEnv().reset(TASK))
    turn1, turn2 = chat.assistant_ids(CODE), chat.assistant_ids(ANSWER)
    obs = chat.observation_ids([Message(role=Role.TOOL, content="```output\n5\n```")], turn1)
    assert traj.token_ids == prompt + turn1 + obs + turn2
    assert traj.loss_mask == [0] * len(prompt) + [1] * len(turn1) + [0] * len(obs) + [1] * len(turn2)
    assert traj.logprobs == [0.0] * len(prompt) + [-0.5] * len(turn1) + [0.0] * len(obs) + [-0.5] * len(turn2)
    assert traj.prompt_len == len(prompt)
    assert gen.prompts[1] == prompt + turn1 + obs  # the second turn saw the concatenated ids, no re-render
    assert traj.termination is TerminationReason.ANSWERED
    assert [m.role for m in traj.messages] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert [t.action for t in traj.turns] == ["code", "answer"]
    assert traj.turns[0].observation_tokens == len(obs) and traj.turns[0].sampled_tokens == len(turn1)
    assert all(t.gen_s >= 0 and t.env_s >= 0 for t in traj.turns)
    assert traj.policy_version == 3


async def test_turn_without_eos_gets_a_forced_close_with_mask_zero() -> None:
    chat = SimpleChatFormat(build_char_tokenizer())
    traj = await _run(AgentLoop(Scripted(chat, [CODE, ANSWER], close=False), chat))
    end = chat.end_id
    sampled = [i for i, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m == 1]
    assert end not in sampled
    first_turn_end = traj.prompt_len + len(chat.assistant_ids(CODE)) - 1
    assert traj.token_ids[first_turn_end] == end and traj.loss_mask[first_turn_end] == 0


async def test_max_turns_and_env_truncation() -> None:
    chat = SimpleChatFormat(build_char_tokenizer())
    traj = await _run(AgentLoop(Scripted(chat, [CODE] * 5), chat, max_turns=2))
    assert traj.termination is TerminationReason.MAX_TURNS and len(traj.turns) == 2
    traj = await _run(AgentLoop(Scripted(chat, [CODE] * 5), chat, max_turns=5), FakeEnv(max_turns=1))
    assert traj.termination is TerminationReason.MAX_TURNS and len(traj.turns) == 1


async def test_total_token_cap_ends_overlong() -> None:
    chat = SimpleChatFormat(build_char_tokenizer())
    prompt_len = len(chat.prompt_ids(await FakeEnv().reset(TASK)))
    loop = AgentLoop(Scripted(chat, [CODE] * 5), chat, max_total_tokens=prompt_len + 10)
    traj = await _run(loop)
    assert traj.termination is TerminationReason.OVERLONG
    assert len(traj.token_ids) <= prompt_len + 10
    traj.check_token_view()
    # room for a turn but not for its observation: overlong after the env ran
    loop = AgentLoop(Scripted(chat, [CODE] * 5), chat, max_total_tokens=prompt_len + len(chat.assistant_ids(CODE)) + 5)
    traj = await _run(loop)
    assert traj.termination is TerminationReason.OVERLONG and len(traj.turns) == 1


async def test_void_turn_and_env_exception() -> None:
    chat = SimpleChatFormat(build_char_tokenizer())
    traj = await _run(AgentLoop(Scripted(chat, ["let me think"]), chat))
    assert traj.termination is TerminationReason.VOID and traj.turns[0].action == "void"
    traj = await _run(AgentLoop(Scripted(chat, ["```python\nboom()\n```"]), chat))
    assert traj.termination is TerminationReason.ERROR and traj.failed
    assert traj.error is not None and "sandbox exploded" in traj.error and "RuntimeError" in traj.error
    traj.check_token_view()


class Exploding:
    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        raise ValueError("CUDA out of memory (pretend)")

    async def close(self) -> None:
        pass


async def test_generator_exception_is_an_error_with_its_message() -> None:
    chat = SimpleChatFormat(build_char_tokenizer())
    traj = await _run(AgentLoop(Exploding(), chat))
    assert traj.termination is TerminationReason.ERROR
    assert traj.error == "ValueError: CUDA out of memory (pretend)"


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    return saved_two_layer_policy(tmp_path_factory.mktemp("tiny"), seed=2)


async def test_trainer_scores_exactly_the_sampled_ids(policy: Policy) -> None:
    """One forward pass over the stored token ids reproduces the sampler's log-probs at mask-1 positions."""
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, seed=5)
    loop = AgentLoop(gen, policy.chat, params=SamplingParams(max_new_tokens=12), max_turns=3, max_total_tokens=200)
    report = await evaluate_accuracy(loop, lambda task: FakeEnv(), [TASK] * 4, concurrency=4)
    assert report.n == 4 and report.accuracy == sum(t.correct is True for t in report.trajectories) / 4
    assert sum(report.terminations.values()) == 4
    for traj in report.trajectories:
        traj.check_token_view()
        ids = torch.tensor([traj.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(policy.model(ids).logits[0].double(), dim=-1)  # [T, V]
        for i in range(1, len(traj.token_ids)):
            if traj.loss_mask[i]:
                assert float(logp[i - 1, traj.token_ids[i]]) == pytest.approx(traj.logprobs[i], abs=2e-4)
        assert traj.loss_mask[: traj.prompt_len] == [0] * traj.prompt_len
        assert sum(traj.loss_mask) == sum(t.sampled_tokens for t in traj.turns)
    await gen.close()


async def test_seeded_loop_samples_the_same_episodes_whatever_the_batching(policy: Policy) -> None:
    async def run(concurrency: int) -> list[list[int]]:
        gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, seed=concurrency)
        loop = AgentLoop(gen, policy.chat, params=SamplingParams(max_new_tokens=8), max_turns=2, seed=11)
        tasks = [Task(id=f"t{i}", prompt="Compute 2+3.", answer="5") for i in range(4)]
        report = await evaluate_accuracy(loop, lambda task: FakeEnv(), tasks, concurrency=concurrency)
        await gen.close()
        return [t.token_ids for t in report.trajectories]

    assert await run(1) == await run(4)
    assert AgentLoop(Exploding(), SimpleChatFormat(build_char_tokenizer())).turn_seed("a", 0) is None
