"""The in-process generator's features on the SWE job: ``tirl train --env swe-lite`` with one off, side by side.

    python benchmarks/bench_swe_generation.py [--json] [--off KEY=VALUE] [--on KEY=VALUE] [--repeats 3]
                                              [--prompts 4] [--steps 1] [--keep DIR] [--set KEY=VALUE ...]

Each round runs the real job twice — the same command, ``on`` with tirl's defaults (plus ``--on`` when
given), ``off`` with one ``--set`` more: ``--off generation.prefix_cache_mb=0`` (the default: no reuse of
earlier turns' keys and values), or ``--on generation.continuous_batching=true --off
generation.continuous_batching=false`` (continuous batching, off by default, against the default) — in
subprocesses of this interpreter (``python -m tirl.cli train``), with the shipped ``tiny-swe`` warm start,
the swe-lite preset (10 turns, 6,144 tokens), the pipeline, real workspaces and real pytest in the
sandbox, ``trainer.eval_before_after=false`` (the steps alone), ``--steps`` steps of ``--prompts`` prompts x
``algo.group_size`` 8 episodes, the same seed. Rounds alternate which side goes first. Each side's figures
come from its own run directory (``metrics.jsonl``): rollout seconds and step seconds; the ratio off ÷ on
is taken within a round, then reported as the median and range over rounds. Both sides sample each turn
from the same seed, so they must produce the same episodes: the bench prints whether each step's
reward, valid trajectories and generated tokens agree (a mismatch would mean the feature changed what
is sampled). The 1-minute load average is recorded before and after each run. ``--set`` passes a config
override to both sides (the test uses it to shrink the job).

Not covered: GPUs (the in-process ``hf`` generator on the CPU only; vLLM has its own prefix caching and
continuous batching), the evaluations (greedy; the same mechanics), memory (the prefix cache holds up to
``generation.prefix_cache_mb``; its entries are the episodes' own keys and values, ~4 KB per position for
``tiny-swe``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_OFF = "generation.prefix_cache_mb=0"


def load1() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_side(side: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One ``tirl train`` run; its per-step figures from metrics.jsonl."""
    name = f"{side}-{len(list(out.glob(side + '-*')))}"
    cmd = [
        sys.executable, "-m", "tirl.cli", "train", "--env", "swe-lite",
        "--set", "trainer.eval_before_after=false", "--set", f"trainer.steps={args.steps}",
        "--set", f"trainer.prompts_per_step={args.prompts}", "--set", f"trainer.run_dir={out}",
        "--set", f"trainer.run_name={name}", *[x for kv in args.set for x in ("--set", kv)],
        *(["--set", args.off] if side == "off" else (["--set", args.on] if args.on else [])),
    ]  # fmt: skip
    before = load1()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    steps = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [s for s in steps if "time/step_s" in s]
    return {
        "run": name,
        "wall_s": wall,
        "load_before": before,
        "load_after": load1(),
        "rollout_s": sum(s["time/rollout_s"] for s in steps),
        "step_s": sum(s["time/step_s"] for s in steps),
        # what was sampled: the same on both sides unless the cache changed it
        "episodes": [
            [s.get(k) for k in ("reward/mean", "filter/valid_trajectories", "rollout/gen_tokens")] for s in steps
        ],
    }


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--off", default=DEFAULT_OFF, metavar="KEY=VALUE", help="the setting the off side adds")
    p.add_argument("--on", default=None, metavar="KEY=VALUE", help="a setting the on side adds (default: none)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prompts", type=int, default=4, help="trainer.prompts_per_step (x group 8 episodes)")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for both sides")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.repeats < 1 or a.prompts < 1 or a.steps < 1:
        p.error("--repeats, --prompts and --steps must be at least 1")
    for flag, value in (("--off", a.off), ("--on", a.on)):
        if value is not None and "=" not in value:
            p.error(f"{flag} {value!r} is not KEY=VALUE, e.g. {DEFAULT_OFF}")
    with tempfile.TemporaryDirectory() as tmp:
        out = a.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        rounds = []
        for r in range(a.repeats):
            order = ["on", "off"] if r % 2 == 0 else ["off", "on"]
            sides = {s: run_side(s, out, a) for s in order}
            rounds.append({"order": order, **sides})
            if not a.json:
                on, off = sides["on"], sides["off"]
                print(f"round {r + 1}: rollout on {on['rollout_s']:.1f} s, off {off['rollout_s']:.1f} s "
                      f"(off/on {off['rollout_s'] / on['rollout_s']:.2f}x); same episodes: "
                      f"{on['episodes'] == off['episodes']}; load {on['load_before']:.2f}/{off['load_before']:.2f}",
                      flush=True)  # fmt: skip
    result = {
        "rollout_off_over_on": spread([r["off"]["rollout_s"] / r["on"]["rollout_s"] for r in rounds]),
        "step_off_over_on": spread([r["off"]["step_s"] / r["on"]["step_s"] for r in rounds]),
        "rollout_s_on": spread([r["on"]["rollout_s"] for r in rounds]),
        "rollout_s_off": spread([r["off"]["rollout_s"] for r in rounds]),
        "same_episodes": all(r["on"]["episodes"] == r["off"]["episodes"] for r in rounds),
        "off": a.off,
        "on": a.on,
        "prompts_per_step": a.prompts,
        "overrides": a.set,
        "steps": a.steps,
        "python": sys.version.split()[0],
        "rounds": rounds,
    }
    if a.json:
        print(json.dumps(result))
    else:
        ro, st = result["rollout_off_over_on"], result["step_off_over_on"]
        print(f"off = {a.off}: rollout off/on {ro['median']:.2f}x ({ro['min']:.2f}-{ro['max']:.2f}); "
              f"step off/on {st['median']:.2f}x ({st['min']:.2f}-{st['max']:.2f}); "
              f"same episodes on both sides: {result['same_episodes']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
