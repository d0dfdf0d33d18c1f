"""bench_async runs small, prints the documented JSON, and its virtual-clock figures are consistent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_async.py"


def test_bench_async_json_shape_and_ordering() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--tasks", "4", "--steps", "4"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"sync", "sync_batch", "one_step_off", "async", "bound", "by_k"}
    by_k = out.pop("by_k")
    assert set(by_k) == {"1", "2", "3", "4"} and by_k["1"] == out["one_step_off"]["steps_per_s"]
    assert max(by_k.values()) == out["async"]["steps_per_s"]
    for name, row in out.items():
        assert set(row) == ({"steps_per_s", "max_staleness"} if name == "async" else {"steps_per_s"})
        assert row["steps_per_s"] > 0
    assert 1 <= out["async"]["max_staleness"] <= 4
    # exact discrete-event figures: the best K is at least K=1, and no schedule beats the generator's capacity
    assert out["async"]["steps_per_s"] >= out["one_step_off"]["steps_per_s"]
    assert out["async"]["steps_per_s"] <= out["bound"]["steps_per_s"] * (1 + 1e-9)
    assert out["sync"]["steps_per_s"] < out["one_step_off"]["steps_per_s"]  # the training time is hidden


def test_bench_async_bad_arguments_are_one_error_line() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--steps", "0"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
