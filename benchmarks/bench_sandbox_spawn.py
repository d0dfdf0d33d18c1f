"""What starting a sandboxed command costs a big parent: the helper chain against ``preexec_fn``.

    python benchmarks/bench_sandbox_spawn.py [--json] [--parent-mb 1400] [--n 30] [--repeats 3]
                                             [--eval-tasks 32]

``tirl.sandbox._spawn`` sets a child up either behind ``sh``/``setpriv``/``prlimit`` (``helpers``, the
default where they are installed) or with a ``preexec_fn`` and ``user=`` (``preexec_fn``, the fallback),
which makes CPython ``fork()`` the whole parent instead of ``vfork()``-ing it. Two measurements, both
sides alternating which goes first in each of ``--repeats`` rounds:

1. **Per command**: this process first touches ``--parent-mb`` MB (1,400: the resident size of the SWE
   job's trainer), then runs ``--n`` bubblewrap commands (``BwrapSandbox().run("pass")``, one at a time)
   each way: the median wall time per command and the parent's own CPU (user + system, ``getrusage``)
   per command.
2. **The real job** (``--eval-tasks N``, 0 skips it): ``tirl eval --env swe-lite --split validation --n N``
   (the shipped ``tiny-swe``, greedy, real workspaces and pytest) in a subprocess of this interpreter each
   way — the fallback side forces ``tirl.sandbox._spawn.helpers`` to None before ``tirl.cli.main`` — its
   own ``wall_s`` and the child's CPU (user and system from ``RUSAGE_CHILDREN``). Greedy decoding: both
   sides must solve the same tasks the same way (checked).

Ratios are fallback ÷ helpers within a round, reported as median and range over rounds; the 1-minute load
average is recorded before each side. Not covered: the warm pool (its servers are started once, not per
command), the ``process`` backend, GPUs.
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
from pathlib import Path
from typing import Any

from tirl.sandbox import BwrapSandbox, _spawn
from tirl.sandbox.bwrap import bwrap_problem

SIDES = ("helpers", "preexec_fn")
FALLBACK = "import sys, tirl.sandbox._spawn as s; s.helpers = lambda: None; from tirl.cli import main; sys.exit(main())"


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def per_command(side: str, n: int) -> dict[str, float]:
    """``n`` sandboxed ``pass`` runs one at a time with ``side``'s set-up: median wall and parent CPU per run."""
    real = _spawn.helpers
    if side == "preexec_fn":
        _spawn.helpers = lambda: None  # type: ignore[assignment]
    try:
        box = BwrapSandbox()
        walls = []
        c0 = cpu_self()
        for _ in range(n):
            t0 = time.perf_counter()
            result = asyncio.run(box.run("pass", timeout_s=10))
            walls.append(time.perf_counter() - t0)
            if result.exit_code != 0:
                raise SystemExit(f"error: the sandboxed command failed ({side}): {result}")
        return {"wall_ms_p50": 1e3 * statistics.median(walls), "parent_cpu_ms": 1e3 * (cpu_self() - c0) / n}
    finally:
        _spawn.helpers = real  # type: ignore[method-assign]


def real_eval(side: str, tasks: int) -> dict[str, Any]:
    """``tirl eval`` on the validation split in a subprocess with ``side``'s set-up."""
    head = [sys.executable, "-m", "tirl.cli"] if side == "helpers" else [sys.executable, "-c", FALLBACK]
    cmd = [*head, "eval", "--env", "swe-lite", "--split", "validation", "--n", str(tasks), "--json"]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = load1()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "wall_s": out["wall_s"],
        "user_s": r1.ru_utime - r0.ru_utime,
        "sys_s": r1.ru_stime - r0.ru_stime,
        "load_before": load,
        "outcomes": [(t["id"], t["correct"], t["termination"], t["turns"]) for t in out["tasks"]],
        "correct": out["correct"],
    }


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--parent-mb", type=int, default=1400, help="memory this process touches first")
    p.add_argument("--n", type=int, default=30, help="sandboxed commands per side and round")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--eval-tasks", type=int, default=32, help="tirl eval tasks per side and round (0: skip)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.n < 1 or a.repeats < 1 or a.parent_mb < 0 or a.eval_tasks < 0:
        p.error("--n and --repeats must be at least 1, --parent-mb and --eval-tasks at least 0")
    if (problem := bwrap_problem()) is not None:
        raise SystemExit(f"error: bubblewrap cannot run here: {problem}")
    if _spawn.helpers() is None:
        raise SystemExit("error: setpriv or prlimit is missing (apt-get install util-linux)")
    ballast = bytearray(a.parent_mb << 20)
    ballast[::4096] = b"\1" * len(range(0, len(ballast), 4096))  # touch every page: resident, like a model
    rounds: list[dict[str, Any]] = []
    for r in range(a.repeats):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        cmd = {s: per_command(s, a.n) for s in order}
        ev = {s: real_eval(s, a.eval_tasks) for s in order} if a.eval_tasks else {}
        rounds.append({"order": list(order), "per_command": cmd, "eval": ev})
        if not a.json:
            line = (f"round {r + 1}: per command {cmd['helpers']['wall_ms_p50']:.1f} ms vs "
                    f"{cmd['preexec_fn']['wall_ms_p50']:.1f} ms (helpers vs preexec_fn)")  # fmt: skip
            if ev:
                line += f"; eval {ev['helpers']['wall_s']:.1f} s vs {ev['preexec_fn']['wall_s']:.1f} s"
            print(line, flush=True)
    result: dict[str, Any] = {
        "per_command_wall_fallback_over_helpers": spread(
            [x["per_command"]["preexec_fn"]["wall_ms_p50"] / x["per_command"]["helpers"]["wall_ms_p50"] for x in rounds]
        ),
        "per_command_parent_cpu_ms": {s: spread([x["per_command"][s]["parent_cpu_ms"] for x in rounds]) for s in SIDES},
        "per_command_wall_ms": {s: spread([x["per_command"][s]["wall_ms_p50"] for x in rounds]) for s in SIDES},
        "parent_mb": a.parent_mb,
        "n": a.n,
        "python": sys.version.split()[0],
        "rounds": rounds,
    }
    if a.eval_tasks:
        result["eval_wall_fallback_over_helpers"] = spread(
            [x["eval"]["preexec_fn"]["wall_s"] / x["eval"]["helpers"]["wall_s"] for x in rounds]
        )
        result["eval_sys_s"] = {s: spread([x["eval"][s]["sys_s"] for x in rounds]) for s in SIDES}
        result["eval_user_s"] = {s: spread([x["eval"][s]["user_s"] for x in rounds]) for s in SIDES}
        result["same_outcomes"] = all(
            x["eval"]["helpers"]["outcomes"] == x["eval"]["preexec_fn"]["outcomes"] for x in rounds
        )
        result["eval_tasks"] = a.eval_tasks
    if a.json:
        print(json.dumps(result))
    else:
        w = result["per_command_wall_fallback_over_helpers"]
        print(f"per command: preexec_fn / helpers {w['median']:.1f}x ({w['min']:.1f}-{w['max']:.1f}) "
              f"from a {a.parent_mb} MB parent")  # fmt: skip
        if a.eval_tasks:
            e = result["eval_wall_fallback_over_helpers"]
            print(f"tirl eval ({a.eval_tasks} tasks): preexec_fn / helpers {e['median']:.2f}x "
                  f"({e['min']:.2f}-{e['max']:.2f}); same outcomes: {result['same_outcomes']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
