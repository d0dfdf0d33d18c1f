"""Tool calls with the template of `tirl model init`: rendering, parsing, the void rule and exact token ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_chat_format import chatml_tokenizer
from transformers import AutoTokenizer

from tirl.envs.base import Task
from tirl.envs.tir_math import TirMathEnv
from tirl.models.chat_format import TemplateChatFormat
from tirl.models.loading import load_policy
from tirl.models.template import template_supports_tools
from tirl.models.toolcalls import PYTHON_TOOL, parse_tool_calls
from tirl.parsing import ActionKind, judge_message
from tirl.rollout.agent_loop import AgentLoop
from tirl.sandbox.base import Sandbox
from tirl.sft import ScriptedGenerator
from tirl.types import Message, Role, TerminationReason, ToolCall, Trajectory


def _call(name: str, args: Any, cid: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args}}
    if cid:
        out["id"] = cid
    return out


def _block(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _ids(tok: Any, messages: list[dict[str, Any]], *, gen: bool) -> list[int]:
    out = tok.apply_chat_template(messages, tools=[PYTHON_TOOL], tokenize=True, add_generation_prompt=gen)
    return list(out["input_ids"] if not isinstance(out, list) else out)


def test_openai_string_arguments_and_object_arguments_render_the_same(qwen2_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(qwen2_dir)
    args = {"code": "print('é', 6*7)"}
    user = {"role": "user", "content": "go"}
    string = json.dumps(args, ensure_ascii=False)  # what the template's tojson writes
    as_openai = [user, {"role": "assistant", "content": None, "tool_calls": [_call("python", string)]}]
    as_object = [user, {"role": "assistant", "content": "", "tool_calls": [_call("python", args)]}]
    flat = [user, {"role": "assistant", "content": "", "tool_calls": [{"name": "python", "arguments": args}]}]
    texts = {tok.apply_chat_template(m, tokenize=False) for m in (as_openai, as_object, flat)}
    assert len(texts) == 1
    text = texts.pop()
    assert '<tool_call>\n{"name": "python", "arguments": {"code": "print(\'é\', 6*7)"}}\n</tool_call>' in text
    # a string argument is inserted verbatim (json.dumps' default ASCII escapes stay: the same JSON value)
    escaped = [user, {"role": "assistant", "content": None, "tool_calls": [_call("python", json.dumps(args))]}]
    assert '"arguments": {"code": "print(\'\\u00e9\', 6*7)"}}' in tok.apply_chat_template(escaped, tokenize=False)
    # the tool message names its call; the tools are listed in the system turn
    tool_turn = [*as_openai, {"role": "tool", "tool_call_id": "call_9", "content": "42"}]
    rendered = tok.apply_chat_template(tool_turn, tools=[PYTHON_TOOL], tokenize=False)
    assert '<|im_start|>tool\n<tool_response id="call_9">\n42\n</tool_response><|im_end|>' in rendered
    assert rendered.startswith("<|im_start|>system\n# Tools") and '"name": "python"' in rendered


def test_parsed_turn_re_renders_to_the_sampled_text(qwen2_dir: Path) -> None:
    policy = load_policy(qwen2_dir)
    chat = policy.chat
    assert isinstance(chat, TemplateChatFormat) and chat.tool_support.ok and chat.tool_support.hermes
    for content, calls in [
        ("", [("python", {"code": "print(1)"})]),
        ("I will run it.", [("python", {"code": "x = 2\nprint(x)"}), ("python", {"code": "print(3)"})]),
    ]:
        text = "\n".join([content] if content else []) + ("\n" if content else "")
        text += "\n".join(_block(n, a) for n, a in calls)
        ids = chat.assistant_ids(text)
        msg = chat.assistant_message(ids, call_id_prefix="call_3")
        assert msg.content == content
        assert [(c.name, c.arguments, c.id) for c in msg.tool_calls] == [  # arguments: the object, as written
            (n, a, f"call_3_{k}") for k, (n, a) in enumerate(calls)
        ]
        assert judge_message(msg).kind is ActionKind.TOOL_CALL
        full = policy.tokenizer.apply_chat_template(
            [{"role": "user", "content": "q"}, msg.to_dict()], tokenize=False, add_generation_prompt=False
        )
        assert f"<|im_start|>assistant\n{text}<|im_end|>\n" in full  # re-renders to exactly the sampled text


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "python", "arguments": {code: 1}}\n</tool_call>',  # not JSON
        '<tool_call>\n{"name": "python", "arguments": "{\\"code\\": "}\n</tool_call>',  # a string that is not JSON
        '<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}',  # unclosed (cut by a limit)
        '<tool_call>\n{"arguments": {"code": "print(1)"}}\n</tool_call>',  # no name
        "<tool_call>\n[1, 2]\n</tool_call>",  # not an object
        '<tool_call>\n{"name": "python", "arguments": [1]}\n</tool_call>',  # arguments not an object
        '<tool_call>\n{"name": "python", "arguments": ' + "[" * 100_000 + "}\n</tool_call>",  # too deep to parse
    ],
)
def test_a_call_whose_arguments_are_not_json_is_not_an_action(text: str) -> None:
    parsed = parse_tool_calls(text)
    assert len(parsed.tool_calls) == 1
    msg = Message(role=Role.ASSISTANT, content=parsed.content, tool_calls=parsed.tool_calls)
    assert judge_message(msg).kind is ActionKind.VOID  # judged by the rule as today: nothing else acts
    with_code = Message(role=Role.ASSISTANT, content="```python\nprint(1)\n```", tool_calls=parsed.tool_calls)
    assert judge_message(with_code).kind is ActionKind.CODE


def test_arguments_too_deep_for_the_json_parser_are_not_an_action() -> None:
    deep = Message(role=Role.ASSISTANT, content="", tool_calls=(ToolCall("python", "[" * 100_000),))
    assert judge_message(deep).kind is ActionKind.VOID  # an OpenAI-shaped call straight from a file or a client


def test_a_lone_surrogate_escape_in_a_call_becomes_u_fffd_and_the_trajectory_can_be_written(tmp_path: Path) -> None:
    """``\\ud800`` in a sampled block (the policy's text) decodes to a lone surrogate; it becomes U+FFFD.

    Before, the call's arguments held the surrogate: ``Trajectory.to_json()`` could not be encoded as UTF-8,
    so the trainer's trajectory log raised UnicodeEncodeError and the run stopped. Escaped pairs stay the
    character they spell; the call is still an action.
    """
    from tirl.jsonl import read_trajectories

    body = '{"name": "bash\\udc00", "arguments": {"command": "echo \\ud800 \\ud83d\\ude00", "k": ["\\udfff"]}}'
    parsed = parse_tool_calls(f"<tool_call>\n{body}\n</tool_call>")
    msg = Message(role=Role.ASSISTANT, content=parsed.content, tool_calls=parsed.tool_calls)
    log = tmp_path / "trajectories.jsonl"
    with log.open("w", encoding="utf-8") as f:  # as the trainer's log opens it
        f.write(Trajectory(id="t", messages=[msg]).to_json() + "\n")
    ((_, back),) = list(read_trajectories(log))
    assert back.messages[0].tool_calls == parsed.tool_calls
    (call,) = parsed.tool_calls
    assert call.name == "bash\ufffd" and call.arguments == {"command": "echo \ufffd \U0001f600", "k": ["\ufffd"]}
    assert judge_message(msg).kind is ActionKind.TOOL_CALL


def test_a_template_without_tool_support_is_named() -> None:
    support = template_supports_tools(chatml_tokenizer())
    assert not support.ok
    assert support.missing == ["the tool definitions passed as tools=", "assistant tool_calls"]
    chat = TemplateChatFormat(chatml_tokenizer())
    with pytest.raises(Exception, match="does not render tool definitions"):
        chat.prompt_ids([Message(role=Role.USER, content="q")], tools=[PYTHON_TOOL])
    # a sampled "<tool_call>" is plain content there (the template has no such convention)
    assert chat.assistant_message(chat.assistant_ids(_block("python", {"code": "1"}))).tool_calls == ()


# A template in the structure Qwen2.5 uses (written for this test): tools in the system turn, every call's
# arguments through tojson, consecutive tool results grouped in one user turn of <tool_response> blocks.
GROUPED = (
    "{%- if tools -%}{{- '<|im_start|>system\\n' -}}"
    "{%- if messages[0]['role'] == 'system' -%}{{- messages[0]['content'] + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n<tools>' -}}{%- for t in tools -%}{{- '\\n' + (t | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools><|im_end|>\\n' -}}"
    "{%- elif messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'user' -%}{{- '<|im_start|>user\\n' + m['content'] + '<|im_end|>\\n' -}}"
    "{%- elif m['role'] == 'assistant' -%}{{- '<|im_start|>assistant' -}}"
    "{%- if m['content'] -%}{{- '\\n' + m['content'] -}}{%- endif -%}"
    "{%- for c in m['tool_calls'] or [] -%}{%- set f = c['function'] if c['function'] is defined else c -%}"
    "{{- '\\n<tool_call>\\n{\"name\": ' + (f['name'] | tojson) + ', \"arguments\": ' -}}"
    "{{- (f['arguments'] | tojson) + '}\\n</tool_call>' -}}"
    "{%- endfor -%}{{- '<|im_end|>\\n' -}}"
    "{%- elif m['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


@pytest.mark.parametrize("template", ["tirl", "grouped"])
async def test_episode_ids_equal_apply_chat_template_turn_by_turn(
    qwen2_dir: Path, model_sandbox: Sandbox, template: str
) -> None:
    """The ids tirl builds for a 3-turn tool episode against the template applied to the same messages.

    Legitimate differences, asserted: (1) every turn starts after the generation prompt
    ``<|im_start|>assistant\\n`` (tirl's prefix ids equal ``apply_chat_template(..., add_generation_prompt=True)``);
    (2) the template closes the last turn with ``<|im_end|>\\n``; the episode ends at the sampled ``<|im_end|>``,
    so tirl's ids lack that final ``\\n``. ``grouped`` (Qwen2.5's structure) renders two results of one turn
    in one user turn: tirl renders each observation whole, so that is the same ids too.
    """
    policy = load_policy(qwen2_dir)
    tok, chat = policy.tokenizer, policy.chat
    if template == "grouped":
        tok.chat_template = GROUPED
        chat = TemplateChatFormat(tok)
        assert chat.tool_support.ok and chat.tool_support.hermes
    turns = [
        "Let me compute.\n" + _block("python", {"code": "print(6*7)"}),
        _block("python", {"code": "print(40+2)"}) + "\n" + _block("python", {"code": "print(84//2)"}),
        "\\boxed{42}",
    ]
    loop = AgentLoop(ScriptedGenerator(chat, turns), chat, max_turns=4, max_total_tokens=4000, tools=(PYTHON_TOOL,))
    task = Task(id="t", prompt="What is 6*7?", answer="42")
    env = TirMathEnv(sandbox=model_sandbox, max_turns=4)
    traj = Trajectory(id=task.id, messages=[])
    await loop(env, task, await env.reset(task), traj)
    result = await env.evaluate()
    await env.close()
    assert traj.termination is TerminationReason.ANSWERED and result.reward == 1.0, traj.error
    assert [t.action for t in traj.turns] == ["tool_call", "tool_call", "answer"]
    tools = [m for m in traj.messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in tools] == ["call_0_0", "call_1_0", "call_1_1"]
    assert all("42" in (m.content or "") for m in tools)  # the env executed every call

    msgs = [m.to_dict() for m in traj.messages]
    starts = [i for i, m in enumerate(traj.messages) if m.role is Role.ASSISTANT]
    pos = 0
    for k, a in enumerate(starts):
        before = _ids(tok, msgs[:a], gen=True)  # the context the policy saw for turn k
        assert traj.token_ids[: len(before)] == before, f"turn {k}: context differs"
        pos = len(before)
        n = traj.turns[k].sampled_tokens
        through = _ids(tok, msgs[: a + 1], gen=False)  # the same turn as the template renders it
        assert traj.token_ids[pos : pos + n] == through[pos : pos + n], f"turn {k}: sampled ids differ"
        assert traj.loss_mask[pos : pos + n] == [1] * n and sum(traj.loss_mask[:pos]) == sum(
            t.sampled_tokens for t in traj.turns[:k]
        )
    full = _ids(tok, msgs, gen=False)
    assert traj.token_ids == full[:-1] and tok.decode(full[-1:]) == "\n"


def test_swe_lite_tools_parse_into_the_commands_it_runs(qwen2_dir: Path) -> None:
    from tirl.envs.swe_lite import SweLiteEnv
    from tirl.models.toolcalls import tools_for_env

    chat = load_policy(qwen2_dir).chat
    assert [t["function"]["name"] for t in tools_for_env("swe-lite")] == ["bash", "submit"]
    assert [t["function"]["name"] for t in tools_for_env("tir-math")] == ["python"]
    prompt = chat.prompt_ids([Message(role=Role.USER, content="fix it")], tools=list(tools_for_env("swe-lite")))
    assert '"name": "submit"' in chat.tokenizer.decode(prompt)
    text = _block("bash", {"command": "pytest -q"}) + "\n" + _block("submit", {})
    msg = chat.assistant_message(chat.assistant_ids(text))
    assert judge_message(msg).kind is ActionKind.TOOL_CALL
    assert SweLiteEnv._commands_from_calls(msg.tool_calls) == ([("bash", "pytest -q")], True)


def test_a_template_that_takes_arguments_only_as_a_mapping_supports_tools(qwen2_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(qwen2_dir)
    mapping_only = GROUPED.replace(
        "{{- (f['arguments'] | tojson) + '}\\n</tool_call>' -}}",
        "{%- for k, v in f['arguments'] | dictsort -%}{{- k + '=' + v -}}{%- endfor -%}{{- '}\\n</tool_call>' -}}",
    )
    assert mapping_only != GROUPED
    support = template_supports_tools(tok, mapping_only)  # a JSON-string argument raises in dictsort
    assert support.ok and support.hermes, support.missing


async def test_an_env_that_declares_its_own_tools_is_offered_those_not_the_default(
    qwen2_dir: Path, model_sandbox: Sandbox
) -> None:
    """``env.tools = true`` gives the loop the built-in python tool; an env with its own functions keeps them."""
    from tirl.models.toolcalls import function_tool

    add = function_tool("add", "Add two numbers.", a="first", b="second")

    class AddEnv(TirMathEnv):
        tools = (add,)

    chat = load_policy(qwen2_dir).chat
    loop = AgentLoop(
        ScriptedGenerator(chat, ["\\boxed{42}"]), chat, max_turns=2, max_total_tokens=4000, tools=(PYTHON_TOOL,)
    )
    env = AddEnv(sandbox=model_sandbox, max_turns=2)
    task = Task(id="t", prompt="What is 40+2?", answer="42")
    initial = await env.reset(task)
    traj = Trajectory(id=task.id, messages=[])
    await loop(env, task, initial, traj)
    await env.close()
    prompt = traj.token_ids[: traj.prompt_len]
    assert prompt == chat.prompt_ids(initial, tools=[add])
    assert prompt != chat.prompt_ids(initial, tools=[PYTHON_TOOL])
