"""``tirl serve`` as a real uvicorn subprocess, exercised with the official ``openai`` client."""

from __future__ import annotations

import asyncio
import json
import socket
from urllib.parse import urlparse

import httpx
import openai
import pytest
from server_proc import serve, tiny_checkpoint

KEY = "test-key-123"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    model_dir = tiny_checkpoint(root / "tiny")
    other = tiny_checkpoint(root / "other", seed=1)
    with serve(model_dir, "--api-key", KEY, "--batch-window-ms", "50") as (url, name, proc):
        yield url, name, proc, other


def client(server, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0], api_key=kw.pop("api_key", KEY), max_retries=0, **kw)


def test_models_lists_the_served_model(server):
    models = client(server).models.list()
    assert [m.id for m in models.data] == [server[1]]
    assert models.data[0].max_model_len == 1024  # type: ignore[attr-defined]


def test_completion_with_token_ids_and_logprobs(server):
    c = client(server)
    resp = c.completions.create(
        model=server[1],
        prompt=[10, 11, 12, 13],
        max_tokens=8,
        temperature=1.0,
        logprobs=0,
        seed=3,
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )
    ch = resp.choices[0]
    ids = ch.token_ids  # type: ignore[attr-defined]
    assert ch.prompt_token_ids == [10, 11, 12, 13]  # type: ignore[attr-defined]
    assert 1 <= len(ids) <= 8
    assert ch.logprobs.tokens == [f"token_id:{t}" for t in ids]
    assert len(ch.logprobs.token_logprobs) == len(ids)
    assert all(lp <= 0.0 for lp in ch.logprobs.token_logprobs)
    assert resp.usage.prompt_tokens == 4 and resp.usage.completion_tokens == len(ids)
    assert ch.finish_reason in ("stop", "length")
    # the same seed gives the same sample
    again = c.completions.create(
        model=server[1],
        prompt=[10, 11, 12, 13],
        max_tokens=8,
        logprobs=0,
        seed=3,
        extra_body={"return_token_ids": True},
    )
    assert again.choices[0].token_ids == ids  # type: ignore[attr-defined]


def test_text_prompt_n_and_stop_string(server):
    c = client(server)
    resp = c.completions.create(model=server[1], prompt="12+3=", max_tokens=30, n=3, seed=1)
    assert [ch.index for ch in resp.choices] == [0, 1, 2]
    greedy = c.completions.create(
        model=server[1], prompt="ab", max_tokens=30, temperature=0, extra_body={"return_token_ids": True}
    )
    text = greedy.choices[0].text
    if len(text) >= 3:  # pick a stop string from the greedy text; the text is cut before it
        stop = text[2]
        cut = c.completions.create(model=server[1], prompt="ab", max_tokens=30, temperature=0, stop=[stop])
        assert cut.choices[0].text == text[: text.index(stop)]
        assert cut.choices[0].finish_reason == "stop"


def test_chat_completion_and_stream(server):
    c = client(server)
    messages = [{"role": "user", "content": "What is 2+2?"}]
    resp = c.chat.completions.create(
        model=server[1],
        messages=messages,
        max_tokens=12,
        temperature=0,
        logprobs=True,
        top_logprobs=1,
        extra_body={"return_token_ids": True},
    )
    ch = resp.choices[0]
    assert ch.message.role == "assistant"
    assert len(ch.logprobs.content) == len(ch.token_ids)  # type: ignore[attr-defined]
    assert resp.prompt_token_ids  # type: ignore[attr-defined]
    stream = c.chat.completions.create(
        model=server[1],
        messages=messages,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == ch.message.content  # greedy: the streamed text equals the non-streamed one
    assert finish == ch.finish_reason
    assert usage is not None and usage.completion_tokens == len(ch.token_ids)  # type: ignore[attr-defined]


def test_streamed_completion_token_ids(server):
    c = client(server)
    full = c.completions.create(
        model=server[1], prompt=[20, 21], max_tokens=10, temperature=0, extra_body={"return_token_ids": True}
    )
    ids: list[int] = []
    text = ""
    for chunk in c.completions.create(
        model=server[1],
        prompt=[20, 21],
        max_tokens=10,
        temperature=0,
        stream=True,
        extra_body={"return_token_ids": True},
    ):
        for ch in chunk.choices:
            ids += ch.token_ids  # type: ignore[attr-defined]
            text += ch.text
    assert ids == full.choices[0].token_ids  # type: ignore[attr-defined]
    assert text == full.choices[0].text


def test_concurrent_requests_are_batched(server):
    async def main() -> list[openai.types.Completion]:
        c = openai.AsyncOpenAI(base_url=server[0], api_key=KEY, max_retries=0)
        try:
            return await asyncio.gather(
                *(
                    c.completions.create(
                        model=server[1],
                        prompt=[30 + i, 31],
                        max_tokens=6,
                        logprobs=0,
                        extra_body={"return_token_ids": True},
                    )
                    for i in range(16)
                )
            )
        finally:
            await c.close()

    before = httpx.get(server[0].removesuffix("/v1") + "/health").json()
    results = asyncio.run(main())
    after = httpx.get(server[0].removesuffix("/v1") + "/health").json()
    assert len(results) == 16
    for r in results:
        assert len(r.choices[0].logprobs.token_logprobs) == len(r.choices[0].token_ids)  # type: ignore[attr-defined]
    assert after["requests"] - before["requests"] == 16
    assert after["batches"] - before["batches"] < 16  # several requests shared a batch


def _error(resp: httpx.Response) -> dict:
    body = resp.json()
    assert set(body) == {"error"}
    assert {"message", "type", "param", "code"} <= set(body["error"])
    return body["error"]


def test_bad_requests_get_openai_errors(server):
    c = client(server)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        c.completions.create(model="no-such-model", prompt="x", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="maximum context length is 1024"):
        c.completions.create(model=server[1], prompt=[5] * 100, max_tokens=1000)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        c.completions.create(model=server[1], prompt="x", max_tokens=2, temperature=7)
    with pytest.raises(openai.BadRequestError, match="out of range"):
        c.completions.create(model=server[1], prompt=[10**6], max_tokens=2)
    with pytest.raises(openai.AuthenticationError):
        client(server, api_key="wrong").models.list()
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    r = httpx.post(server[0] + "/completions", content=b"{not json", headers=headers)
    assert r.status_code == 400 and "JSON" in _error(r)["message"]
    r = httpx.post(server[0] + "/completions", json={"prompt": "x"}, headers=headers)
    assert r.status_code == 400 and _error(r)["param"] == "model"
    r = httpx.post(server[0] + "/chat/completions", json={"model": server[1], "messages": []}, headers=headers)
    assert r.status_code == 400 and _error(r)["param"] == "messages"
    r = httpx.get(server[0] + "/v1/models", headers=headers)
    assert r.status_code == 404 and "base URL" in _error(r)["message"]
    r = httpx.get(server[0] + "/completions", headers=headers)
    assert r.status_code == 405
    _error(r)


def test_client_disconnect_mid_stream_keeps_server_serving(server):
    url = urlparse(server[0])
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": server[1], "prompt": [40, 41], "max_tokens": 200, "stream": True}
    with httpx.stream("POST", server[0] + "/completions", json=body, headers=headers) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                json.loads(line[6:])
                break  # leave after the first chunk: the connection is closed mid-stream
    # and a client that hangs up before anything was sent back
    raw = json.dumps(body).encode()
    with socket.create_connection((url.hostname, url.port)) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(raw)}\r\n\r\n".encode()
            + raw
        )
    resp = client(server).completions.create(model=server[1], prompt=[42], max_tokens=3)
    assert resp.choices[0].text is not None
    assert server[2].poll() is None  # still running


def test_load_weights_bumps_policy_version(server):
    c = client(server)
    headers = {"Authorization": f"Bearer {KEY}"}
    before = c.completions.create(model=server[1], prompt=[50, 51], max_tokens=6, temperature=0)
    v0 = before.policy_version  # type: ignore[attr-defined]
    r = httpx.post(server[0] + "/load_weights", json={"path": str(server[3])}, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["policy_version"] == v0 + 1
    after = c.completions.create(model=server[1], prompt=[50, 51], max_tokens=6, temperature=0)
    assert after.policy_version == v0 + 1  # type: ignore[attr-defined]
    r = httpx.post(
        server[0] + "/load_weights", json={"path": "/nonexistent/ckpt", "policy_version": 9}, headers=headers
    )
    assert r.status_code == 400 and _error(r)["param"] == "path"
    for bad_version in (-1, 2**80):  # a client's staleness arithmetic took them (red team, session 45)
        r = httpx.post(
            server[0] + "/load_weights", json={"path": str(server[3]), "policy_version": bad_version}, headers=headers
        )
        assert r.status_code == 400 and _error(r)["param"] == "policy_version", r.text
    assert httpx.get(server[0].removesuffix("/v1") + "/health").json()["policy_version"] == v0 + 1
