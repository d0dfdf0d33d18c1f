"""Hypothesis fuzzing of ``tirl serve`` request bodies: every body gets a 2xx or an OpenAI-shaped 4xx, never a 5xx.

The app is the real Starlette app of :class:`~tirl.inference.server.ModelServer`
over a real tiny model, driven in-process through Starlette's ``TestClient``
(the HTTP layer itself, uvicorn, is exercised by ``test_server_hostile.py``
with a real subprocess; in-process keeps hundreds of bodies within seconds).
Bodies are JSON objects with the fields the API reads, set to hostile values
(huge and non-finite numbers, wrong types, surrogates, deep nesting), then
optionally broken into bytes. ``max_tokens`` is always small or hostile so
that no example generates for long.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_proc import tiny_checkpoint
from starlette.testclient import TestClient

from tirl.inference.server import ModelServer
from tirl.models.loading import load_policy

FAST = settings(
    max_examples=int(os.environ.get("TIRL_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NAME = "tiny"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    policy = load_policy(str(tiny_checkpoint(tmp_path_factory.mktemp("fuzz") / "tiny")), threads=1)
    server = ModelServer(policy, model_name=NAME, max_arrival_wait_s=0.0, max_body_bytes=256 * 1024)
    with TestClient(server.app(), raise_server_exceptions=False) as c:
        yield c


hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**80, -1, 0, 10**4000, 1e-40, 1e-38, 1e308, -0.0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["\ud800", "user", ["user"], {"a": 1}, [], [[]], [1, 2, 3], ["a", 1]]),
)
small_tokens = st.one_of(st.integers(1, 4), hostile)
message = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "system", "assistant", "tool", "developer"]), hostile)},
    optional={"content": st.one_of(st.text(max_size=30), hostile), "name": hostile},
)
common = {
    "temperature": st.one_of(st.floats(0, 2), hostile),
    "top_p": st.one_of(st.floats(0.01, 1), hostile),
    "seed": hostile,
    "n": st.one_of(st.integers(1, 3), hostile),
    "stop": st.one_of(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=3), hostile),
    "stream": hostile,
    "logprobs": hostile,
    "top_logprobs": hostile,
    "best_of": hostile,
    "stream_options": hostile,
    "return_token_ids": hostile,
    "echo": hostile,
    "presence_penalty": hostile,
    "extra": hostile,
}
completion = st.fixed_dictionaries(
    {"model": st.one_of(st.just(NAME), hostile), "max_tokens": small_tokens},
    optional={"prompt": st.one_of(st.text(max_size=30), st.lists(st.integers(-5, 300), max_size=8), hostile), **common},
)
function = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["add", "run_python"]), hostile)},
    optional={"parameters": st.one_of(st.just({"type": "object", "properties": {}}), hostile), "description": hostile},
)
tool = st.fixed_dictionaries(
    {"type": st.one_of(st.just("function"), hostile), "function": st.one_of(function, hostile)}
)
tool_choice = st.one_of(
    st.sampled_from(["auto", "none", "required"]),
    st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({"name": hostile})}),
    hostile,
)
chat = st.fixed_dictionaries(
    {"model": st.one_of(st.just(NAME), hostile), "max_tokens": small_tokens},
    optional={
        "messages": st.one_of(st.lists(message, max_size=3), hostile),
        "tools": st.one_of(st.lists(tool, max_size=2), hostile),
        "tool_choice": tool_choice,
        **common,
    },
)


@st.composite
def raw_body(draw: st.DrawFn, bodies: st.SearchStrategy[dict[str, Any]]) -> bytes:
    body = draw(bodies)
    if draw(st.booleans()) and "max_tokens" in body and body.get("stream") is True:
        body["max_tokens"] = 2
    text = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
    mutation = draw(st.sampled_from(["none"] * 4 + ["truncate", "bad_utf8", "deep", "long_int"]))
    if mutation == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif mutation == "bad_utf8":
        text = text[:-1] + b"\xff}"
    elif mutation == "deep":
        text = text[:-1] + b', "x": ' + b"[" * 20000 + b"]" * 20000 + b"}"
    elif mutation == "long_int":
        text = text[:-1] + b', "seed": ' + b"7" * 5000 + b"}"
    return text


def _check(resp: Any) -> None:
    assert resp.status_code < 500, resp.text[:300]
    if resp.status_code >= 400:
        err = resp.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
        assert len(err["message"]) < 2000  # no echo of a huge value


@FAST
@given(data=raw_body(completion))
def test_fuzz_completion_bodies(client, data):
    _check(client.post("/v1/completions", content=data, headers={"content-type": "application/json"}))


@FAST
@given(data=raw_body(chat))
def test_fuzz_chat_bodies(client, data):
    _check(client.post("/v1/chat/completions", content=data, headers={"content-type": "application/json"}))


@FAST
@given(data=st.one_of(st.binary(max_size=64), raw_body(st.fixed_dictionaries({"path": hostile}))))
def test_fuzz_load_weights_bodies(client, data):
    resp = client.post("/v1/load_weights", content=data, headers={"content-type": "application/json"})
    assert resp.status_code in (400, 413), resp.text[:300]  # no body here names a loadable checkpoint


def test_body_over_the_cap_is_413(client):
    resp = client.post("/v1/completions", content=b"[" + b"1," * 200_000 + b"1]")
    assert resp.status_code == 413 and resp.json()["error"]["type"] == "invalid_request_error"


def test_too_many_prompts_in_one_request_is_400(client):
    body = {"model": NAME, "prompt": [[5]] * 300, "max_tokens": 1}
    resp = client.post("/v1/completions", json=body)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt"


def test_huge_tool_definitions_are_refused_before_rendering(client):
    """Tool definitions count toward the pre-tokenize length check, like message text."""
    fn = {"name": "f", "description": "7" * 200_000, "parameters": {"type": "object"}}
    tool = {"type": "function", "function": fn}
    body = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "tools": [tool], "max_tokens": 1}
    resp = client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400 and "characters" in resp.json()["error"]["message"]
