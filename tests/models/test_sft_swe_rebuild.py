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

from tirl.models.kernels import PORTABLE_ENV

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["sft", "--env", "swe-lite", "--init", "src/tirl/assets/tiny-tir", "--seed", "0", "--threads", "1",
         "--copy-steps", "0", "--lr", "1e-3", "--train-tasks", "4", "--steps", "2", "--batch-size", "2",
         "--eval-tasks", "1", "--eval-every", "100"]  # fmt: skip


def _build_both(a: Path, b: Path) -> None:
    """The two builds side by side (one thread each: the machine's two cores), each its own process."""
    _build_all([(a, [], {}), (b, [], {})])


def _build_all(builds: list[tuple[Path, list[str], dict[str, str]]]) -> None:
    """Each ``(out, extra flags, extra environment)`` as its own ``tirl sft`` process, all side by side."""
    base = {k: v for k, v in os.environ.items() if k not in PORTABLE_ENV}  # only what each build sets
    base["PYTHONPATH"] = str(ROOT / "src")  # workspaces and cache where the real command puts them
    procs = [subprocess.Popen([sys.executable, "-m", "tirl.cli", *QUICK, *flags, "--out", str(out)], cwd=ROOT,
                              env={**base, **extra}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for out, flags, extra in builds]  # fmt: skip
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


@pytest.mark.slow
def test_portable_kernels_write_the_same_bytes_whatever_dispatch_the_environment_asks(tmp_path: Path) -> None:
    """``--kernels portable`` under AVX2 dispatch asked for = the native command with the portable variables set
    before it starts; without the pin, AVX2 dispatch writes other bytes (so the equality is the pin's doing).

    What this stands in for: a second CPU type, whose native dispatch would differ the same way; the bytes on
    another CPU model are not measured here (tirl.models.kernels).
    """
    avx2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    pinned, outside, native = tmp_path / "pinned", tmp_path / "outside", tmp_path / "native"
    _build_all([(pinned, ["--kernels", "portable"], avx2), (outside, [], dict(PORTABLE_ENV)), (native, [], avx2)])
    weights = {p.name: (p / "model.safetensors").read_bytes() for p in (pinned, outside, native)}
    assert weights["pinned"] == weights["outside"]
    assert weights["pinned"] != weights["native"]
    card = (pinned / "README.md").read_text(encoding="utf-8")
    assert "(ATen CPU kernels DEFAULT, MKL branch COMPATIBLE)" in card
    assert "--kernels portable" in card  # the rebuild command carries the pin
    assert "(ATen CPU kernels AVX2, MKL branch AVX2)" in (native / "README.md").read_text(encoding="utf-8")
