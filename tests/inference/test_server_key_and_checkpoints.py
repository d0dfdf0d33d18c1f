"""``tirl serve`` with an API key, against a client that sends odd keys or hostile checkpoint directories.

A real uvicorn subprocess (``server_proc.serve``), raw sockets and httpx; memory from ``/proc``. Each test
was run against the code before the fix (red-team pass of session 44) and failed there:

* a Bearer token with a byte above 0x7f was a 500 (``hmac.compare_digest`` raises TypeError on non-ASCII
  text), not a 401;
* a ``config.json`` of another shape was built in full before ``load_state_dict`` refused it: 12 wide
  layers grew the server's peak memory by ~800 MB for a 400;
* a pickled ``pytorch_model.bin`` (refused by torch's ``weights_only`` loader: never executed, checked
  here too) was a 500 "internal error".
"""

from __future__ import annotations

import json
import pickle
import socket
from pathlib import Path

import httpx
import pytest
from server_proc import serve, tiny_checkpoint

from tirl.cli import main

KEY = "k3y"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-keyed")
    checkpoint = tiny_checkpoint(root / "tiny")
    with serve(checkpoint, "--api-key", KEY) as (url, _name, proc):
        yield url, checkpoint, proc


def _raw_get(url: str, authorization: bytes) -> tuple[bytes, dict]:
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: " + authorization + b"\r\n")
        s.sendall(b"Connection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], json.loads(body)


def _peak_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("token", [b"\xff\xfe", "k3\u00ff".encode("latin-1")])
def test_a_token_with_non_ascii_bytes_is_401_not_500(server, token: bytes) -> None:
    status, body = _raw_get(server[0], b"Bearer " + token)
    assert status == b"HTTP/1.1 401 Unauthorized", (status, body)
    assert body["error"]["type"] == "authentication_error"
    status, _ = _raw_get(server[0], b"Bearer " + KEY.encode())
    assert status == b"HTTP/1.1 200 OK"


def test_a_checkpoint_of_another_shape_is_refused_before_it_is_built(server, tmp_path: Path) -> None:
    url, checkpoint, proc = server
    config = json.loads((checkpoint / "config.json").read_text())
    config.update(hidden_size=1024, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=8)
    config.update(num_key_value_heads=8, head_dim=128)  # ~200 M parameters: ~800 MB in float32
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes((checkpoint / "model.safetensors").read_bytes())
    before = _peak_mb(proc.pid)
    resp = httpx.post(url + "/load_weights", json={"path": str(tmp_path)}, headers=AUTH, timeout=120)
    assert resp.status_code == 400, resp.text
    assert _peak_mb(proc.pid) - before < 150, "the hostile model was built before it was refused"
    assert "another model than the served one" in resp.json()["error"]["message"]
    ok = httpx.post(url + "/load_weights", json={"path": str(checkpoint)}, headers=AUTH, timeout=120)
    assert ok.status_code == 200, ok.text


class _Implant:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_checkpoint_is_a_400_and_never_unpickled(server, tmp_path: Path) -> None:
    url, checkpoint, _ = server
    marker = tmp_path / "unpickled"
    (tmp_path / "config.json").write_text((checkpoint / "config.json").read_text())
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps({"model.embed_tokens.weight": _Implant(marker)}))
    resp = httpx.post(url + "/load_weights", json={"path": str(tmp_path)}, headers=AUTH, timeout=120)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "path"
    assert not marker.exists()


@pytest.mark.parametrize("key", ["s\u00e9cret", "tab\tkey", " padded"])
def test_a_key_no_header_can_carry_is_one_error_line(key: str, capsys, tmp_path: Path) -> None:
    code = main(["serve", "--model", str(tmp_path / "never-loaded"), "--api-key", key])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("error:") == 1 and "--api-key" in err and "Traceback" not in err
    assert key.strip() not in err  # the key itself is never echoed
