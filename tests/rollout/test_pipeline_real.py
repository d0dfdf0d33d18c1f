"""``bench_pipeline.py --real`` on the SWE job's settings, at toy size: every entry, its figures, the env preset.

A real run (the built-in model, the real sandbox and pytest judge, 2 tasks × 2, 2 turns of 8 tokens); about
20 s on 2 idle cores, most of it importing torch and the first sandbox start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _bench_table() -> ModuleType:
    return load_benchmark("bench_table")


@pytest.mark.slow
def test_real_mode_reports_every_entry_with_throughput_busy_fraction_live_envs_and_rss(
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = _bench_table()
    bench = next(b for b in table.BENCHMARKS if b.name == "pipeline_real")
    small = list(table.REAL_QUICK)  # what `run_all.py --quick --only pipeline_real` runs
    assert bench.argv(quick=True)[1:] == ["--json", *small]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_pipeline.py"), "--json", *small],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    real = result["real"]
    assert real["env"]["difficulty"] == 2 and real["env"]["max_turns"] == 2  # the preset, then the override
    assert real["env"]["max_new_tokens"] == 8 and real["live_budget"] == 4 + 3 * 2 + 4
    assert real["tasks"] == 2 and real["group_size"] == 2
    for name in ("sync_batch", "async_batch_equal", "gather_all", "pipeline"):
        row = real[name]
        assert row["traj_per_s"] > 0 and 0.0 <= row["gpu_util"] <= 1.0, (name, row)
        assert 1 <= row["max_live_envs"] <= 4 and sum(row["terminations"].values()) == 4, (name, row)
        assert row["rss_peak_mb"] is not None and row["rss_peak_mb"] >= 0, (name, row)
    assert real["sync_batch"]["batch_size"] == 2 and real["gather_all"]["batch_size"] == 4
    assert real["async_batch_equal"]["batch_size"] == real["live_budget"]
    assert real["sync_batch"]["max_live_envs"] <= 2  # its barrier: one batch of B = 2 alive at a time
    # the results page reads every figure of this output (run_all.py's table), the ratios as computed here
    read = {f.name: f.read(result) for f in bench.figures}
    assert all(value is not None for value in read.values()), read
    for other in ("gather_all", "async_batch_equal", "sync_batch"):
        want = real["pipeline"]["traj_per_s"] / real[other]["traj_per_s"]
        assert read[f"pipeline ÷ {other} (trajectories/s)"] == want
    assert read["gather_all: peak live environments"] == real["gather_all"]["max_live_envs"]
    # the table a user sees without --json (it once looked up an entry that does not exist: a KeyError)
    load_benchmark("pipeline_real").print_table(real)
    table = capsys.readouterr().out.strip().splitlines()
    assert len(table) == 6 and all(f"pipeline/{n} " in table[-1] for n in ("sync_batch", "gather_all"))
    want = real["pipeline"]["traj_per_s"] / real["async_batch_equal"]["traj_per_s"]
    assert f"pipeline/async_batch_equal {want:.2f}x" in table[-1]
