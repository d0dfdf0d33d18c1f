"""Start a real ``tirl serve`` subprocess on a free port (shared by the server and generator tests)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from tirl.models.tiny import build_tiny_model, save_policy

LINE = re.compile(r"listening on (http://\S+/v1) \(model (\S+)\)")


def tiny_checkpoint(path: Path, seed: int = 0) -> Path:
    model, tok = build_tiny_model(seed=seed)
    return save_policy(model, tok, path)


@contextlib.contextmanager
def serve(model_dir: Path, *extra: str, startup_s: float = 120.0) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """Yield (base_url, model_name, process); the server is killed on exit."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TIRL_API_KEY": ""}
    cmd = [
        sys.executable,
        "-m",
        "tirl.cli",
        "serve",
        "--model",
        str(model_dir),
        "--port",
        "0",
        "--threads",
        "1",
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    found: list[re.Match[str]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = LINE.search(line)
            if m:
                found.append(m)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(startup_s)
    try:
        if not found:
            proc.kill()
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"tirl serve did not start: {err[-2000:]}")
        yield found[0].group(1), found[0].group(2), proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
