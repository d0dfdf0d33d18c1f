"""``benchmarks/gpu_check.sh`` dry-run on the CPU (``DEVICE=cpu``): the whole script, real processes.

Tier A runs with a small ``tirl model init`` model and the same assertions as on a GPU except the peak-memory
ordering (no CUDA allocator on a CPU); Tier B is asked for too and must FAIL here (no GPU, no vLLM): a tier
that cannot run is a failure, never a skip, so the script exits 1 with exactly that failure.

It takes ~25 s of CPU (three processes import torch: the script, its ``tirl train --nproc`` refusal, and the
in-process two-step training run), longer in wall time on a busy machine: the price of running the real script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_dry_run_passes_tier_a_and_fails_the_missing_tier_b(tmp_path: Path) -> None:
    env = {**os.environ, "DEVICE": "cpu", "TIERS": "AB", "PYTHON": sys.executable}
    cmd = ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--layers", "2", "--hidden", "64", "--vocab", "512",
           "--batch", "2", "--seq", "64", "--work", str(tmp_path / "work")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=280, cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    for check in ("machine", "model", "A1 memory options", "A2 tirl train (2 steps)",
                  "A3 --nproc beyond the devices refused"):  # fmt: skip
        assert f"PASS {check} (" in out, out + proc.stderr
    for option in ("fp32", "bf16", "checkpointing", "bf16+checkpointing", "lora", "lora+bf16+checkpointing"):
        assert f"    {option}: step-0 loss " in out and "train tokens/s" in out
    assert "FAIL B vLLM" in out and "Tier B needs --device cuda" in out
    assert "5/6 checks passed; FAILED: ['B vLLM']" in out, out
