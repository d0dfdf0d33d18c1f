"""bench_filter --json at its smallest size: the like-for-like headline first, the parallel figure beside it.

A real run (subprocesses of ``tirl filter`` and the reference loop on 200
trajectories, about 4 s). Not covered: the figures' size (they need a quiet
machine: ``benchmarks/run_all.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_filter.py"


def test_json_leads_with_turns_per_cpu_second_of_one_worker() -> None:
    cmd = [sys.executable, str(BENCH), "--json", "--turns", "300", "--repeats", "1", "--trajectories", "200",
           "--cli-repeats", "1"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert list(out)[:3] == ["turns_per_cpu_s_one_worker", "parallel", "reference_turns_per_cpu_s"]
    assert out["turns_per_cpu_s_one_worker"] == out["cli"]["filter_1"]["turns_per_cpu_s"]
    assert out["reference_turns_per_cpu_s"] == out["cli"]["reference"]["turns_per_cpu_s"]
    par = out["parallel"]
    assert par["turns_per_s"] == out["cli"]["filter"]["turns_per_s"]
    assert par["turns_per_cpu_s"] == out["cli"]["filter"]["turns_per_cpu_s"]
    assert par["usable_cpus"] >= 1 and "default" in par["workers"]
    for spread in (out["turns_per_cpu_s_one_worker"], par["turns_per_s"], par["turns_per_cpu_s"]):
        assert set(spread) == {"min", "median", "max"} and 0 < spread["min"] <= spread["median"] <= spread["max"]


def test_without_the_cli_part_there_is_no_headline() -> None:
    cmd = [sys.executable, str(BENCH), "--json", "--turns", "100", "--repeats", "1", "--trajectories", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert "turns_per_cpu_s_one_worker" not in out and out["cli"] is None and out["turns_per_s"] > 0
