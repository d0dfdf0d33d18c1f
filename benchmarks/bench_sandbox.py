"""Latency and throughput of running small Python programs three ways.

1. ``unisolated``: ``subprocess.run([python, "-c", code])``, no isolation at all (the baseline);
2. ``bwrap``: the bubblewrap backend, a fresh sandbox and interpreter per execution;
3. ``warm_pool``: the warm pool, a fork of a pre-started interpreter inside bubblewrap.

Latency (p50/p95) is measured one execution at a time; executions per second with
``--concurrency`` executions in flight. Run: ``python benchmarks/bench_sandbox.py [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

from tirl.sandbox import BwrapSandbox, WarmPool
from tirl.sandbox.bwrap import bwrap_problem, sandbox_python

PROGRAMS = [
    "print(sum(i * i for i in range(1000)))",
    "from fractions import Fraction\nprint(sum(Fraction(1, k) for k in range(1, 30)))",
    "import math\nprint(math.comb(40, 20), math.gcd(123456, 7890))",
    "import itertools\nprint(sum(1 for p in itertools.permutations(range(6)) if p[0] < p[-1]))",
    "import re, json\nprint(json.dumps(re.findall(r'\\d+', 'a1b22c333')))",
]


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def measure(run: Callable[[str], Awaitable[bool]], n: int, concurrency: int) -> dict[str, float]:
    for code in PROGRAMS:  # warm-up (pool start, page cache)
        assert await run(code), f"warm-up failed: {code!r}"
    lat = []
    for i in range(n):
        t = time.perf_counter()
        assert await run(PROGRAMS[i % len(PROGRAMS)])
        lat.append(time.perf_counter() - t)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> bool:
        async with sem:
            return await run(PROGRAMS[i % len(PROGRAMS)])

    t = time.perf_counter()
    ok = await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - t
    assert all(ok)
    return {
        "p50_ms": round(statistics.median(lat) * 1000, 2),
        "p95_ms": round(percentile(lat, 0.95) * 1000, 2),
        "per_s": round(n / wall, 1),
    }


async def main_async(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    python = sandbox_python()

    async def unisolated(code: str) -> bool:
        # subprocess.run in a thread, so that several can be in flight
        proc = await asyncio.to_thread(subprocess.run, [python, "-c", code], capture_output=True, check=False)
        return proc.returncode == 0

    results = {"unisolated": await measure(unisolated, args.n, args.concurrency)}
    fresh = BwrapSandbox(timeout_s=10)

    async def bwrap(code: str) -> bool:
        return (await fresh.run(code)).ok

    results["bwrap"] = await measure(bwrap, args.n, args.concurrency)
    pool = WarmPool(isolate=True, size=args.pool_size, timeout_s=10)
    try:

        async def warm(code: str) -> bool:
            return (await pool.run(code)).ok

        results["warm_pool"] = await measure(warm, args.n, args.concurrency)
    finally:
        await pool.close()
    return results


def main() -> int:
    cores = os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="executions per way (default 200)")
    parser.add_argument("--concurrency", type=int, default=4 * cores, help="in flight for per_s (default 4 x cores)")
    parser.add_argument("--pool-size", type=int, default=2 * cores, help="warm servers (default 2 x cores)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if (problem := bwrap_problem()) is not None:
        print(f"error: bubblewrap cannot run here: {problem}", file=sys.stderr)
        return 2
    results = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(results))
        return 0
    base = results["unisolated"]["p50_ms"]
    print(f"{cores} cores, n={args.n}, concurrency={args.concurrency}, pool size={args.pool_size}")
    print(f"{'way':<12}{'p50 ms':>9}{'p95 ms':>9}{'exec/s':>9}{'p50 vs unisolated':>20}")
    for name, r in results.items():
        print(f"{name:<12}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{r['per_s']:>9.1f}{r['p50_ms'] / base:>19.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
