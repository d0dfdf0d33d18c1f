"""``bench_pipeline.py --real`` on the SWE job's settings, at toy size: every entry, its figures, the env preset.

A real run (the built-in model, the real sandbox and pytest judge, 2 tasks × 2, 2 turns of 8 tokens); about
20 s on 2 idle cores, most of it importing torch and the first sandbox start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_real_mode_reports_every_entry_with_throughput_busy_fraction_live_envs_and_rss() -> None:
    small = ["--real-tasks", "2", "--real-group", "2", "--real-max-turns", "2", "--real-max-new", "8",
             "--real-run-workers", "2", "--real-batch-window", "0.01"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_pipeline.py"), "--real", "--json", *small],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    real = json.loads(proc.stdout.strip().splitlines()[-1])["real"]
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
