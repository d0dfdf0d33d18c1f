"""`tirl review` against a real OpenAI-compatible HTTP server on 127.0.0.1 (starlette + uvicorn in a thread)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tirl.cli import main
from tirl.diagnostics.review import check_base_url, is_local, names_the_model, read_key, review_bundle
from tirl.errors import SetupError

KEY = "sk-test-123"
MODELS = ["tiny-reviewer", "other-model"]
SEEN: list[dict] = []


def _err(status: int, message: str, code: str, type_: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": None, "code": code}}, status)


def _auth(request: Request) -> JSONResponse | None:
    if request.headers.get("authorization") != f"Bearer {KEY}":
        return _err(401, "Incorrect API key provided: sk-wr***.", "invalid_api_key")
    return None


async def chat(request: Request) -> JSONResponse:
    if (bad := _auth(request)) is not None:
        return bad
    body = await request.json()
    SEEN.append(body)
    if body.get("model") not in MODELS:
        return _err(
            404, f"The model `{body.get('model')}` does not exist or you do not have access to it.", "model_not_found"
        )
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    verdict = "void_leak" if "void_leak" in user else "unknown"
    extra = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J" if "hostile" in user else ""  # a reviewer that writes the clipboard
    return JSONResponse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {
                        "role": "assistant",
                        "content": f"Reviewed {len(user)} chars; verdict {verdict}.{extra}",
                    },
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    )


async def models(request: Request) -> JSONResponse:
    if (bad := _auth(request)) is not None:
        return bad
    return JSONResponse(
        {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "t"} for m in MODELS]}
    )


APP = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(APP, host="127.0.0.1", port=port, log_level="error", lifespan="off"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "test server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    p = tmp_path / "bundle.md"
    p.write_text("# Evidence bundle\n\nverdict: **void_leak** at step 120\n", encoding="utf-8")
    return p


def test_review_sends_the_bundle(server: str, bundle: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("REVIEW_KEY", KEY)
    out = bundle.parent / "answer.md"
    rc = main(
        [
            "review",
            str(bundle),
            "--base-url",
            f"{server}/v1",
            "--model",
            "tiny-reviewer",
            "--env-key",
            "REVIEW_KEY",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "verdict void_leak" in printed and out.read_text().strip() == printed.strip()
    sent = SEEN[-1]
    assert sent["model"] == "tiny-reviewer" and sent["messages"][0]["role"] == "system"
    assert sent["messages"][1]["content"] == bundle.read_text()


def test_a_reviewers_escape_sequences_are_shown_not_obeyed(server: str, bundle: Path, monkeypatch, capsys) -> None:
    """The answer went to the terminal raw: an OSC 52 in it would set the clipboard; ``--out`` keeps it as sent."""
    monkeypatch.setenv("REVIEW_KEY", KEY)
    bundle.write_text("hostile bundle\n", encoding="utf-8")
    out = bundle.parent / "answer.md"
    argv = ["review", str(bundle), "--base-url", f"{server}/v1", "--model", "tiny-reviewer", "--env-key", "REVIEW_KEY"]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\x07" not in printed
    assert "verdict unknown.\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J" in printed
    assert out.read_text(encoding="utf-8").endswith("\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\n")


def test_trailing_slash_is_fine(server: str, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    result = review_bundle("void_leak", base_url=f"{server}/v1/", model="tiny-reviewer")
    assert result.text.endswith("verdict void_leak.")


def test_rejected_key_is_401_with_the_variable_name(server: str, bundle: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MY_KEY", "sk-wrong")
    rc = main(["review", str(bundle), "--base-url", f"{server}/v1", "--model", "tiny-reviewer", "--env-key", "MY_KEY"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "rejected the key in $MY_KEY (401" in err and "invalid_api_key" in err


def test_a_local_server_that_wants_a_key_when_none_is_set(server: str, bundle: Path, monkeypatch, capsys) -> None:
    """It said "rejected the key in $NOPE_UNSET", though the variable is unset and no key was sent."""
    monkeypatch.delenv("NOPE_UNSET", raising=False)
    argv = ["review", str(bundle), "--base-url", f"{server}/v1", "--model", "tiny-reviewer", "--env-key", "NOPE_UNSET"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "wants an API key (401" in err and "$NOPE_UNSET is not set — export NOPE_UNSET=<key>" in err
    assert "rejected" not in err


def test_unknown_model_lists_the_models(server: str, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(SetupError) as exc:
        review_bundle("x", base_url=f"{server}/v1", model="gpt-4.1-2025-04-14")
    text = str(exc.value)
    assert "does not know the model 'gpt-4.1-2025-04-14'" in text and "model_not_found" in text
    assert "tiny-reviewer, other-model" in text or "other-model, tiny-reviewer" in text


def test_wrong_path_404_says_check_the_base_url(server: str, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(SetupError, match=r"was not found .*end in /v1"):
        review_bundle("x", base_url=server, model="tiny-reviewer")  # missing /v1


def test_v1_twice_is_caught_before_the_request(server: str, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    before = len(SEEN)
    with pytest.raises(SetupError, match=r"/v1 twice.*--base-url http://127\.0\.0\.1:\d+/v1$"):
        review_bundle("x", base_url=f"{server}/v1/v1", model="tiny-reviewer")
    assert len(SEEN) == before


def test_query_string_and_endpoint_urls() -> None:
    with pytest.raises(SetupError, match=r"query string.*--base-url https://api\.example\.com/api$"):
        check_base_url("https://api.example.com/api?utm_source=blog")
    with pytest.raises(SetupError, match=r"names an endpoint.*--base-url https://h/v1$"):
        check_base_url("https://h/v1/chat/completions")
    with pytest.raises(SetupError, match="not an http"):
        check_base_url("api.example.com/v1")
    assert check_base_url("https://h/v1/") == "https://h/v1"


def test_key_variable_unset_empty_or_holding_the_key(monkeypatch) -> None:
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(SetupError, match="NOPE_KEY is not set — export NOPE_KEY="):
        read_key("NOPE_KEY")
    monkeypatch.setenv("EMPTY_KEY", "  ")
    with pytest.raises(SetupError, match="EMPTY_KEY is empty"):
        read_key("EMPTY_KEY")
    with pytest.raises(SetupError, match="NAME of an environment variable"):
        read_key("sk-live-abcdef")


def test_unset_key_fails_before_any_request(bundle: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rc = main(["review", str(bundle), "--base-url", "http://192.0.2.1:9/v1", "--model", "m"])  # not this machine
    assert rc == 2 and "OPENAI_API_KEY is not set" in capsys.readouterr().err


def test_a_local_server_needs_no_key_variable(monkeypatch) -> None:
    """`tirl serve` / `vllm serve` on loopback check no key: an unset variable is not an error there."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert read_key("OPENAI_API_KEY", required=False) == "none"
    assert [is_local(u) for u in ("http://127.0.0.1:8000/v1", "http://localhost:8000/v1", "http://[::1]:8/v1")] == [
        True, True, True,
    ]  # fmt: skip
    assert not is_local("https://api.example.com/v1") and not is_local("http://10.0.0.5:8000/v1")
    with pytest.raises(SetupError, match="is not set"):
        read_key("OPENAI_API_KEY")


def test_connection_refused(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    port = _free_port()
    with pytest.raises(SetupError, match="cannot connect"):
        review_bundle("x", base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=5)


@pytest.mark.parametrize(
    ("text", "model", "expected"),
    [
        ("no route /chat/completions; the API is under /v1 (e.g. /v1/models) — check the base URL", "tiny-tir", False),
        ("model_not_found The model `gpt-x` does not exist", "gpt-x", True),
        ("The model 'tiny-tir' is not served here", "tiny-tir", True),
        ("Not Found", "tiny-tir", False),
    ],
)
def test_a_404_is_about_the_model_only_when_it_names_it(text: str, model: str, expected: bool) -> None:
    """tirl serve's no-route 404 mentions /v1/models: it was read as an unknown model, with the wrong fix."""
    assert names_the_model(text, model) is expected


@pytest.mark.parametrize("text", ["", " \n\n\t\n"])
def test_an_empty_bundle_is_refused_before_any_request(server: str, tmp_path: Path, monkeypatch, capsys, text) -> None:
    """An empty bundle was sent (a paid call asking for a review of nothing); now nothing reaches the server."""
    monkeypatch.setenv("REVIEW_KEY", KEY)
    empty = tmp_path / "empty.md"
    empty.write_text(text, encoding="utf-8")
    sent = len(SEEN)
    argv = ["review", str(empty), "--base-url", f"{server}/v1", "--model", "tiny-reviewer", "--env-key", "REVIEW_KEY"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {empty}: is empty: there is nothing to review"), err
    assert "--bundle" in err[0] and len(SEEN) == sent
