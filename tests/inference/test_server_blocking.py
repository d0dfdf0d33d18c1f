"""``tirl serve`` keeps answering while one client's request is expensive (red team, session 45).

A real ``tirl serve`` subprocess on the tiny model with its context raised to 2**20 positions (so that a
multi-megabyte text prompt passes the character bound and is really tokenized), the official ``openai``
client, raw sockets and httpx. Covered: a client that hangs up on a non-streamed request for 1,024 samples
stops its generation (before, every sample was generated: 16 batches, every other client waiting); a
4-million-character prompt is tokenized off the event loop, so ``/health`` answers while it is (before, it
waited for the whole encode). A hang-up mid-stream is ``test_server.py``'s.
Not covered: the order in which concurrent clients' prompts are tokenized (one thread, arrival order).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from server_proc import serve, tiny_checkpoint


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    model = tiny_checkpoint(tmp_path_factory.mktemp("serve-blocking") / "tiny")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2**20}))
    with serve(model, "--max-batch", "64") as (url, name, proc):
        yield url, name, proc


def _health(server) -> dict:
    return httpx.get(server[0].removesuffix("/v1") + "/health", timeout=60).json()  # type: ignore[no-any-return]


def _wait_idle(server, limit_s: float = 120.0) -> dict:
    """``/health`` once no token was generated for 1.5 s (the sampler is idle)."""
    last, since, stop = _health(server), time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() < stop:
        time.sleep(0.25)
        now = _health(server)
        if now["tokens_generated"] != last["tokens_generated"]:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > 1.5:
            return now
    raise AssertionError("the sampler never went idle")


def test_a_client_that_hangs_up_stops_its_generation(server) -> None:
    before = _wait_idle(server)
    body = json.dumps(
        {"model": server[1], "prompt": [[5, 6]] * 64, "n": 16, "max_tokens": 1000, "temperature": 1.0}
    ).encode()
    parts = urlsplit(server[0])
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )
        deadline = time.monotonic() + 30
        while _health(server)["batches"] == before["batches"] and time.monotonic() < deadline:
            time.sleep(0.05)  # hang up once the first batch of the 1,024 samples is running
    after = _wait_idle(server)
    ran = after["batches"] - before["batches"]
    print(f"batches after the hang-up: {ran}; tokens: {after['tokens_generated'] - before['tokens_generated']}")
    assert after["requests"] - before["requests"] == 1024
    assert ran <= 2, f"{ran} batches of 64 ran for a client that had gone (1024 samples: 16 batches)"
    c = openai.OpenAI(base_url=server[0], api_key="none", max_retries=0, timeout=60)
    assert c.completions.create(model=server[1], prompt=[7], max_tokens=2).choices[0].finish_reason


def test_a_long_prompt_is_tokenized_off_the_event_loop(server) -> None:
    c = openai.OpenAI(base_url=server[0], api_key="none", max_retries=0, timeout=120)
    outcome: list[BaseException] = []

    def big() -> None:
        try:
            c.completions.create(model=server[1], prompt="7" * 4_000_000, max_tokens=16)
        except openai.BadRequestError as exc:  # 4M tokens + 16 do not fit 2**20 positions, once tokenized
            outcome.append(exc)

    worker = threading.Thread(target=big)
    start = time.monotonic()
    worker.start()
    waits = []
    with httpx.Client(timeout=60) as h:
        while worker.is_alive():
            t0 = time.monotonic()
            h.get(server[0].removesuffix("/v1") + "/health")
            waits.append(time.monotonic() - t0)
            time.sleep(0.02)
    took = time.monotonic() - start
    print(f"4M-character prompt refused after {took:.2f} s; /health waited at most {max(waits):.3f} s")
    assert outcome and "maximum context length" in str(outcome[0]) and "characters" not in str(outcome[0])
    assert max(waits) < 0.25 * took, f"/health waited {max(waits):.2f} s of the request's {took:.2f} s"
