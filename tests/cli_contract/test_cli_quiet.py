"""The CLI's stderr carries errors and warnings, not transformers' progress bars (``tirl.cli.main``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
TINY = SRC / "tirl" / "assets" / "tiny-tir"


def _tirl(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tirl.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=600, check=False)  # fmt: skip


def _sft_argv(tmp_path: Path) -> list[str]:
    """A one-step `tirl sft` from the shipped tiny model: it loads a model and saves one."""
    return ["sft", "--env", "tir-chain", "--init", str(TINY), "--out", str(tmp_path / "s"), "--steps", "1",
            "--copy-steps", "0", "--train-tasks", "2", "--batch-size", "2", "--eval-tasks", "1",
            "--threads", "1"]  # fmt: skip


def test_sft_loads_and_saves_without_progress_bars(tmp_path: Path) -> None:
    """`tirl sft --init` loads a model and saves one: before the fix stderr held "Loading weights: 100%|..."."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    env["PYTHONPATH"] = f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    proc = _tirl(*_sft_argv(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "s" / "model.safetensors").is_file()
    assert "Loading weights" not in proc.stderr and "Writing model shards" not in proc.stderr, proc.stderr
    assert "it/s]" not in proc.stderr, proc.stderr


def test_a_users_own_progress_bar_setting_wins(tmp_path: Path) -> None:
    """The default is set with ``setdefault``: ``HF_HUB_DISABLE_PROGRESS_BARS=0`` brings the bars back."""
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "0"}
    env["PYTHONPATH"] = f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    proc = _tirl(*_sft_argv(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Loading weights" in proc.stderr, proc.stderr
