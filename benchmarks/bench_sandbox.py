"""Latency and throughput of running small Python programs four ways.

1. ``unisolated``: ``subprocess.run([python, "-c", code])`` with the SAME interpreter the sandbox uses,
   ``site`` on (no ``-I``/``-S``), as users call it: no isolation at all (the baseline);
2. ``bwrap``: the bubblewrap backend, a fresh sandbox and interpreter per execution;
3. ``warm_pool``: the warm pool, a fork of a pre-started interpreter inside bubblewrap (seccomp,
   PID-1 server, capped tmpfs: the hardened pool of issue 11);
4. ``warm_unisolated``: the same fork-server design and the same interpreter without any isolation
   (``WarmPool(isolate=False)``: plain server processes, no bubblewrap, no seccomp, no cgroup; the
   per-run rlimits, the fresh child per run and the leftover cleanup stay; without a PID namespace that
   cleanup scans ``/proc`` for leftovers and empties an on-disk workspace, work the isolated server, the
   namespace's init, does with one ``kill(-1)`` and one ``stat``: it can be the slower of the two).

Two comparisons, reported separately: the **cost of isolation** (``warm_pool`` against
``warm_unisolated``: ``isolation_cost_p50`` and ``isolation_cost_per_s``, ratios of the two per run)
and the **start-up saving** (``warm_pool`` against a cold ``python -c``: ``warm_pool_p50_vs_unisolated``),
which a fork of an interpreter that has already started brings with or without isolation.

Latency (p50/p95) is measured one execution at a time; executions per second with
``--concurrency`` executions in flight. Every way gets the same programs, ``--n`` and concurrency.
The whole set is repeated ``--runs`` times and each figure is given as its median and range. The
load average is read before anything starts; above 1.5 the result is marked ``noisy`` (and the targets
not conclusive). A failed execution is counted (``failed``), not fatal: the JSON is always printed
(last line). The warm pool's CPU per execution is split into the host process and the sandbox
(servers and their children, from ``/proc``), beside the minor page faults per execution of the servers
and of their children and the first server's anonymous memory (what each fork copies).
Run: ``python benchmarks/bench_sandbox.py [--json]``; A/B against older code: ``git archive COMMIT
src/tirl | tar -x -C /tmp/old`` and the same command with ``PYTHONPATH=/tmp/old/src`` (the JSON's
``package`` names the code measured), alternately.

Targets (issue 16): warm-pool p50 <= 1/8 of ``unisolated``, >= 1000 isolated executions/s on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import tirl.sandbox
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
    """p50/p95 one at a time, executions per second with ``concurrency`` in flight; failed runs are counted."""
    failed = 0
    for code in PROGRAMS:  # warm-up (pool start, page cache)
        failed += not await run(code)
    lat = []
    for i in range(n):
        t = time.perf_counter()
        failed += not await run(PROGRAMS[i % len(PROGRAMS)])
        lat.append(time.perf_counter() - t)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> bool:
        async with sem:
            return await run(PROGRAMS[i % len(PROGRAMS)])

    t = time.perf_counter()
    ok = await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - t
    return {
        "p50_ms": round(statistics.median(lat) * 1000, 2),
        "p95_ms": round(percentile(lat, 0.95) * 1000, 2),
        "per_s": round(n / wall, 1),
        "failed": failed + ok.count(False),
    }


async def one_run(args: argparse.Namespace, python: str) -> dict[str, dict[str, float]]:
    async def unisolated(code: str) -> bool:
        # subprocess.run in a thread, so that several can be in flight
        proc = await asyncio.to_thread(subprocess.run, [python, "-c", code], capture_output=True, check=False)
        return proc.returncode == 0

    results = {"unisolated": await measure(unisolated, args.n, args.concurrency)}
    plain = WarmPool(isolate=False, size=args.pool_size, timeout_s=10, python=python, warn=False)
    try:

        async def warm_plain(code: str) -> bool:
            return (await plain.run(code)).ok

        await plain.start()
        results["warm_unisolated"] = await measure(warm_plain, args.n, args.concurrency)
    finally:
        await plain.close()
    if not args.skip_bwrap:
        fresh = BwrapSandbox(timeout_s=10)

        async def bwrap(code: str) -> bool:
            return (await fresh.run(code)).ok

        results["bwrap"] = await measure(bwrap, args.n, args.concurrency)
    pool = WarmPool(isolate=True, size=args.pool_size, timeout_s=10)
    try:

        async def warm(code: str) -> bool:
            return (await pool.run(code)).ok

        await pool.start()
        before = pool_usage(pool)
        results["warm_pool"] = await measure(warm, args.n, args.concurrency)
        host, sandbox, server_flt, child_flt = (b - a for a, b in zip(before, pool_usage(pool), strict=True))
        # CPU seconds of host + servers + their children per execution (warm-up and both phases counted);
        # this, unlike per_s, does not depend much on what else the machine runs.
        runs = 2 * args.n + len(PROGRAMS)
        results["warm_pool"]["cpu_ms_per_exec"] = round((host + sandbox) / runs * 1000, 3)
        results["warm_pool"]["cpu_ms_per_exec_host"] = round(host / runs * 1000, 3)
        results["warm_pool"]["cpu_ms_per_exec_sandbox"] = round(sandbox / runs * 1000, 3)
        # What the CPU per run is made of: page faults (copy-on-write after the fork) and what each fork
        # copies and each child's exit tears down (the server's anonymous memory).
        results["warm_pool"]["faults_per_exec_server"] = round(server_flt / runs, 1)
        results["warm_pool"]["faults_per_exec_child"] = round(child_flt / runs, 1)
        results["warm_pool"]["server_anon_kb"] = server_anon_kb(pool)
    finally:
        await pool.close()
    return results


def pool_usage(pool: WarmPool) -> tuple[float, float, int, int]:
    """CPU seconds so far (this process; the servers with their children) and minor faults (servers; children)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    host = usage.ru_utime + usage.ru_stime
    total, server_flt, child_flt = 0.0, 0, 0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in _server_pids(pool):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        server_flt += int(fields[7])  # minflt
        child_flt += int(fields[8])  # cminflt
    return host, total, server_flt, child_flt


def _server_pids(pool: WarmPool) -> list[int]:
    return [w.start.pid1 for w in pool._workers if w.start is not None and w.start.pid1 is not None]


def server_anon_kb(pool: WarmPool) -> int:
    """The anonymous memory (RssAnon) of the pool's first server, whose page table every fork copies (0: unknown)."""
    for pid in _server_pids(pool):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    return 0


def spread(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 3), "range": [round(min(values), 3), round(max(values), 3)]}


def summarise(runs: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for way in runs[0]:
        keys = [k for k in runs[0][way] if k != "failed"]
        summary[way] = {key: spread([r[way][key] for r in runs]) for key in keys}
        summary[way]["failed"] = sum(r[way]["failed"] for r in runs)
    ratios = [r["warm_pool"]["p50_ms"] / r["unisolated"]["p50_ms"] for r in runs]
    summary["warm_pool_p50_vs_unisolated"] = spread(ratios)  # the start-up saving
    # the cost of isolation: the same fork-server design with and without bubblewrap, seccomp and cgroup
    summary["isolation_cost_p50"] = spread([r["warm_pool"]["p50_ms"] / r["warm_unisolated"]["p50_ms"] for r in runs])
    summary["isolation_cost_per_s"] = spread([r["warm_pool"]["per_s"] / r["warm_unisolated"]["per_s"] for r in runs])
    return summary


def main() -> int:
    cores = os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="executions per way and run (default 200)")
    parser.add_argument("--runs", type=int, default=3, help="repeat the whole set (default 3); medians and ranges")
    parser.add_argument("--concurrency", type=int, default=4 * cores, help="in flight for per_s (default 4 x cores)")
    parser.add_argument("--pool-size", type=int, default=2 * cores, help="warm servers (default 2 x cores)")
    parser.add_argument("--skip-bwrap", action="store_true", help="leave out the fresh-sandbox way")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args()
    load_before = os.getloadavg()
    if (problem := bwrap_problem()) is not None:
        print(f"error: bubblewrap cannot run here: {problem}", file=sys.stderr)
        return 2
    python = sandbox_python()
    runs = [asyncio.run(one_run(args, python)) for _ in range(args.runs)]
    summary = summarise(runs)
    ratio = summary["warm_pool_p50_vs_unisolated"]["median"]
    per_s = summary["warm_pool"]["per_s"]["median"]
    cpu_ms = summary["warm_pool"]["cpu_ms_per_exec"]["median"]
    noisy = load_before[0] > 1.5
    out: dict[str, Any] = {
        "machine": {
            "cores": cores,
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "noisy": noisy,
        },
        "baseline": {"interpreter": python, "argv": [python, "-c", "<program>"], "site": True},
        # which tirl was measured: PYTHONPATH=<an exported older src> runs this script on older code (A/B)
        "package": os.path.dirname(tirl.sandbox.__file__),
        "settings": {"n": args.n, "runs": args.runs, "concurrency": args.concurrency, "pool_size": args.pool_size},
        "runs": runs,
        "summary": summary,
        "targets": {
            "warm_pool_p50_vs_unisolated": {"target": 0.125, "median": ratio, "met": ratio <= 0.125},
            "warm_pool_per_s": {"target": 1000, "median": per_s, "met": per_s >= 1000},
            # what 2 otherwise idle cores could do at the measured CPU cost (an estimate, not a measurement)
            "warm_pool_per_s_on_2_idle_cores": round(2000 / cpu_ms, 1) if cpu_ms else None,
            "conclusive": not noisy,  # a loaded machine inflates the baseline's start-up more than the pool's
        },
    }
    if not args.json:
        mark = " (NOISY: load average above 1.5; targets not conclusive)" if noisy else ""
        print(f"{cores} cores, load average before {load_before[0]:.2f}{mark}; n={args.n} x {args.runs} runs,")
        print(f"concurrency={args.concurrency}, pool size={args.pool_size}; baseline: {python} -c CODE (site on)")
        print(f"{'way':<12}{'p50 ms':>26}{'p95 ms':>26}{'exec/s':>26}")
        for way in runs[0]:
            cells = []
            for key in ("p50_ms", "p95_ms", "per_s"):
                v = summary[way][key]
                cells.append(f"{v['median']:.2f} [{v['range'][0]:.2f}-{v['range'][1]:.2f}]")
            print(f"{way:<12}{cells[0]:>26}{cells[1]:>26}{cells[2]:>26}")
        r = summary["warm_pool_p50_vs_unisolated"]
        lo, hi = r["range"]
        print(
            f"start-up saving, warm pool p50 / python -c p50: {r['median']:.3f} [{lo:.3f}-{hi:.3f}] (target <= 0.125)"
        )
        for key, what in (("isolation_cost_p50", "p50"), ("isolation_cost_per_s", "exec/s")):
            c = summary[key]
            print(f"cost of isolation, warm pool / warm unisolated {what}: {c['median']:.3f} "
                  f"[{c['range'][0]:.3f}-{c['range'][1]:.3f}]")  # fmt: skip
        split = summary["warm_pool"]
        host_ms, box_ms = (split[k]["median"] for k in ("cpu_ms_per_exec_host", "cpu_ms_per_exec_sandbox"))
        print(f"warm pool CPU per execution: {cpu_ms:.2f} ms (host {host_ms:.2f}, servers + children {box_ms:.2f})")
        flt = [split[k]["median"] for k in ("faults_per_exec_server", "faults_per_exec_child", "server_anon_kb")]
        print(f"page faults per execution: server {flt[0]:.0f}, child {flt[1]:.0f}; server anon memory {flt[2]:.0f} kB")
        if failed := sum(summary[way]["failed"] for way in runs[0]):
            print(f"FAILED executions: {failed} (see 'failed' in the JSON)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
