"""`tirl serve --model DIR` with a `tirl model init` model: `tools` / `tool_choice` through the official client.

The random-weight model is first overfitted (a few seconds on CPU) on one tool conversation, so that greedy
sampling writes a real ``<tool_call>`` block and the test can check what the server parses out of it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tirl.models.toolcalls import PYTHON_TOOL

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from server_proc import serve

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "What is 6*7?"}]
CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'


def _overfit(src: Path, dst: Path) -> Path:
    """Teach the model one reply: the tool call above, after MESSAGES with the python tool."""
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src)
    prompt = tok.apply_chat_template(MESSAGES, tools=[PYTHON_TOOL], tokenize=False, add_generation_prompt=True)
    ids = tok.encode(prompt + CALL + "<|im_end|>", add_special_tokens=False)
    x = torch.tensor([ids])
    labels = x.clone()
    labels[0, : len(tok.encode(prompt, add_special_tokens=False))] = -100
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(300):
        loss = model(input_ids=x, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.01:
            break
    model.save_pretrained(dst)
    tok.save_pretrained(dst)
    return dst


@pytest.fixture(scope="module")
def server(qwen2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[openai.OpenAI, str]]:
    model_dir = _overfit(qwen2_dir, tmp_path_factory.mktemp("served") / "m")
    with serve(model_dir) as (url, name, _proc):
        yield openai.OpenAI(base_url=url, api_key="none", max_retries=0), name


def _ask(server: tuple[openai.OpenAI, str], messages: list[dict[str, Any]], **kw: Any) -> Any:
    client, name = server
    return client.chat.completions.create(
        model=name, messages=messages, tools=[PYTHON_TOOL], temperature=0, max_tokens=40, **kw
    )


def test_auto_returns_parsed_tool_calls(server: tuple[openai.OpenAI, str]) -> None:
    resp = _ask(server, MESSAGES, tool_choice="auto")
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "python" and json.loads(call.function.arguments) == {"code": "print(6*7)"}


def test_the_call_and_its_result_go_back_as_openai_clients_send_them(
    server: tuple[openai.OpenAI, str], qwen2_dir: Path
) -> None:
    first = _ask(server, MESSAGES).choices[0].message
    call = first.tool_calls[0]
    history = [
        *MESSAGES,
        first.model_dump(exclude_none=True),  # content null, arguments a JSON string
        {"role": "tool", "tool_call_id": call.id, "content": "42"},
    ]
    resp = _ask(server, history, extra_body={"return_token_ids": True})
    tok = AutoTokenizer.from_pretrained(qwen2_dir)
    expected = tok.apply_chat_template(history, tools=[PYTHON_TOOL], tokenize=False, add_generation_prompt=True)
    assert f'<tool_response id="{call.id}">\n42\n</tool_response>' in expected
    assert resp.prompt_token_ids == tok.encode(expected, add_special_tokens=False)  # type: ignore[attr-defined]


def test_named_tool_choice_forces_the_call_and_none_returns_text(server: tuple[openai.OpenAI, str]) -> None:
    forced = _ask(
        server,
        MESSAGES,
        tool_choice={"type": "function", "function": {"name": "python"}},
        extra_body={"return_token_ids": True},
    )
    assert forced.choices[0].message.tool_calls[0].function.name == "python"
    tok_ids = forced.prompt_token_ids  # type: ignore[attr-defined]
    auto = _ask(server, MESSAGES, extra_body={"return_token_ids": True})
    assert len(tok_ids) > len(auto.prompt_token_ids)  # type: ignore[attr-defined]  # the forced start is prompt
    text = _ask(server, MESSAGES, tool_choice="none").choices[0]
    assert text.message.tool_calls is None and text.message.content.startswith("<tool_call>")
    assert text.finish_reason == "stop"


def test_streamed_tool_calls_accumulate_to_the_same_message(server: tuple[openai.OpenAI, str]) -> None:
    client, name = server
    stream = client.chat.completions.create(
        model=name, messages=MESSAGES, tools=[PYTHON_TOOL], temperature=0, max_tokens=40, stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for d in choice.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += d.id or ""
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [("python", {"code": "print(6*7)"})]
    assert calls[0]["id"].startswith("call_")


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "python"}}])
def test_a_forced_call_cut_by_max_tokens_is_length_and_no_call(server: tuple[openai.OpenAI, str], choice: Any) -> None:
    """Before: ``content`` was the cut template text (``<tool_call>\\n{"name": "py``) with ``finish_reason: length``."""
    client, name = server
    kw: dict[str, Any] = {"model": name, "messages": MESSAGES, "tools": [PYTHON_TOOL], "tool_choice": choice,
                          "temperature": 0, "max_tokens": 4}  # fmt: skip
    cut = client.chat.completions.create(**kw).choices[0]
    assert cut.finish_reason == "length"
    assert cut.message.tool_calls is None and cut.message.content is None
    finishes, contents, calls = [], [], []
    for chunk in client.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            finishes.append(c.finish_reason)
            contents.append(c.delta.content or "")
            calls.extend(c.delta.tool_calls or [])
    assert finishes[-1] == "length" and "".join(contents) == "" and calls == []


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"tool_choice": {"type": "function", "function": {"name": "shell"}}}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0]"),
        ({"parallel_tool_calls": False}, "tools"),
    ],
)
def test_bad_tool_requests_are_400_naming_the_field(server: tuple[openai.OpenAI, str], kw: dict, param: str) -> None:
    client, name = server
    args: dict[str, Any] = {"model": name, "messages": MESSAGES, "tools": [PYTHON_TOOL], "max_tokens": 4, **kw}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**args)
    assert err.value.body["param"] == param  # type: ignore[index]


def test_a_model_without_tool_support_answers_tools_with_400() -> None:
    from starlette.testclient import TestClient

    from tirl.inference.server import ModelServer
    from tirl.models.loading import load_policy

    server = ModelServer(load_policy(), model_name="tiny")  # the built-in model: its template has no tools
    with TestClient(server.app()) as http:
        body = {"model": "tiny", "messages": MESSAGES, "tools": [PYTHON_TOOL], "max_tokens": 4}
        resp = http.post("/v1/chat/completions", json=body)
        plain = http.post("/v1/chat/completions", json={**body, "tools": None})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "tools"
    assert "no tool support" in resp.json()["error"]["message"]
    assert plain.status_code == 200  # the same model without tools is served as before
