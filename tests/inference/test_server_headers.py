"""``tirl serve``'s request-head caps (issue 22): a real ``tirl serve`` subprocess, raw sockets and httpx.

Covered: one header line over 8 KB, many small headers over 32 KB in all, an over-long request line and a
head dribbled over many TCP writes are each answered 431 with an OpenAI-shaped JSON body and the connection
closed; four 100 MB headers sent as fast as the socket takes them leave the server's RSS within 40 MB and
the server answering (the old server, on httptools, answered them 200 and grew by 434 MB); ordinary
requests (a 6 KB header, keep-alive reuse of one connection) still work. :class:`HeadMeter` is checked on
its own against a reference split of the head for every way of cutting one head into two reads.
Slow clients: ``test_server_slow_clients.py``.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from server_proc import serve, tiny_checkpoint

from tirl.inference.http_limits import MAX_HEADER_BYTES, MAX_HEADER_LINE_BYTES, HeadMeter

MB = 2**20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("serve-headers")
    with serve(tiny_checkpoint(root / "tiny")) as (url, name, proc):
        yield url, name, proc


def _addr(server) -> tuple[str, int]:
    parts = urlsplit(server[0])
    return parts.hostname or "127.0.0.1", parts.port or 80


def _raw(server, chunks: list[bytes], pause_s: float = 0.0) -> bytes:
    """Send ``chunks`` (stopping when the server closes), then read the whole reply."""
    with socket.create_connection(_addr(server), timeout=30) as sock:
        for chunk in chunks:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            if pause_s:
                time.sleep(pause_s)
        reply = b""
        try:
            while data := sock.recv(65536):
                reply += data
        except ConnectionResetError:
            pass
    return reply


def _assert_431(reply: bytes, needle: str) -> None:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), reply[:200]
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert needle in error["message"], error


def _request(*headers: bytes, target: bytes = b"/health") -> bytes:
    return b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


def test_one_long_header_line_is_431(server) -> None:
    reply = _raw(server, [_request(b"X-Big: " + b"a" * (MAX_HEADER_LINE_BYTES + 1))])
    _assert_431(reply, f"longer than {MAX_HEADER_LINE_BYTES} bytes")


def test_many_small_headers_over_the_total_are_431(server) -> None:
    headers = [b"X-H%d: " % i + b"b" * 400 for i in range(MAX_HEADER_BYTES // 400 + 2)]
    _assert_431(_raw(server, [_request(*headers)]), f"larger than {MAX_HEADER_BYTES} bytes")


def test_a_long_request_line_is_431(server) -> None:
    _assert_431(_raw(server, [_request(target=b"/health?" + b"q" * 20_000)]), "longer than")


def test_a_head_dribbled_over_many_writes_is_431(server) -> None:
    line = b"X-Slow: " + b"c" * 1000 + b"\r\n"
    chunks = [b"GET /health HTTP/1.1\r\nHost: x\r\n"] + [line] * 40 + [b"\r\n"]
    _assert_431(_raw(server, chunks, pause_s=0.005), f"larger than {MAX_HEADER_BYTES} bytes")


def _rss_mb(pid: int) -> float:
    # smaps_rollup counts pages exactly; VmRSS lags by a counter batch per CPU (tens of MB on a many-core CI machine)
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no Rss")


def test_four_100_mb_headers_leave_rss_bounded(server) -> None:
    pid = server[2].pid
    before = _rss_mb(pid)
    block = b"d" * MB
    with socket.create_connection(_addr(server), timeout=30) as sock:
        sent = 0
        try:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            for i in range(4):
                sock.sendall(b"X-Huge-%d: " % i)
                for _ in range(100):
                    sock.sendall(block)
                    sent += len(block)
                sock.sendall(b"\r\n")
            sock.sendall(b"\r\n")
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
    assert sent < 400 * MB, "the server read all four 100 MB headers"
    grown = _rss_mb(pid) - before
    assert grown < 40, f"server RSS grew {grown:.0f} MB"
    assert httpx.get(server[0].removesuffix("/v1") + "/health", timeout=30).status_code == 200


def test_ordinary_requests_still_work_and_keep_alive(server) -> None:
    with httpx.Client(timeout=60) as client:
        big = {"x-trace": "e" * 6000, "authorization": "Bearer none"}
        for _ in range(3):  # one connection, reused
            resp = client.get(server[0] + "/models", headers=big)
            assert resp.status_code == 200, resp.text[:200]
        body = {"model": server[1], "prompt": "1+1=", "max_tokens": 2}
        assert client.post(server[0] + "/completions", json=body, headers=big).status_code == 200


_POST = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "raw",
    [
        _POST + b"Content-Length: -1\r\n\r\n",
        _POST + b"Content-Length: 1180591620717411303424\r\n\r\n",
        _POST + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        _POST + b"Transfer-Encoding: gzip\r\n\r\n",
        _POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 100,
    ],
    ids=["negative-length", "length-2**70", "two-lengths", "te-gzip", "bad-chunk-size", "tls-hello"],
)
def test_a_request_h11_cannot_parse_is_an_openai_400(server, raw: bytes) -> None:
    """Red team, session 45: uvicorn answered these with a plain-text 400 ("Invalid HTTP request received.")."""
    head, _, body = _raw(server, [raw]).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), head[:200]
    assert b"connection: close" in head.lower() and b"application/json" in head.lower()
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and "not valid HTTP/1.1" in error["message"]
    assert httpx.get(server[0].removesuffix("/v1") + "/health", timeout=30).status_code == 200


def test_a_websocket_upgrade_is_served_as_plain_http(server) -> None:
    """Red team, session 45: there is no WebSocket endpoint, and an upgrade request got an empty 403."""
    upgrade = (b"Upgrade: websocket", b"Connection: Upgrade, close", b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
    head, _, body = _raw(server, [_request(*upgrade, b"Sec-WebSocket-Version: 13")]).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head[:200]
    assert json.loads(body)["status"] == "ok"


HEAD = _request(b"A: 1", b"Bb: " + b"x" * 30, b"C: 3") + b'{"body": "after the head"}'


@pytest.mark.parametrize("max_line", [20, 34, 40])
def test_head_meter_agrees_with_a_reference_at_every_cut(max_line: int) -> None:
    end = HEAD.index(b"\r\n\r\n") + 4
    lines = HEAD[: end - 4].split(b"\r\n")
    for max_total in (end - 1, end, end + 10):
        want = None
        if max(len(x) for x in lines) > max_line:
            want = "line"
        elif end > max_total:
            want = "larger"
        for cut in range(len(HEAD) + 1):
            meter = HeadMeter(max_total=max_total, max_line=max_line)
            got = meter.feed(HEAD[:cut]) or meter.feed(HEAD[cut:])
            assert (got is None) == (want is None) and (want is None or want in got), (max_total, cut, got)
            assert want is not None or meter.done
            assert len(meter.buf) <= max_total + 4
