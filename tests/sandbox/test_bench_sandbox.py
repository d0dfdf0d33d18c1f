"""bench_sandbox --json at its smallest size: the warm unisolated fork server is a way of its own.

A real run (the real bubblewrap warm pool, the same fork-server design
without isolation, and ``python -c``; 5 executions per way, a few seconds).
Not covered: the figures' size (they need a quiet machine:
``benchmarks/run_all.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tirl.sandbox.bwrap import bwrap_problem

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_sandbox.py"


def test_isolation_cost_and_start_up_saving_are_separate_rows() -> None:
    if (problem := bwrap_problem()) is not None:
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    cmd = [sys.executable, str(BENCH), "--json", "--n", "5", "--runs", "1", "--skip-bwrap", "--pool-size", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (run,) = out["runs"]
    assert set(run) == {"unisolated", "warm_unisolated", "warm_pool"}
    for way in run.values():
        assert way["failed"] == 0 and way["p50_ms"] > 0 and way["per_s"] > 0
    s = out["summary"]
    pool, plain, cold = run["warm_pool"], run["warm_unisolated"], run["unisolated"]
    assert s["isolation_cost_p50"]["median"] == round(pool["p50_ms"] / plain["p50_ms"], 3)
    assert s["isolation_cost_per_s"]["median"] == round(pool["per_s"] / plain["per_s"], 3)
    assert s["warm_pool_p50_vs_unisolated"]["median"] == round(pool["p50_ms"] / cold["p50_ms"], 3)
