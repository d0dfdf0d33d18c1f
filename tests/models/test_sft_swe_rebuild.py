"""``tirl sft --env swe-lite`` is a byte-identical recipe: the same command twice writes the same checkpoint.

The shipped warm start for swe-lite (``tiny-swe``) is rebuilt by a chain of five such commands
(``tirl.models.builtin.SWE_SFT_COMMAND``, about 1 h 45 min); this checks the recipe behind each stage at a quick
size: ``tirl sft --env swe-lite --init src/tirl/assets/tiny-tir`` run twice as a subprocess (4
demonstrations through the real swe-lite env, sandbox and pytest judge; 2 steps; one greedy held-out
episode), and every file of the two checkpoints but the card (it holds the wall time) compared byte for
byte. About 5 min on the 2-core machine at load 16-18 (60 s of it CPU): each run imports torch and builds
demonstrations through the real sandbox.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["sft", "--env", "swe-lite", "--init", "src/tirl/assets/tiny-tir", "--seed", "0", "--threads", "1",
         "--copy-steps", "0", "--lr", "1e-3", "--train-tasks", "4", "--steps", "2", "--batch-size", "2",
         "--eval-tasks", "1", "--eval-every", "100"]  # fmt: skip


def _build_both(a: Path, b: Path) -> None:
    """The two builds side by side (one thread each: the machine's two cores), each its own process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}  # workspaces and cache where the real command puts them
    procs = [subprocess.Popen([sys.executable, "-m", "tirl.cli", *QUICK, "--out", str(out)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for out in (a, b)]  # fmt: skip
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr[-2000:]
        assert "demonstrations: 4 of 4 tasks" in stdout  # the real judge passed every expert episode


@pytest.mark.slow
def test_the_swe_recipe_rebuilds_byte_identically(tmp_path: Path) -> None:
    _build_both(tmp_path / "a", tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "model.safetensors" in names and names == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in names:
        if name != "README.md":
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    tiny_tir = (ROOT / "src/tirl/assets/tiny-tir/model.safetensors").read_bytes()
    assert (tmp_path / "a" / "model.safetensors").read_bytes() != tiny_tir  # it trained
