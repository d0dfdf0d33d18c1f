"""Synchronous vs bounded-staleness asynchronous RL: training steps per second on bench_pipeline's clocks.

A discrete-event simulation on :class:`tirl.testing.clock.VirtualTimeLoop`
(exact, no sleeping, load-independent): on a 2-core machine real training and
real generation would fight for the same cores, so the timing of either says
nothing about overlapping them.

What is real and what is modelled:

* **Real**: the rollout strategy (:class:`tirl.rollout.strategies.Rollout`,
  the ``pipeline`` or ``sync_batch`` schedule) and the bounded-staleness
  scheduler :func:`tirl.rollout.staleness.run_overlapped` — the same code
  ``tirl train --set rollout.max_staleness=K`` runs — and the generator's
  request queue :class:`tirl.rollout.staleness.OldestStepFirst` (the queue
  in front of ``OpenAIGenerator``'s concurrency limit: waiting requests of
  the oldest in-flight step go first; plain FIFO when one step is in flight).
* **Modelled** (from ``bench_pipeline.py``): the generator (``GEN_SLOTS`` = 16
  slots, per-token time rising with load; its queue is the real one above), the sandbox (24 slots), the
  heavy-tail workload's episodes (turns ~ logN(3, 1) clipped to [1, 40]),
  and the training step: a sleep of ``TRAIN_FRACTION`` (0.5) × the mean
  rollout time of a ``sync`` step. Training does not use the generator.

Every mode runs the same ``--steps`` steps of the same episodes
(``--tasks`` × 4 trajectories per step, drawn once per step from one seed):

* ``sync``: K = 0, the pipeline inside each step (rollout, then train);
* ``sync_batch``: K = 0, the ``sync_batch`` schedule (init all → run all →
  eval all) with ``B`` = the pipeline's live-env budget (112), i.e. the
  conventional synchronous system;
* ``one_step_off``: K = 1 with the pipeline;
* ``async``: the best K in 1..4 with the pipeline (K reported);
* ``bound``: the generator's capacity for the work (every token at full-load
  speed on all 16 slots), or the trainer's if that is slower.

    python benchmarks/bench_async.py            # table
    python benchmarks/bench_async.py --json     # {"sync": {"steps_per_s": F}, ..., "async": {..., "max_staleness": K},
                                                #  "bound": {...}, "by_k": {"1": F, ..., "4": F}}
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import (
    GEN_SLOTS,
    GROUP,
    LIVE_BUDGET,
    POOLS,
    WORKLOADS,
    Plan,
    Resources,
    SimEnv,
    SimRunner,
    bound_of,
    draw,
)
from tirl.config import RolloutConfig
from tirl.envs.base import Task
from tirl.rollout.base import RolloutRequest
from tirl.rollout.pipeline import episode_seed
from tirl.rollout.staleness import OldestStepFirst, run_overlapped
from tirl.rollout.strategies import make_strategy
from tirl.testing.clock import VirtualTimeLoop

WORKLOAD = next(w for w in WORKLOADS if w.name == "heavy-tail")
TRAIN_FRACTION = 0.5  # a training step takes this fraction of a sync step's rollout time
MAX_K = 4


@dataclasses.dataclass(frozen=True)
class Mode:
    """One column: a rollout schedule, its batch size and the staleness bound."""

    strategy: str
    max_staleness: int
    batch_size: int = 0


def step_plans(tasks: int, steps: int, seed: int) -> list[list[Plan]]:
    """The episodes of every step (``tasks * GROUP`` each), drawn once."""
    n = tasks * GROUP
    plans = draw(dataclasses.replace(WORKLOAD, n=n * steps), seed)
    return [plans[i * n : (i + 1) * n] for i in range(steps)]


def request_of(step: int, plans: list[Plan]) -> tuple[RolloutRequest, dict[int, Plan]]:
    tasks = [Task(id=f"s{step}-t{i}", prompt="fix the bug") for i in range(len(plans) // GROUP)]
    by_seed = {episode_seed(step, ti, k): plans[ti * GROUP + k] for ti in range(len(tasks)) for k in range(GROUP)}
    return RolloutRequest(tasks=tasks, group_size=GROUP, step=step, policy_version=0), by_seed


async def run_mode(mode: Mode, plans: list[list[Plan]], train_s: float) -> dict[str, Any]:
    """All steps of one mode on one generator and sandbox; times in model seconds."""
    res = Resources(scale=1.0, lag_s=0.0)
    res.gen.sem = OldestStepFirst(GEN_SLOTS)  # type: ignore[assignment]  # the real queue, oldest step first
    cfg = RolloutConfig(
        strategy=mode.strategy,  # type: ignore[arg-type]
        trace_interval_s=1e6,
        init_timeout_s=86_400.0,  # the range maximum: no virtual episode comes near it
        run_timeout_s=86_400.0,
        eval_timeout_s=86_400.0,
        retries=0,
        batch_size=mode.batch_size,
        **POOLS,
    )
    rollout_s: list[float] = []
    live: list[float] = []

    async def produce(step: int) -> int:
        request, by_seed = request_of(step, plans[step - 1])
        strat = make_strategy(cfg, lambda task: SimEnv(res, by_seed), SimRunner(res))
        batch = await strat.collect(request)
        await strat.close()
        assert batch.stats["rollout/failed"] == 0
        rollout_s.append(batch.wall_s)
        live.append(batch.stats["rollout/max_live_envs"])
        return len(batch.trajectories)

    async def consume(step: int, n: int, lag: int) -> None:
        await asyncio.sleep(train_s)

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    timings = await run_overlapped(range(1, len(plans) + 1), mode.max_staleness, produce, consume)
    total = loop.time() - t0
    return {
        "steps_per_s": len(plans) / total,
        "model_s": total,
        "rollout_s_mean": sum(rollout_s) / len(rollout_s),
        "max_lag": max(t.lag for t in timings),
        "max_live_envs": max(live),
    }


def simulate(tasks: int, steps: int, seed: int, sync_batch_live: int = LIVE_BUDGET) -> dict[str, Any]:
    plans = step_plans(tasks, steps, seed)
    probe = VirtualTimeLoop.run(run_mode(Mode("pipeline", 0), plans, 0.0))  # the sync rollout time alone
    train_s = TRAIN_FRACTION * probe["rollout_s_mean"]
    runs = {
        "sync": VirtualTimeLoop.run(run_mode(Mode("pipeline", 0), plans, train_s)),
        "sync_batch": VirtualTimeLoop.run(run_mode(Mode("sync_batch", 0, sync_batch_live), plans, train_s)),
    }
    by_k = {k: VirtualTimeLoop.run(run_mode(Mode("pipeline", k), plans, train_s)) for k in range(1, MAX_K + 1)}
    best = max(by_k, key=lambda k: by_k[k]["steps_per_s"])
    runs["one_step_off"] = by_k[1]
    runs["async"] = {**by_k[best], "max_staleness": best}
    b = bound_of([p for step in plans for p in step])
    per_step = max(b.gen_s, b.sandbox_s) / steps
    bound = 1.0 / max(per_step, train_s)
    out: dict[str, Any] = {name: {"steps_per_s": r["steps_per_s"]} for name, r in runs.items() if name != "async"}
    out["async"] = {"steps_per_s": runs["async"]["steps_per_s"], "max_staleness": best}
    out["bound"] = {"steps_per_s": bound}
    out["by_k"] = {str(k): r["steps_per_s"] for k, r in by_k.items()}  # the staleness curve (run_all plots it)
    details = {
        "workload": WORKLOAD.what,
        "trajectories_per_step": tasks * GROUP,
        "steps": steps,
        "train_s": train_s,
        "sync_rollout_s": probe["rollout_s_mean"],
        "bottleneck": b.bottleneck,
        "by_k": {k: r["steps_per_s"] for k, r in by_k.items()},
        "runs": runs,
    }
    return {"result": out, "details": details}


def print_table(res: dict[str, Any]) -> None:
    r, d = res["result"], res["details"]
    sync = r["sync"]["steps_per_s"]
    print(
        f"heavy-tail: {d['trajectories_per_step']} trajectories/step x {d['steps']} steps; "
        f"train step {d['train_s']:.1f} model s = {TRAIN_FRACTION} x sync rollout {d['sync_rollout_s']:.1f} s; "
        f"bottleneck {d['bottleneck']}; virtual clock"
    )
    for name in ("sync", "sync_batch", "one_step_off", "async", "bound"):
        v = r[name]["steps_per_s"]
        extra = f"  (K={r['async']['max_staleness']})" if name == "async" else ""
        lag = d["runs"].get(name, {}).get("max_lag")
        lag_s = f"  max lag {lag}" if lag is not None else ""
        print(f"  {name:<13} {v * 3600:8.1f} steps/h  {v / sync:5.2f}x sync{lag_s}{extra}")
    a = r["async"]["steps_per_s"]
    print(
        f"  async/sync {a / sync:.2f}x   async/sync_batch {a / r['sync_batch']['steps_per_s']:.2f}x "
        f"(AReaL reports 2.77x)   async/bound {a / r['bound']['steps_per_s']:.2f}"
    )
    print("  by K: " + "  ".join(f"K={k} {v * 3600:.1f}/h" for k, v in d["by_k"].items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the result object only")
    ap.add_argument("--tasks", type=int, default=32, help="tasks per step (x 4 trajectories)")
    ap.add_argument("--steps", type=int, default=30, help="training steps per mode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--sync-batch-live",
        type=int,
        default=LIVE_BUDGET,
        help="live envs sync_batch may hold (default: one pipeline's budget, 112; with K >= 1 several steps' "
        "pipelines run at once, so give it a whole step, e.g. 128, for the strictest comparison)",
    )
    args = ap.parse_args()
    if args.tasks < 1 or args.steps < 1 or args.sync_batch_live < 1:
        print("error: --tasks, --steps and --sync-batch-live must be >= 1", file=sys.stderr)
        return 2
    res = simulate(args.tasks, args.steps, args.seed, args.sync_batch_live)
    if args.json:
        print(json.dumps(res["result"]))
    else:
        print_table(res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
