"""``tirl serve``'s streamed text and internal errors: a real uvicorn in a thread, the official ``openai`` client.

The served model is a random-weight Qwen2 with a byte-level BPE vocabulary (``tirl model init``): at
temperature 1 it samples lone bytes (U+FFFD in the text) and, now and then, the bytes of a real multi-byte
character split over tokens. Covered: the streamed deltas join to the non-streamed answer of the same seed
(completions with 16 choices, chat); the decode work of a stream is linear in its tokens (counted on the
tokenizer's real ``decode``; before session 46 it was quadratic); an exception inside a handler, injected by
``monkeypatch`` on the running server's class, is a JSON 500 of type ``server_error`` whose message does
not echo it, with the traceback in the server's log. Not covered: a failure in uvicorn itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from inproc_server import serve_in_thread

from tirl.inference.server import ModelServer
from tirl.models.init import ModelSpec, init_model
from tirl.models.loading import load_policy

SECRET = "secret-detail-/etc/shadow"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ModelServer]]:
    path = init_model(ModelSpec(seed=0), tmp_path_factory.mktemp("serve-stream") / "bpe")
    model_server = ModelServer(load_policy(path, threads=1), model_name="bpe")
    with serve_in_thread(model_server) as url:
        yield url, model_server


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)


def _multibyte(text: str) -> set[str]:
    return {c for c in text if ord(c) > 127 and c != "\ufffd"}


def test_streamed_completions_join_to_the_answer_with_multibyte_characters(served) -> None:
    c = _client(served[0])
    ask: dict[str, Any] = {"model": "bpe", "prompt": "hello", "max_tokens": 300, "temperature": 1.0, "n": 16}
    for seed in range(0, 16 * 8, 16):  # choices use seed + k: find 16 answers with a real split character
        answer = c.completions.create(**ask, seed=seed)
        texts = [ch.text for ch in sorted(answer.choices, key=lambda ch: ch.index)]
        if any(_multibyte(t) for t in texts):
            break
    assert any(_multibyte(t) for t in texts), "no sample held a multi-byte character: raise max_tokens"
    assert any("\ufffd" in t for t in texts)  # lone bytes too: held back, then sent as U+FFFD
    joined = [""] * 16
    for chunk in c.completions.create(**ask, seed=seed, stream=True):
        for ch in chunk.choices:
            joined[ch.index] += ch.text
    assert joined == texts


def test_streamed_chat_joins_to_the_answer(served) -> None:
    c = _client(served[0])
    ask: dict[str, Any] = {
        "model": "bpe",
        "messages": [{"role": "user", "content": "naïve café — 日本語"}],
        "max_tokens": 200,
        "temperature": 1.0,
        "n": 4,
        "seed": 7,
    }
    answer = c.chat.completions.create(**ask)
    texts = [ch.message.content or "" for ch in sorted(answer.choices, key=lambda ch: ch.index)]
    assert any(ord(ch) > 127 for t in texts for ch in t)
    joined = [""] * 4
    for chunk in c.chat.completions.create(**ask, stream=True):
        for ch in chunk.choices:
            joined[ch.index] += ch.delta.content or ""
    assert joined == texts


def test_stream_decode_work_is_linear(served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids given to the tokenizer's ``decode`` for one streamed answer: at most 16 per token (was n**2 / 2)."""
    tok = served[1].policy.tokenizer
    real = tok.decode
    decoded = [0]

    def counting(ids: Any, **kw: Any) -> Any:
        decoded[0] += len(ids)
        return real(ids, **kw)

    monkeypatch.setattr(tok, "decode", counting)  # the real decode, counted
    tokens = [0] * 16
    ask: dict[str, Any] = {"model": "bpe", "prompt": "hello", "max_tokens": 400, "temperature": 1.0, "n": 16}
    for chunk in _client(served[0]).completions.create(**ask, seed=16, stream=True):
        for ch in chunk.choices:
            tokens[ch.index] += 1
    assert max(tokens) > 100, "every sample ended early: pick another seed"
    assert decoded[0] <= 16 * sum(tokens), f"{decoded[0]} ids decoded to stream {sum(tokens)} tokens"


@pytest.mark.parametrize("stream", [False, True])
def test_an_internal_error_is_a_json_500_logged_not_echoed(served, monkeypatch, caplog, stream: bool) -> None:
    def broken(self: ModelServer, samples: Any) -> Any:
        raise RuntimeError(SECRET)

    monkeypatch.setattr(ModelServer, "_usage", broken)
    body = {"model": "bpe", "prompt": "hello", "max_tokens": 3, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}  # the usage chunk comes after the 200
    with caplog.at_level(logging.ERROR, logger="uvicorn.error"):
        resp = httpx.post(served[0] + "/completions", json=body, timeout=120)
    if stream:
        assert resp.status_code == 200
        events = [line.removeprefix("data: ") for line in resp.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        error = httpx.Response(200, content=events[-2]).json()["error"]
    else:
        assert resp.status_code == 500 and resp.headers["content-type"] == "application/json"
        error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "server_error"
    assert SECRET not in resp.text and "RuntimeError" not in resp.text
    logged = [r for r in caplog.records if r.exc_info and SECRET in str(r.exc_info[1])]
    assert logged, "the exception is not in the server's log"
    assert logged[0].getMessage().split()[2] in error["message"]  # the reference the client can quote


def test_the_official_client_raises_internal_server_error(served, monkeypatch) -> None:
    def broken(self: ModelServer, name: str) -> None:
        raise KeyError(SECRET)

    monkeypatch.setattr(ModelServer, "_model", broken)
    with pytest.raises(openai.InternalServerError) as info:
        _client(served[0]).completions.create(model="bpe", prompt="hi", max_tokens=2)
    assert info.value.status_code == 500 and SECRET not in str(info.value)
    assert isinstance(info.value.body, dict) and info.value.body["type"] == "server_error"  # type: ignore[index]
