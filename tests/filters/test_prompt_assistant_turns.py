"""A task file's few-shot assistant turns are prompt, not policy: the void rule and the penalty mask skip them.

A real episode: the tir-math env (process sandbox) starts from a task chat with an assistant demonstration that
has no action ("1+1 is 2."), the scripted policy writes its turns through :class:`AgentLoop`, and the filter
judges the result. The demonstration made every such trajectory void (every episode of the task dropped or
penalised), and under ``penalize`` its index masked the policy's first turn (correct code) as the void one.
The audit's reasons use the same indexes, and the trajectory file tirl writes carries ``prompt_messages`` so that
``tirl filter`` and ``tirl audit`` judge it as the trainer did.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli_contract.cli_run import assert_refused, run_cli

from tirl.algorithms.void_penalty import void_turn_mask
from tirl.config import EnvConfig
from tirl.diagnostics.audit import audit_file, audit_trajectories
from tirl.envs.base import Task
from tirl.envs.registry import env_factory
from tirl.filters import VoidTurnFilter
from tirl.filters.roc import tool_errors
from tirl.filters.stream import judge_file, reference_part
from tirl.inference.base import GenerationResult, SamplingParams
from tirl.models.chat_format import SimpleChatFormat
from tirl.models.tokenizer import build_char_tokenizer
from tirl.parsing import DEFAULT_RULES
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


async def test_filter_and_audit_judge_a_written_episode_as_the_trainer_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trajectory file tirl writes records ``prompt_messages``; ``tirl filter`` (its fast path and the reference
    reader) and ``tirl audit`` read it, so a demonstration without an action no longer makes the file's episodes
    void when the trainer judged them valid. A file without the field is judged as before (every assistant message:
    the demonstration is void); a value beyond the messages is one ``error:`` line naming the field."""
    chat = SimpleChatFormat(build_char_tokenizer())
    valid = await _episode([CODE, "\\boxed{42}"], chat, "valid")
    void = await _episode([CODE, "let me think again"], chat, "void")
    VoidTurnFilter("off").apply([Group("g", [valid, void])])
    assert (valid.void, void.void_turns) == (False, [2])  # the trainer's verdicts
    rows = [json.loads(t.to_json()) for t in (valid, void)]
    assert [r["prompt_messages"] for r in rows] == [len(FEW_SHOT)] * 2  # the task chat, as the env starts it
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def verdicts(source: Path) -> list[tuple[str, list[int]]]:
        out = run_cli(capsys, "filter", source, "--verdicts", tmp_path / "v.jsonl", "--json")
        assert out.code == 0, out.err
        lines = (tmp_path / "v.jsonl").read_text().splitlines()
        return [(v["id"], v["void_turns"]) for v in map(json.loads, lines)]

    assert verdicts(path) == [("valid", []), ("void", [2])]
    with judge_file(path, DEFAULT_RULES) as judged:
        assert judged.part.verdicts == reference_part(path, DEFAULT_RULES).verdicts  # fast path == reference
    audit = audit_file(path).to_dict()
    assert (audit["void"], audit["void_examples"], audit["first_void_turn"]) == (1, ["void"], {"2": 1})

    for row in rows:
        del row["prompt_messages"]
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert verdicts(old) == [("valid", [0]), ("void", [0, 2])]  # files without it: judged as before
    rows[0]["prompt_messages"] = 99
    old.write_text(json.dumps(rows[0]) + "\n")
    refused = run_cli(capsys, "filter", old, "--verdicts", tmp_path / "v.jsonl")
    assert_refused(refused, "old.jsonl:1", "'prompt_messages' is 99")
    assert_refused(run_cli(capsys, "audit", old), "old.jsonl:1", "prompt_messages")


def test_roc_and_the_audit_count_tool_errors_of_the_policy_only() -> None:
    """A demonstration's tool output that reports an error is in every trajectory of the task: RoC ranked a correct
    trajectory by it and the audit counted it as the policy's. Both count after ``prompt_messages`` now."""
    prompt = [
        Message(role=Role.USER, content="What is 1/0?"),
        Message(role=Role.ASSISTANT, content="```python\nprint(1/0)\n```"),
        Message(role=Role.TOOL, content="ZeroDivisionError: division by zero"),
        Message(role=Role.USER, content="What is 6 * 7?"),
    ]
    own = [Message(role=Role.ASSISTANT, content=CODE), Message(role=Role.TOOL, content="42"),
           Message(role=Role.ASSISTANT, content="\\boxed{42}")]  # fmt: skip
    traj = Trajectory(id="t", messages=[*prompt, *own], prompt_messages=len(prompt))
    assert tool_errors(traj) == 0
    read = Trajectory.from_dict(json.loads(traj.to_json()))
    assert tool_errors(read) == 0 and read.prompt_assistant_messages == 1
    assert audit_trajectories([read]).to_dict()["tool_errors"]["total"] == 0
    unknown = Trajectory(id="u", messages=[*prompt, *own])  # nothing tells where the prompt ends: as before
    assert tool_errors(unknown) == 1 and audit_trajectories([unknown]).to_dict()["tool_errors"]["total"] == 1


async def test_the_audit_and_turns_mean_count_the_policys_turns_only() -> None:
    """``tirl audit``'s ``turns`` (and ``rollout/turns_mean`` for an episode without turn records) counted the task
    chat's demonstration as a turn: 3 for an episode of 2. A file without ``prompt_messages`` counts every one."""
    from tirl.trainer.trainer import rollout_metrics

    chat = SimpleChatFormat(build_char_tokenizer())
    episode = await _episode([CODE, "\\boxed{42}"], chat, "valid")
    assert len(episode.turns) == 2 and len(episode.assistant_messages) == 3
    assert audit_trajectories([episode]).to_dict()["turns"]["mean"] == 2.0
    bare = Trajectory(id="bare", messages=episode.messages, prompt_messages=len(FEW_SHOT))  # no turn records
    assert rollout_metrics([bare])["rollout/turns_mean"] == 2.0
    assert audit_trajectories([bare]).to_dict()["turns"]["mean"] == 2.0
    unknown = Trajectory(id="unknown", messages=episode.messages)  # where the prompt ends is not known
    assert rollout_metrics([unknown])["rollout/turns_mean"] == 3.0 and unknown.policy_turns == 3
    assert episode.policy_turns == 2
