"""Sync batch vs async batch vs the three-stage pipeline on the same rollout work.

Simulated mode (default) — a resource model whose stage times are sleeps:

* **Generator**: ``GEN_SLOTS`` concurrent sequences. A request of ``n``
  tokens holds one slot for ``n * T_TOKEN * (1 + ALPHA * (L - 1) / (GEN_SLOTS - 1))``
  model seconds, ``L`` being the number of requests in flight when it starts
  (itself included): per-token time doubles from an idle to a full generator,
  so the generator's throughput is highest when all slots are busy. Requests
  beyond ``GEN_SLOTS`` wait (FIFO).
* **Sandbox**: ``SANDBOX_SLOTS`` concurrent operations. ``reset`` (set-up),
  every tool call (``step``) and ``evaluate`` hold one slot for their
  duration.
* **Episodes**: each trajectory's stage times, number of turns and tokens
  per turn are drawn once from the workload's distributions (seeded), so all
  three strategies do exactly the same work. Every turn but the last is
  followed by a tool call.

The **bound** is the capacity of the bottleneck resource for that exact
work: ``N / max(total_tokens * T_TOKEN * (1 + ALPHA) / GEN_SLOTS,
total_sandbox_seconds / SANDBOX_SLOTS)``. No schedule can beat it (up to the
start-of-request load rule above). Model seconds are scaled to wall seconds so
that each pipeline run takes about ``--target-s`` seconds.

Fairness: every entry is a real strategy from ``tirl.rollout`` with one
``RolloutConfig`` per workload: the same stage worker counts (the baselines
use them as per-stage concurrency caps), the same generator and sandbox, the
same episodes. The entries (:data:`ENTRIES`):

* ``sync_batch``, ``async_batch``: batches of ``B = rollout.batch_size``
  (``--batch-size``, default ``run_workers`` = 32) with a barrier after each;
* ``sync_batch_equal``, ``async_batch_equal``: the same with
  ``B = LIVE_BUDGET`` = 112, the most envs the pipeline can hold alive (init
  workers + run queue + runners + eval queue + evaluators): equal live-env
  budget;
* ``gather_all``: what SkyRL-style code does, one ``asyncio.gather`` over the
  whole request (``async_batch`` with ``B`` = the request) with the same
  per-stage caps; it has no barrier and no bound on live envs;
* ``pipeline``: the whole request streams through the three stage pools.

Real mode (``--real``, :mod:`pipeline_real`): the strategies on the SWE
job's env and tasks (``tirl train --env swe-lite``'s preset: the curriculum,
10 turns, 384 tokens per turn), a real policy (``--model``, default the
built-in one) and the agent loop of ``tirl.rollout.agent_loop``: per entry
trajectories/s, the generator's busy fraction, peak live envs and peak RSS.

    python benchmarks/bench_pipeline.py            # table, and the load average before the run
    python benchmarks/bench_pipeline.py --json     # {"headline": {...}, "memory": {NAME: {ENTRY: {...}}},
                                                   #  "workloads": {NAME: {ENTRY: traj/s, "bound": traj/s}},
                                                   #  "machine": {"loadavg_before", "noisy", "live_budget", ...}}

``--json`` leads with ``headline``: on heavy-tail, the pipeline's throughput
over ``gather_all`` and over the best baseline, beside both sides' peak live
environments and peak traced heap; then ``memory``: for every workload and
entry, ``traj_per_s``, ``max_live_envs`` (the most environments alive at
once) and ``peak_traced_mb`` (the Python heap the entry's rollout allocates
at its peak, ``tracemalloc`` in a separate virtual-clock run of the same
episodes; see :func:`traced_peak_mb` for why not the RSS). A simulated env
holds almost nothing, so the heap differs little; the live-env count is what
grows with real environments (each holds a sandbox and a workspace).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.config import RolloutConfig
from tirl.envs.base import Env, EvalResult, StepResult, Task
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy
from tirl.rollout.trace import BusyMeter
from tirl.testing.clock import VirtualTimeLoop
from tirl.types import Message, Role, TerminationReason, Trajectory

STRATEGIES = ("sync_batch", "async_batch", "pipeline")  # the classes of tirl.rollout

# ---- resource model (model seconds) ----------------------------------------------------------
GEN_SLOTS = 16
T_TOKEN = 0.02  # s per token for a lone request
ALPHA = 0.5  # per-token time grows to T_TOKEN * (1 + ALPHA) at full load
SANDBOX_SLOTS = 24

# ---- stage pools (one config for every workload and strategy) --------------------------------
POOLS = {
    "init_workers": SANDBOX_SLOTS,  # every sandbox slot may be setting up
    "run_workers": 2 * GEN_SLOTS,  # enough episodes to keep the generator full between tool calls
    "eval_workers": SANDBOX_SLOTS,
    "run_queue_size": 16,
    "eval_queue_size": 16,
}
#: the most envs the pipeline can hold alive: every init worker, queue place, runner and evaluator
_HOLDERS = ("init_workers", "run_queue_size", "run_workers", "eval_queue_size", "eval_workers")
LIVE_BUDGET = sum(POOLS[k] for k in _HOLDERS)


@dataclass(frozen=True)
class Entry:
    """One column of the comparison: a strategy of ``tirl.rollout`` and the baselines' batch size ``B``."""

    strategy: str
    batch: str  # "cli": --batch-size (0 = run_workers); "equal": LIVE_BUDGET; "all": the whole request

    def batch_size(self, n: int, cli: int) -> int:
        """``B`` for a request of ``n`` trajectories (0 = ``run_workers``)."""
        return {"cli": cli, "equal": LIVE_BUDGET, "all": n}[self.batch]


ENTRIES = {
    "sync_batch": Entry("sync_batch", "cli"),
    "async_batch": Entry("async_batch", "cli"),
    "sync_batch_equal": Entry("sync_batch", "equal"),  # a batch holds as many episodes as the pipeline's envs
    "async_batch_equal": Entry("async_batch", "equal"),
    "gather_all": Entry("async_batch", "all"),  # SkyRL-style: one asyncio.gather over the request, stage caps
    "pipeline": Entry("pipeline", "cli"),
}

Sampler = Callable[[random.Random], float]


def lognormal(median: float, sigma: float, lo: float = 0.0, hi: float = math.inf) -> Sampler:
    return lambda r: min(hi, max(lo, median * math.exp(r.gauss(0.0, sigma))))


def uniform(lo: float, hi: float) -> Sampler:
    return lambda r: r.uniform(lo, hi)


@dataclass(frozen=True)
class Workload:
    """A named workload: the distributions of every stage time, and how many trajectories."""

    name: str
    what: str  # the stated distributions
    n: int  # trajectories (n // GROUP tasks of GROUP samples)
    init_s: Sampler
    eval_s: Sampler
    tool_s: Sampler
    tokens: Sampler
    turns: Sampler


WORKLOADS = [
    Workload(
        "init-heavy",
        "init ~ logN(median 60s, s=0.3); turns U{3..6}; 150±50 tok/turn; tool 0.5s; eval 3s",
        480,
        init_s=lognormal(60, 0.3),
        eval_s=lambda r: 3.0,
        tool_s=lambda r: 0.5,
        tokens=uniform(100, 200),
        turns=uniform(3, 6.999),
    ),
    Workload(
        "run-heavy",
        "init 2s; turns U{8..12}; 200±100 tok/turn; tool ~ logN(0.5s, 0.5); eval 2s",
        240,
        init_s=lambda r: 2.0,
        eval_s=lambda r: 2.0,
        tool_s=lognormal(0.5, 0.5),
        tokens=uniform(100, 300),
        turns=uniform(8, 12.999),
    ),
    Workload(
        "eval-heavy",
        "init 3s; turns U{3..6}; 150±50 tok/turn; tool 0.5s; eval ~ logN(median 60s, s=0.3)",
        640,
        init_s=lambda r: 3.0,
        eval_s=lognormal(60, 0.3),
        tool_s=lambda r: 0.5,
        tokens=uniform(100, 200),
        turns=uniform(3, 6.999),
    ),
    Workload(
        "heavy-tail",
        "turns ~ logN(median 3, s=1.0) clipped to [1, 40] (SWE-like: most 2-5, some 20-40); "
        "150±50 tok/turn; tool ~ logN(1s, 0.5); init 5s; eval 5s",
        640,
        init_s=lambda r: 5.0,
        eval_s=lambda r: 5.0,
        tool_s=lognormal(1.0, 0.5),
        tokens=uniform(100, 200),
        turns=lognormal(3, 1.0, lo=1, hi=40),
    ),
]
GROUP = 4


@dataclass
class Plan:
    """One episode's drawn work (model seconds and tokens)."""

    init_s: float
    eval_s: float
    tokens: list[int]
    tools: list[float]  # one per turn except the last


def draw(w: Workload, seed: int) -> list[Plan]:
    r = random.Random(seed)
    plans = []
    for _ in range(w.n):
        turns = max(1, int(w.turns(r)))
        plans.append(
            Plan(
                init_s=w.init_s(r),
                eval_s=w.eval_s(r),
                tokens=[max(1, round(w.tokens(r))) for _ in range(turns)],
                tools=[w.tool_s(r) for _ in range(turns - 1)],
            )
        )
    return plans


@dataclass
class Bound:
    """What each resource must do for a list of plans, in model seconds of the whole pool."""

    gen_s: float  # model seconds the generator needs at full load
    sandbox_s: float  # model seconds the sandbox pool needs
    pool_s: float  # model seconds the runner pool needs if every episode ran at full-load speed

    @property
    def bottleneck(self) -> str:
        """The resource with the most work per slot."""
        return "generator" if self.gen_s >= self.sandbox_s else "sandbox"

    def traj_per_model_s(self, n: int) -> float:
        """The bound: ``n`` over the bottleneck's busy time."""
        return n / max(self.gen_s, self.sandbox_s)


def bound_of(plans: list[Plan]) -> Bound:
    full = T_TOKEN * (1 + ALPHA)
    tokens = sum(sum(p.tokens) for p in plans)
    sandbox = sum(p.init_s + sum(p.tools) + p.eval_s for p in plans)
    run = sum(sum(p.tokens) * full + sum(p.tools) for p in plans)
    return Bound(tokens * full / GEN_SLOTS, sandbox / SANDBOX_SLOTS, run / POOLS["run_workers"])


class SlotPool:
    """``n`` slots; remembers the planned end of the last release (see :class:`Resources`)."""

    def __init__(self, n: int) -> None:
        self.sem = asyncio.Semaphore(n)
        self.last_release = 0.0


@dataclass
class Resources:
    """The generator and the sandbox, in wall seconds (``scale`` wall seconds per model second).

    Lag compensation: on a loaded machine ``asyncio.sleep`` wakes up ~1 ms
    late, which is several % of a scaled operation. So each operation runs
    from a *planned* start — the end of the episode's previous operation if
    that was at most ``lag_s`` ago (else now), or the planned end of the
    operation that released the slot it waited for — to a planned end, and
    sleeps until that planned end. Late wake-ups then do not accumulate along
    an episode; any wait longer than ``lag_s`` (a real queue) counts in full.
    ``lag_s=0`` turns compensation off.
    """

    scale: float
    lag_s: float = 0.005
    gen: SlotPool = field(default_factory=lambda: SlotPool(GEN_SLOTS))
    sandbox: SlotPool = field(default_factory=lambda: SlotPool(SANDBOX_SLOTS))
    meter: BusyMeter = field(default_factory=BusyMeter)
    gen_active: int = 0

    def ready(self, clock: float | None) -> float:
        """When an episode whose last operation was planned to end at ``clock`` is ready."""
        now = asyncio.get_running_loop().time()
        if clock is not None and now - clock <= self.lag_s:
            return clock
        return now

    async def _hold(self, pool: SlotPool, clock: float | None, model_s: Callable[[], float]) -> float:
        ready = self.ready(clock)
        waited = pool.sem.locked()
        async with pool.sem:
            now = asyncio.get_running_loop().time()
            start = ready
            if waited:  # the slot came free when its last holder's operation was planned to end
                start = max(ready, pool.last_release) if self.lag_s > 0 else now
            end = start + model_s() * self.scale
            await asyncio.sleep(max(0.0, end - now))
            pool.last_release = end
        return end

    async def hold_sandbox(self, clock: float | None, model_s: float) -> float:
        """Hold a sandbox slot for ``model_s``; returns the planned end."""
        return await self._hold(self.sandbox, clock, lambda: model_s)

    async def generate(self, clock: float | None, tokens: int) -> float:
        """Generate ``tokens`` in one generator slot; returns the planned end."""

        def duration() -> float:  # per-token time from the load when the request starts
            self.gen_active += 1
            per_token = T_TOKEN * (1 + ALPHA * (self.gen_active - 1) / (GEN_SLOTS - 1))
            return tokens * per_token

        self.meter.start()
        try:
            return await self._hold(self.gen, clock, duration)
        finally:
            self.gen_active -= 1
            self.meter.end()


class SimEnv:
    """Set-up, tool calls and evaluation are sandbox-slot sleeps; the plan is picked by the reset seed."""

    name = "sim"

    def __init__(self, res: Resources, plans: dict[int, Plan]) -> None:
        self.res = res
        self.plans = plans
        self.plan: Plan | None = None
        self.turn = 0
        self.clock: float | None = None  # planned end of this episode's last operation

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """Set-up: one sandbox slot for ``init_s``."""
        assert seed is not None
        self.plan = self.plans[seed]
        self.clock = await self.res.hold_sandbox(None, self.plan.init_s)
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        """A tool call: one sandbox slot."""
        assert self.plan is not None
        self.clock = await self.res.hold_sandbox(self.clock, self.plan.tools[self.turn])
        self.turn += 1
        return StepResult(observation=[Message(role=Role.TOOL, content="ok")])

    async def evaluate(self) -> EvalResult:
        """The tests: one sandbox slot for ``eval_s``."""
        assert self.plan is not None
        self.clock = await self.res.hold_sandbox(self.clock, self.plan.eval_s)
        return EvalResult(reward=1.0, correct=True)

    async def close(self) -> None:
        """Nothing to release."""
        return None


class SimRunner:
    """Generation (generator slot) then a tool call (sandbox slot), turn after turn."""

    def __init__(self, res: Resources) -> None:
        self.res = res

    async def __call__(self, env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        """Run the episode's planned turns."""
        assert isinstance(env, SimEnv) and env.plan is not None
        for i, tokens in enumerate(env.plan.tokens):
            env.clock = await self.res.generate(env.clock, tokens)
            if i < len(env.plan.tools):
                await env.step(Message(role=Role.ASSISTANT, content="```bash\nls\n```"))
        traj.termination = TerminationReason.SUBMITTED


def make_request(w: Workload, plans: list[Plan]) -> tuple[RolloutRequest, dict[int, Plan]]:
    from tirl.rollout.pipeline import episode_seed

    tasks = [Task(id=f"{w.name}-{i}", prompt="fix the bug") for i in range(w.n // GROUP)]
    by_seed: dict[int, Plan] = {}
    for ti in range(len(tasks)):
        for k in range(GROUP):
            by_seed[episode_seed(0, ti, k)] = plans[ti * GROUP + k]
    assert len(by_seed) == w.n
    return RolloutRequest(tasks=tasks, group_size=GROUP), by_seed


async def run_one(
    w: Workload, name: str, plans: list[Plan], scale: float, args: argparse.Namespace, model_total_s: float
) -> dict[str, float]:
    """One entry of :data:`ENTRIES` on one workload; times in model seconds."""
    entry = ENTRIES[name]
    lag_s = 0.0 if args.virtual else args.lag_ms / 1e3
    res = Resources(scale=scale, lag_s=lag_s)
    res.meter = BusyMeter(clock=asyncio.get_running_loop().time)
    request, by_seed = make_request(w, plans)
    cfg = RolloutConfig(
        strategy=entry.strategy,  # type: ignore[arg-type]
        trace_interval_s=model_total_s * scale / 50,
        init_timeout_s=86_400.0,  # the range maximum: no virtual episode comes near it
        run_timeout_s=86_400.0,
        eval_timeout_s=86_400.0,
        retries=0,
        batch_size=entry.batch_size(w.n, args.batch_size),
        **POOLS,
    )
    trace = Path(args.trace_dir) / f"{w.name}.{name}.jsonl" if args.trace_dir else None
    strat = make_strategy(
        cfg, lambda task: SimEnv(res, by_seed), SimRunner(res), trace_path=trace, generator_busy=res.meter
    )
    loop = asyncio.get_running_loop()
    t0, c0 = loop.time(), time.process_time()
    batch = await strat.collect(request)
    elapsed = loop.time() - t0
    cpu = time.process_time() - c0
    await strat.close()
    assert len(batch.trajectories) == w.n and not any(t.failed for t in batch.trajectories)
    return {
        "traj_per_s": w.n / (elapsed / scale),
        "model_s": elapsed / scale,
        "wall_s": elapsed if not args.virtual else float("nan"),
        "cpu_s": cpu,
        "gpu_util": util if (util := batch.stats.gpu_util) is not None else float("nan"),
        "max_live_envs": float(batch.stats.max_live_envs),
    }


def traced_peak_mb(w: Workload, name: str, plans: list[Plan], args: argparse.Namespace, model_s: float) -> float:
    """The Python heap one entry's rollout allocates at its peak (MB), from a separate virtual-clock run.

    ``tracemalloc`` counts every allocation of that run alone, so the figure
    does not depend on which entry ran before (a peak RSS taken inside this
    one process would: freed arenas are reused by the next entry). The
    virtual clock replays the same schedule without sleeping; the timed run
    is not slowed by the tracing.
    """
    exact = argparse.Namespace(**{**vars(args), "virtual": True, "trace_dir": ""})
    tracemalloc.start()
    try:
        VirtualTimeLoop.run(run_one(w, name, plans, 1.0, exact, model_s))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return round(peak / 1e6, 2)


def headline(out: dict[str, Any]) -> dict[str, Any]:
    """The pipeline against ``gather_all`` and the best baseline on heavy-tail (else the first workload run).

    Throughput ratios beside each side's peak live environments and peak
    traced heap: the pipeline's gain over ``gather_all`` is memory, not speed.
    """
    name = "heavy-tail" if "heavy-tail" in out["workloads"] else next(iter(out["workloads"]))
    row, mem = out["workloads"][name], out["memory"][name]
    baselines = [e for e in ENTRIES if e != "pipeline"]
    best = max(baselines, key=lambda e: row[e])
    return {
        "workload": name,
        "pipeline_vs_gather_all": row["pipeline"] / row["gather_all"],
        "best_baseline": best,
        "pipeline_vs_best_baseline": row["pipeline"] / row[best],
        "max_live_envs": {e: mem[e]["max_live_envs"] for e in ("pipeline", "gather_all")},
        "peak_traced_mb": {e: mem[e]["peak_traced_mb"] for e in ("pipeline", "gather_all")},
    }


def run_in_loop(args: argparse.Namespace, coro: Any) -> dict[str, float]:
    if not args.virtual:
        return asyncio.run(coro)  # type: ignore[no-any-return]
    return VirtualTimeLoop.run(coro)  # type: ignore[no-any-return]


def simulate(args: argparse.Namespace) -> dict[str, Any]:
    names = args.workloads.split(",") if args.workloads else [w.name for w in WORKLOADS]
    unknown = set(names) - {w.name for w in WORKLOADS}
    if unknown:
        sys.exit(f"unknown workload(s) {sorted(unknown)}: choose from {[w.name for w in WORKLOADS]}")
    out: dict[str, Any] = {"workloads": {}, "memory": {}, "details": {}}
    for w in WORKLOADS:
        if w.name not in names:
            continue
        if args.n_scale != 1.0:
            w = dataclasses.replace(w, n=max(GROUP, round(w.n * args.n_scale / GROUP) * GROUP))
        plans = draw(w, args.seed)
        b = bound_of(plans)
        model_s = max(b.gen_s, b.sandbox_s)
        scale = 1.0 if args.virtual else args.target_s / model_s
        row: dict[str, float] = {}
        detail: dict[str, Any] = {
            "what": w.what,
            "n": w.n,
            "scale_ms_per_model_s": scale * 1e3,
            "bottleneck": b.bottleneck,
            "generator_s_needed": b.gen_s,
            "sandbox_s_needed": b.sandbox_s,
            "runner_pool_s_needed": b.pool_s,
        }
        memory: dict[str, dict[str, float]] = {}
        for s in ENTRIES:
            r = run_in_loop(args, run_one(w, s, plans, scale, args, model_s))
            row[s] = r["traj_per_s"]
            detail[s] = r
            memory[s] = {"traj_per_s": r["traj_per_s"], "max_live_envs": r["max_live_envs"],
                         "peak_traced_mb": traced_peak_mb(w, s, plans, args, model_s)}  # fmt: skip
        row["bound"] = b.traj_per_model_s(w.n)
        out["workloads"][w.name] = row
        out["memory"][w.name] = memory
        out["details"][w.name] = detail
        if not args.json:
            print_row(w, row, detail, args.virtual)
    return out


def print_row(w: Workload, row: dict[str, float], d: dict[str, Any], virtual: bool) -> None:
    p = row["pipeline"]
    clock = "virtual time" if virtual else f"1 model s = {d['scale_ms_per_model_s']:.2f} ms wall"
    print(f"\n{w.name}  (n={w.n}, bottleneck={d['bottleneck']}, {clock})")
    print(f"  {w.what}")
    for s in ENTRIES:
        r = d[s]
        wall = "" if virtual else f"  wall {r['wall_s']:5.2f}s"
        print(
            f"  {s:<12} {row[s]:7.4f} traj/s{wall}  gpu_util {r['gpu_util']:.2f}"
            f"  max live envs {r['max_live_envs']:3.0f}"
        )
    print(
        f"  bound        {row['bound']:7.4f} traj/s  pipeline/bound {p / row['bound']:.2f}"
        f"  pipeline/async_batch {p / row['async_batch']:.2f}x  pipeline/sync_batch {p / row['sync_batch']:.2f}x"
    )
    print(
        f"  equal budget ({LIVE_BUDGET} envs): pipeline/async_batch_equal {p / row['async_batch_equal']:.2f}x"
        f"  pipeline/sync_batch_equal {p / row['sync_batch_equal']:.2f}x"
        f"  pipeline/gather_all {p / row['gather_all']:.2f}x"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument(
        "--workloads", default="", help="comma-separated subset of: " + ", ".join(w.name for w in WORKLOADS)
    )
    ap.add_argument("--target-s", type=float, default=4.0, help="wall seconds the bound allows per pipeline run")
    ap.add_argument("--batch-size", type=int, default=0, help="baselines' batch size B (0 = run_workers)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-scale", type=float, default=1.0, help="multiply every workload's trajectory count")
    ap.add_argument("--lag-ms", type=float, default=5.0, help="late wake-ups forgiven per operation (0 = off)")
    ap.add_argument("--trace-dir", default="", help="write one pipeline-trace JSONL per workload and strategy here")
    ap.add_argument("--virtual", action="store_true", help="exact discrete-event run on a virtual clock (no sleeping)")
    ap.add_argument("--real", action="store_true", help="the SWE job's env and tasks instead of the simulation")
    ap.add_argument("--real-tasks", type=int, default=16, help="--real: swe-lite curriculum tasks")
    ap.add_argument("--real-group", type=int, default=4, help="--real: samples per task")
    ap.add_argument("--real-max-turns", type=int, default=0, help="--real: turns per episode (0: the preset's 10)")
    ap.add_argument("--real-max-new", type=int, default=0, help="--real: tokens per turn (0: the preset's 384)")
    ap.add_argument("--real-batch-window", type=float, default=0.5, help="--real: HFGenerator batching window (s)")
    ap.add_argument("--real-run-workers", type=int, default=16, help="--real: Agent Runner workers (and B)")
    ap.add_argument("--model", default="", help="--real: a local HF model directory (default: the built-in one)")
    ap.add_argument("--device", default="cpu", help="--real: torch device")
    args = ap.parse_args()
    if args.real:
        # Before torch loads: spinning OpenMP threads starve generation on a busy 2-core machine
        # (the same setting as `tirl train`/`tirl eval`).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from pipeline_real import run_real

        real = run_real(args)
        if args.json:
            print(json.dumps({"real": real}))
        return 0
    load = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    out = simulate(args)
    if args.json:
        machine = {"loadavg_before": load, "noisy": load[0] > 1.5 and not args.virtual, "live_budget": LIVE_BUDGET,
                   "clock": "virtual" if args.virtual else "real-time", "python": sys.executable}  # fmt: skip
        first = {"headline": headline(out), "memory": out["memory"]}
        print(json.dumps({**first, "workloads": out["workloads"], "machine": machine}))
    else:
        print(f"\nload average before the run: {load}{'  (noisy)' if load[0] > 1.5 and not args.virtual else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
