"""bench_async runs small, prints the documented JSON, and its virtual-clock figures are consistent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_async.py"


def test_bench_async_json_shape_and_ordering() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--tasks", "4", "--steps", "4"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out)[:2] == ["shared_device", "weight_sync"]
    shared, ws = out.pop("shared_device"), out.pop("weight_sync")
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
    # the weight sync: 7e9 parameters x 2 bytes / 25 GB/s by default
    assert ws["sync_s"] == pytest.approx(7e9 * 2 / 25e9) and ws["train_s"] > 0
    # one shared device: training and generation take turns, so overlapping steps gains less
    assert set(shared) == {"sync", "async", "bound", "by_k"} and set(shared["by_k"]) == {"1", "2", "3", "4"}
    assert shared["sync"]["steps_per_s"] == pytest.approx(out["sync"]["steps_per_s"], rel=1e-9)
    assert shared["async"]["steps_per_s"] == max(shared["by_k"].values())
    assert shared["async"]["steps_per_s"] <= out["async"]["steps_per_s"] * (1 + 1e-9)
    assert shared["async"]["steps_per_s"] <= shared["bound"]["steps_per_s"] * (1 + 1e-9)
    assert shared["bound"]["steps_per_s"] < out["bound"]["steps_per_s"]


def test_bench_async_without_weight_sync_pauses_nothing() -> None:
    def run(*extra: str) -> dict:
        cmd = [sys.executable, str(BENCH), "--json", "--tasks", "4", "--steps", "3", *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    none, slow = run("--params", "0"), run("--sync-gb-s", "0.01")  # 14 GB at 10 MB/s: 1400 s per update
    assert none["weight_sync"]["sync_s"] == 0 and slow["weight_sync"]["sync_s"] == pytest.approx(1400)
    for key in ("sync", "async"):
        assert slow[key]["steps_per_s"] < none[key]["steps_per_s"]
        assert slow["shared_device"][key]["steps_per_s"] < none["shared_device"][key]["steps_per_s"]


@pytest.mark.parametrize("bad", [["--steps", "0"], ["--sync-gb-s", "0"], ["--params", "-1"], ["--params", "nan"]])
def test_bench_async_bad_arguments_are_one_error_line(bad: list[str]) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), *bad], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
