"""Wall time of the command line's start-up paths, each in a fresh interpreter, with the heavy modules it loaded.

Paths: ``tirl --help``, ``tirl X --help`` for every subcommand X (read from the timed tree's ``tirl.cli``), and
three input errors that must come before torch loads: a typo'd env name (``tirl train --env nosuch``), an unknown config
key (``--set algo.nosuch=1``) and tools the built-in model cannot render (``--env tir-math --set env.tools=true``).
Each is
run ``--runs`` times as ``python -m tirl.cli ...`` (interpreter start included); the median and the range
are printed with the load average, and whether torch or transformers were imported (they must not be:
the target is < 2 s on an idle core, where importing torch and transformers alone takes 15-50 s on a
busy 2-core machine). ``--json`` prints one JSON object instead.

    python benchmarks/bench_cli_startup.py [--runs 5] [--json] [--src OTHER_CHECKOUT/src]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("torch", "transformers", "numpy")
ERRORS: dict[str, list[str]] = {
    "train --env nosuch": ["train", "--env", "nosuch"],
    "train --set algo.nosuch=1": ["train", "--set", "algo.nosuch=1"],
    "train --env tir-math --set env.tools=true": ["train", "--env", "tir-math", "--set", "env.tools=true"],
}
PROBE = (
    "import json, sys\n"
    "from tirl.cli import main\n"
    "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code or 0\n"
    f"print(json.dumps({{'rc': rc, 'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}), file=sys.stderr)\n"
)


def probe(args: list[str], src: Path = SRC) -> tuple[float, int, list[str]]:
    """(wall seconds, exit status, heavy modules loaded) of one ``tirl ARGS`` in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    last = json.loads(proc.stderr.strip().splitlines()[-1])
    return wall, int(last["rc"]), list(last["heavy"])


def paths(src: Path = SRC) -> dict[str, list[str]]:
    """Every path timed: ``tirl --help``, each subcommand's ``--help`` (the CLI table of ``src``), the errors."""
    listing = "import json, tirl.cli; print(json.dumps(list(tirl.cli.COMMANDS)))"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, env=env, check=True)
    helps = {f"tirl {name} --help": [name, "--help"] for name in json.loads(proc.stdout)}
    return {"tirl --help": ["--help"], **helps, **ERRORS}


def main() -> int:
    """Run every path ``--runs`` times and print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--src", type=Path, default=SRC, help="the source tree to time (e.g. an older commit's src)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    out: dict[str, dict[str, object]] = {}
    for name, argv in paths(args.src).items():
        walls, rcs, heavy = [], set(), set()
        for _ in range(args.runs):
            wall, rc, mods = probe(argv, args.src)
            walls.append(wall)
            rcs.add(rc)
            heavy.update(mods)
        out[name] = {"median_s": round(statistics.median(walls), 3), "min_s": round(min(walls), 3),
                     "max_s": round(max(walls), 3), "exit": sorted(rcs), "heavy": sorted(heavy)}  # fmt: skip
    load_after = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load_before": load, "load_after": load_after, "runs": args.runs, "paths": out}))
        return 0
    print(f"CLI start-up, {args.runs} runs each, load {load:.2f} -> {load_after:.2f}")
    print(f"{'path':<30} {'median':>8} {'range':>13}  exit  heavy modules")
    for name, r in out.items():
        heavy_text = ", ".join(r["heavy"]) or "none"  # type: ignore[arg-type]
        print(f"{name:<30} {r['median_s']:>7.2f}s {r['min_s']:>6.2f}-{r['max_s']:.2f}s  {r['exit']}  {heavy_text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
