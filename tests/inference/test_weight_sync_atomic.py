"""``HTTPWeightSync`` saves ``DIR/vN`` whole or not at all, also when ``vN`` is there already (a resumed run).

No server: ``httpx.post`` answers 200 here; the model and tokenizer are stand-ins whose ``save_pretrained``
writes a marked ``config.json`` (what the server checks) and one weights file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

import tirl.fileio
import tirl.inference.openai_http as openai_http
from tirl.inference.openai_http import HTTPWeightSync


class _Saves:
    def __init__(self, mark: str) -> None:
        self.mark = mark

    def save_pretrained(self, path: Any, **kwargs: Any) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "config.json").write_text(f'{{"mark": "{self.mark}"}}')
        (Path(path) / "model.safetensors").write_bytes(self.mark.encode() * 100)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture
def posts(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    def post(url: str, *, json: dict[str, Any], **kwargs: Any) -> httpx.Response:
        sent.append(json)
        return httpx.Response(200, json={"policy_version": json["policy_version"]})

    monkeypatch.setattr(openai_http.httpx, "post", post)
    return sent


def test_a_version_synced_again_is_replaced_whole(tmp_path: Path, posts: list[dict[str, Any]]) -> None:
    HTTPWeightSync("http://x/v1", _Saves("old"), _Saves("old"), directory=tmp_path)(5)
    (tmp_path / "v5" / "stray.bin").write_bytes(b"x")
    HTTPWeightSync("http://x/v1", _Saves("new"), _Saves("new"), directory=tmp_path)(5)
    assert _files(tmp_path / "v5") == {"config.json": b'{"mark": "new"}', "model.safetensors": b"new" * 100}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v5"]
    assert [p["path"] for p in posts] == [str((tmp_path / "v5").resolve())] * 2


def test_a_failed_swap_keeps_the_old_version_whole(
    tmp_path: Path, posts: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    HTTPWeightSync("http://x/v1", _Saves("old"), _Saves("old"), directory=tmp_path)(5)
    old = _files(tmp_path / "v5")
    final = str(tmp_path / "v5")
    real_rename, real_replace = os.rename, os.replace

    def fails_onto_final(real):  # type: ignore[no-untyped-def]
        def rename(src, dst, *a, **kw):  # type: ignore[no-untyped-def]
            if str(dst) == final and ".old." not in str(src):  # the new directory onto v5 (not the old one back)
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real(src, dst, *a, **kw)

        return rename

    def exchange_fails(a: Path, b: Path) -> bool:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "rename", fails_onto_final(real_rename))
    monkeypatch.setattr(os, "replace", fails_onto_final(real_replace))
    monkeypatch.setattr(tirl.fileio, "_exchange", exchange_fails)
    with pytest.raises(OSError, match="Input/output error"):
        HTTPWeightSync("http://x/v1", _Saves("new"), _Saves("new"), directory=tmp_path)(5)
    monkeypatch.undo()
    assert _files(tmp_path / "v5") == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v5"]
    assert len(posts) == 1  # the server is not told to load a version that is not there
