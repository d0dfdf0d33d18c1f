"""The busy meter against a reference loop, and the pipeline trace JSONL."""

from __future__ import annotations

import random

import pytest
from rollout_fakes import STRATEGIES, FakeRunner, World, cfg, tasks

from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy
from tirl.rollout.trace import BusyMeter, PipelineTracer, StageBoard, read_trace


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Reference: total length covered by at least one interval, by a plain sweep."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


@pytest.mark.parametrize("seed", range(20))
def test_busy_meter_matches_the_union_of_request_intervals(seed: int) -> None:
    rng = random.Random(seed)
    intervals = []
    for _ in range(rng.randint(1, 15)):
        s = rng.randint(0, 100)
        intervals.append((float(s), float(s + rng.randint(0, 30))))
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], -x[1]))
    now = [0.0]
    meter = BusyMeter(clock=lambda: now[0])
    for t, kind in events:
        now[0] = t
        meter.start() if kind == 1 else meter.end()
    now[0] = 500.0
    assert meter.active == 0
    assert meter.busy_seconds() == pytest.approx(union_length(intervals))


def test_busy_meter_counts_the_open_period_and_ignores_extra_ends() -> None:
    now = [10.0]
    meter = BusyMeter(clock=lambda: now[0])
    meter.end()
    with meter.busy():
        now[0] = 12.5
        assert meter.busy_seconds() == pytest.approx(2.5)
    now[0] = 20.0
    assert meter.busy_seconds() == pytest.approx(2.5)


def test_gpu_util_is_busy_time_over_interval_time() -> None:
    now = [0.0]
    busy = [0.0]
    tracer = PipelineTracer(None, 1.0, generator_busy=lambda: busy[0], strategy="x", clock=lambda: now[0])
    board = StageBoard()
    summary = tracer.begin()
    now[0], busy[0] = 2.0, 1.5
    assert tracer.snapshot(board, 0, summary)["gpu_util"] == 0.75
    now[0], busy[0] = 4.0, 1.5
    assert tracer.snapshot(board, 0, summary)["gpu_util"] == 0.0
    assert (summary.gpu_busy_s, summary.wall_s) == (pytest.approx(1.5), pytest.approx(4.0))
    untimed = PipelineTracer(None, 1.0, clock=lambda: now[0])
    assert untimed.snapshot(board, 0)["gpu_util"] is None
    with pytest.raises(TypeError, match="busy_seconds"):
        PipelineTracer(None, 1.0, generator_busy=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval"):
        PipelineTracer(None, 0.0)


@pytest.mark.parametrize("name", STRATEGIES)
async def test_trace_jsonl_is_appended_across_steps_with_cumulative_completions(name: str, tmp_path) -> None:
    world = World()
    path = tmp_path / "run" / "pipeline_trace.jsonl"
    strategy = make_strategy(
        cfg(name), world.factory, FakeRunner(world, gen_s=0.002), trace_path=path, generator_busy=world.meter
    )
    work = tasks(4, init_s=0.004, step_s=0.002, eval_s=0.004, turns=3)
    b0 = await strategy.collect(RolloutRequest(tasks=work, group_size=2, step=0))
    b1 = await strategy.collect(RolloutRequest(tasks=work, group_size=2, step=1))
    snaps = read_trace(path)
    assert {s["step"] for s in snaps} == {0, 1}
    required = {"t", "step", "strategy", "init_queue", "run_queue", "eval_queue", "gpu_util"}
    extra = {"init_busy", "run_busy", "eval_busy", "init_blocked", "run_blocked"}
    extra |= {"init_done", "run_done", "eval_done", "live_envs"}
    for s in snaps:
        assert required | extra <= set(s)
        assert s["strategy"] == name
        assert all(s[k] >= 0 for k in extra | {"init_queue", "run_queue", "eval_queue"})
        assert s["gpu_util"] is None or 0.0 <= s["gpu_util"] <= 1.0
    ts = [s["t"] for s in snaps]
    assert ts == sorted(ts)
    done = [s["eval_done"] for s in snaps]
    assert done == sorted(done)
    last0 = [s for s in snaps if s["step"] == 0][-1]
    last1 = snaps[-1]
    assert last0["eval_done"] == 8 and last1["eval_done"] == 16 and last1["init_done"] == 16
    assert last1["init_queue"] == last1["run_queue"] == last1["eval_queue"] == last1["live_envs"] == 0
    assert any(s["gpu_util"] and s["gpu_util"] > 0 for s in snaps)
    for b in (b0, b1):
        row = b.stats.metrics()
        assert row["rollout/gpu_util"] is not None and 0.0 < row["rollout/gpu_util"] <= 1.0
        assert row["rollout/init_queue_mean"] is not None and row["rollout/init_queue_mean"] >= 0


async def test_init_queue_starts_with_the_whole_request(tmp_path) -> None:
    world = World()
    path = tmp_path / "t.jsonl"
    c = cfg("pipeline", init_workers=1, trace_interval_s=0.005)
    strategy = make_strategy(c, world.factory, FakeRunner(world), trace_path=path)
    await strategy.collect(RolloutRequest(tasks=tasks(6, init_s=0.01), group_size=2))
    first = read_trace(path)[0]
    assert first["init_queue"] >= 9  # 12 episodes, one Initializer: most of them are still waiting
    assert first["gpu_util"] is None
