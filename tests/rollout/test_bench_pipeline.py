"""The pipeline benchmark runs, prints the documented JSON, and its exact (virtual-time) figures hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_pipeline.py"


def _load():
    return load_benchmark("bench_pipeline", "bench_pipeline")


def test_bound_is_the_bottleneck_resource_capacity() -> None:
    bp = _load()
    plans = [bp.Plan(init_s=10.0, eval_s=5.0, tokens=[100, 100], tools=[1.0])] * 8
    b = bp.bound_of(plans)
    full = bp.T_TOKEN * (1 + bp.ALPHA)
    assert b.gen_s == pytest.approx(8 * 200 * full / bp.GEN_SLOTS)
    assert b.sandbox_s == pytest.approx(8 * 16.0 / bp.SANDBOX_SLOTS)
    assert b.traj_per_model_s(8) == pytest.approx(8 / max(b.gen_s, b.sandbox_s))


def test_virtual_clock_loop_runs_sleeps_in_zero_wall_time() -> None:
    import asyncio
    import time

    async def main() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.gather(asyncio.sleep(100.0), asyncio.sleep(250.0))
        return loop.time() - t0

    from tirl.testing.clock import VirtualTimeLoop

    w0 = time.perf_counter()
    elapsed = VirtualTimeLoop.run(main())
    assert elapsed == pytest.approx(250.0)
    assert time.perf_counter() - w0 < 5.0


@pytest.mark.slow
def test_json_output_and_exact_ordering_on_small_workloads() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--virtual", "--json", "--n-scale", "0.25"],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
        cwd=ROOT,
    )
    data = json.loads(out.stdout)
    assert list(data) == ["headline", "memory", "workloads", "machine"]
    assert data["machine"]["clock"] == "virtual" and data["machine"]["live_budget"] == 112
    assert set(data["workloads"]) == {"init-heavy", "run-heavy", "eval-heavy", "heavy-tail"}
    baselines = {"sync_batch", "async_batch", "sync_batch_equal", "async_batch_equal", "gather_all"}
    for name, row in data["workloads"].items():
        assert set(row) == baselines | {"pipeline", "bound"}
        # exact simulation: the pipeline never loses to a baseline by more than 2% and never beats the bound
        for b in baselines:
            assert row["pipeline"] >= 0.98 * row[b], (name, b)
        assert row["pipeline"] <= row["bound"] * 1.001, name
        # a bigger batch amortises the barrier: the equal-budget baselines are at least as fast as B = 32
        assert row["async_batch_equal"] >= row["async_batch"] * 0.999, name
        assert row["sync_batch_equal"] >= row["sync_batch"] * 0.999, name
        # beside every entry's throughput: its peak live environments and traced heap
        mem = data["memory"][name]
        assert set(mem) == baselines | {"pipeline"}
        for entry, m in mem.items():
            assert m["traj_per_s"] == row[entry] and m["max_live_envs"] >= 1 and m["peak_traced_mb"] > 0
        assert mem["pipeline"]["max_live_envs"] <= data["machine"]["live_budget"], name
    head = data["headline"]
    assert head["workload"] == "heavy-tail"
    tail = data["workloads"]["heavy-tail"]
    assert head["pipeline_vs_gather_all"] == pytest.approx(tail["pipeline"] / tail["gather_all"])
    assert head["pipeline_vs_best_baseline"] == pytest.approx(tail["pipeline"] / tail[head["best_baseline"]])
    assert head["max_live_envs"]["pipeline"] < head["max_live_envs"]["gather_all"]  # the memory advantage
