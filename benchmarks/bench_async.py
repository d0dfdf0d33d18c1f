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
  rollout time of a ``sync`` step; and the **weight sync** after every update:
  ``--params`` × ``--param-bytes`` ÷ ``--sync-gb-s`` (default 7e9 × 2 B ÷
  25 GB/s = 0.56 s, a stated bandwidth, not measured here), during which the
  generator pauses (every slot held; requests in flight finish first).

Two placements of training:

* **disaggregated** (the top-level keys): training runs on its own device and
  does not use the generator's; only the weight sync pauses the generator;
* **shared device** (``shared_device``): training and generation take turns
  on one device: each update (and its weight sync) holds every generator
  slot, so an asynchronous schedule can only fill the generator's idle tail
  of a step, never overlap training with generation. Its ``bound`` is one
  device doing a step's generation, update and sync in turn.

Not modelled: the learning cost of staleness (a K-step-old policy's samples
are worth less per step). ``benchmarks/bench_staleness.py`` measures it on the
real job (held-out accuracy and training-reward area at K = 0, 1, 2, 4 over
paired seeds; figures in docs/scaling.md): read a speed-up here together with it.

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
    python benchmarks/bench_async.py --json     # {"shared_device": {"sync", "async", "bound", "by_k"},
                                                #  "weight_sync": {"params", ..., "sync_s", "train_s"},
                                                #  "sync": {"steps_per_s": F}, ..., "async": {..., "max_staleness": K},
                                                #  "bound": {...}, "by_k": {"1": F, ..., "4": F}}
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
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
from tirl.rollout.staleness import ROLLOUT_STEP, OldestStepFirst, run_overlapped
from tirl.rollout.strategies import make_strategy
from tirl.testing.clock import VirtualTimeLoop

WORKLOAD = next(w for w in WORKLOADS if w.name == "heavy-tail")
TRAIN_FRACTION = 0.5  # a training step takes this fraction of a sync step's rollout time
MAX_K = 4


@dataclasses.dataclass(frozen=True)
class Mode:
    """One column: a rollout schedule, its batch size, the staleness bound and where training runs."""

    strategy: str
    max_staleness: int
    batch_size: int = 0
    shared: bool = False  # training takes the generator's device (all its slots) for its step


@dataclasses.dataclass(frozen=True)
class WeightSync:
    """The modelled weight transfer after every update: parameters x bytes / bandwidth (model seconds).

    The generator pauses for it (it cannot sample while its weights change).
    """

    params: float
    bytes_per_param: float
    bandwidth_gb_s: float

    @property
    def seconds(self) -> float:
        """The transfer time; 0 when ``params`` is 0 (the model without it)."""
        return 0.0 if self.params <= 0 else self.params * self.bytes_per_param / (self.bandwidth_gb_s * 1e9)


async def hold_device(gen: OldestStepFirst, seconds: float) -> None:
    """Take every generator slot (ahead of every rollout's waiting request), keep them ``seconds``, give them back.

    Requests already generating finish first (no preemption); new ones wait.
    """

    async def hold() -> None:
        ROLLOUT_STEP.set(-1)  # this task's context only: older than any rollout step, so served first
        for _ in range(GEN_SLOTS):
            await gen.acquire()
        try:
            await asyncio.sleep(seconds)
        finally:
            for _ in range(GEN_SLOTS):
                gen.release()

    await asyncio.create_task(hold())


def step_plans(tasks: int, steps: int, seed: int) -> list[list[Plan]]:
    """The episodes of every step (``tasks * GROUP`` each), drawn once."""
    n = tasks * GROUP
    plans = draw(dataclasses.replace(WORKLOAD, n=n * steps), seed)
    return [plans[i * n : (i + 1) * n] for i in range(steps)]


def request_of(step: int, plans: list[Plan]) -> tuple[RolloutRequest, dict[int, Plan]]:
    tasks = [Task(id=f"s{step}-t{i}", prompt="fix the bug") for i in range(len(plans) // GROUP)]
    by_seed = {episode_seed(step, ti, k): plans[ti * GROUP + k] for ti in range(len(tasks)) for k in range(GROUP)}
    return RolloutRequest(tasks=tasks, group_size=GROUP, step=step, policy_version=0), by_seed


async def run_mode(mode: Mode, plans: list[list[Plan]], train_s: float, sync_s: float = 0.0) -> dict[str, Any]:
    """All steps of one mode on one generator and sandbox; times in model seconds.

    After each update the generator pauses ``sync_s`` for the weights; with
    ``mode.shared`` it is paused for the update too (one device, taking turns).
    """
    res = Resources(scale=1.0, lag_s=0.0)
    gen = OldestStepFirst(GEN_SLOTS)
    res.gen.sem = gen  # type: ignore[assignment]  # the real queue, oldest step first
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
        assert not any(t.failed for t in batch.trajectories)
        rollout_s.append(batch.wall_s)
        live.append(batch.stats.max_live_envs)
        return len(batch.trajectories)

    async def consume(step: int, n: int, lag: int) -> None:
        if mode.shared:
            await hold_device(gen, train_s + sync_s)
            return
        await asyncio.sleep(train_s)  # on the trainer's own device
        if sync_s > 0:
            await hold_device(gen, sync_s)

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


def simulate(
    tasks: int, steps: int, seed: int, sync_batch_live: int = LIVE_BUDGET, sync: WeightSync | None = None
) -> dict[str, Any]:
    plans = step_plans(tasks, steps, seed)
    sync_s = sync.seconds if sync is not None else 0.0
    probe = VirtualTimeLoop.run(run_mode(Mode("pipeline", 0), plans, 0.0))  # the sync rollout time alone
    train_s = TRAIN_FRACTION * probe["rollout_s_mean"]

    def run(mode: Mode) -> dict[str, Any]:
        return VirtualTimeLoop.run(run_mode(mode, plans, train_s, sync_s))  # type: ignore[no-any-return]

    b = bound_of([p for step in plans for p in step])
    gen_per_step = max(b.gen_s, b.sandbox_s) / steps
    shared = {"sync": run(Mode("pipeline", 0, shared=True))}
    shared_k = {k: run(Mode("pipeline", k, shared=True)) for k in range(1, MAX_K + 1)}
    best_shared = max(shared_k, key=lambda k: shared_k[k]["steps_per_s"])
    runs = {"sync": run(Mode("pipeline", 0)), "sync_batch": run(Mode("sync_batch", 0, sync_batch_live))}
    by_k = {k: run(Mode("pipeline", k)) for k in range(1, MAX_K + 1)}
    best = max(by_k, key=lambda k: by_k[k]["steps_per_s"])
    runs["one_step_off"] = by_k[1]
    runs["async"] = {**by_k[best], "max_staleness": best}
    out: dict[str, Any] = {
        "shared_device": {
            "sync": {"steps_per_s": shared["sync"]["steps_per_s"]},
            "async": {"steps_per_s": shared_k[best_shared]["steps_per_s"], "max_staleness": best_shared},
            # one device does the generation, the update and the weight sync in turn
            "bound": {"steps_per_s": 1.0 / (gen_per_step + train_s + sync_s)},
            "by_k": {str(k): r["steps_per_s"] for k, r in shared_k.items()},
        },
        "weight_sync": {**dataclasses.asdict(sync or WeightSync(0, 0, 1)), "sync_s": sync_s, "train_s": train_s},
    }
    out.update({name: {"steps_per_s": r["steps_per_s"]} for name, r in runs.items() if name != "async"})
    out["async"] = {"steps_per_s": runs["async"]["steps_per_s"], "max_staleness": best}
    # disaggregated: the generator's capacity, the trainer's (update + the generator's pause for the weights)
    out["bound"] = {"steps_per_s": 1.0 / max(gen_per_step + sync_s, train_s + sync_s)}
    out["by_k"] = {str(k): r["steps_per_s"] for k, r in by_k.items()}  # the staleness curve (run_all plots it)
    details = {
        "workload": WORKLOAD.what,
        "trajectories_per_step": tasks * GROUP,
        "steps": steps,
        "train_s": train_s,
        "sync_s": sync_s,
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
    sh, ws = r["shared_device"], r["weight_sync"]
    print(f"shared device (training and generation take turns; weight sync {ws['sync_s']:.2f} s per update):")
    for name in ("sync", "async", "bound"):
        v = sh[name]["steps_per_s"]
        extra = f"  (K={sh['async']['max_staleness']})" if name == "async" else ""
        print(f"  {name:<13} {v * 3600:8.1f} steps/h  {v / sync:5.2f}x sync{extra}")


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
    ap.add_argument(
        "--params",
        type=float,
        default=7e9,
        help="parameters whose weights go to the generator after "
        "each update (default 7e9: T_TOKEN = 20 ms/token is a 7B model's order; 0 = no weight sync)",
    )
    ap.add_argument("--param-bytes", type=float, default=2.0, help="bytes per parameter sent (default 2: bf16)")
    ap.add_argument("--sync-gb-s", type=float, default=25.0, help="the transfer's bandwidth in GB/s (default 25: "
                    "the order of PCIe 4.0 x16 or a 200 Gb/s link; an assumption, not measured here)")  # fmt: skip
    args = ap.parse_args()
    if args.tasks < 1 or args.steps < 1 or args.sync_batch_live < 1:
        print("error: --tasks, --steps and --sync-batch-live must be >= 1", file=sys.stderr)
        return 2
    finite = all(math.isfinite(v) for v in (args.params, args.param_bytes, args.sync_gb_s))
    if not finite or args.params < 0 or args.param_bytes <= 0 or args.sync_gb_s <= 0:
        print("error: --params must be >= 0, --param-bytes and --sync-gb-s > 0 (finite numbers)", file=sys.stderr)
        return 2
    sync = WeightSync(params=args.params, bytes_per_param=args.param_bytes, bandwidth_gb_s=args.sync_gb_s)
    res = simulate(args.tasks, args.steps, args.seed, args.sync_batch_live, sync)
    if args.json:
        print(json.dumps(res["result"]))
    else:
        print_table(res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
