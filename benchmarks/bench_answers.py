"""Per-call cost of each path of ``tirl.answers.answers_match``, and agreement on the careful-grader corpus.

Paths (what :func:`tirl.answers.decide` reports): ``exact`` (plain numbers and
lists of them: exact rationals), ``normalise`` (cleaning settles it: boxed,
units, ``%``, text, choices), ``fallback`` (math-verify in a warm worker
process, one request over a pipe), ``hostile`` (``1e5000``, ``10^{10^{10}}``,
100,000 digits: refused before parsing). Side by side, on the same pairs and
in the same process: the old checker (git ``77a0b27^``, exact-or-string only)
and math-verify called directly in this process (its default configuration,
with its own numeric tolerance; no worker). Each figure is the median per-call
time over ``--runs`` runs of ``--reps`` calls per pair, with the range.

Agreement: ``answers_match`` and plain math-verify (default ``parse`` +
``verify``) against the corpus verdicts (tests/answers_corpus.jsonl); the
``hostile`` rows are left out for plain math-verify (it would run up to its
own timeouts on them).

    python benchmarks/bench_answers.py [--runs 5] [--reps 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

from tirl.answers import answers_match, decide, shutdown_default_pool
from tirl.answers.fallback import default_pool

ROOT = Path(__file__).resolve().parent.parent
PAIRS: dict[str, list[tuple[str, str]]] = {
    "exact": [("0.5", r"\frac{1}{2}"), ("1,000", "1000"), ("-0.75", r"-\frac{3}{4}"), ("(0.5, 2)", r"(\frac12, 2)")],
    "normalise": [(r"\boxed{\dfrac12}", r"\frac{1}{2}"), (r"5\text{ cm}", "5"), (r"\text{Yes}.", "yes"), ("(C)", "C")],
    "fallback": [(r"\sqrt{8}", r"2\sqrt{2}"), ("x^2+2x+1", "(x+1)^2"), ("3.14", r"\pi"), ("2i+1", "1+2i")],
    "hostile": [("1e5000", "1"), (r"\boxed{1e10000000}", "1"), (r"10^{10^{10}}", "1"), ("1" + "0" * 100_000, "1")],
}


def old_checker() -> Callable[[str, str], bool]:
    """The checker before this work, loaded from git (exact numbers or normalised strings)."""
    src = subprocess.run(
        ["git", "show", "77a0b27^:src/tirl/answers.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    mod = types.ModuleType("old_answers")
    exec(compile(src, "old_answers.py", "exec"), mod.__dict__)
    return mod.answers_match  # type: ignore[no-any-return]


def plain_math_verify() -> Callable[[str, str], bool]:
    from math_verify import parse, verify

    def check(pred: str, gold: str) -> bool:
        return bool(verify(parse(f"${gold}$"), parse(f"${pred}$")))

    return check


def per_call_us(fn: Callable[[str, str], object], pairs: list[tuple[str, str]], reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        for pred, gold in pairs:
            try:
                fn(pred, gold)
            except Exception:
                pass  # the old checker raises on hostile input; the time until it raised still counts
    return (time.perf_counter() - start) / (reps * len(pairs)) * 1e6


def measure(fn: Callable[[str, str], object], pairs: list[tuple[str, str]], runs: int, reps: int) -> list[float]:
    return [per_call_us(fn, pairs, reps) for _ in range(runs)]


def agreement(fn: Callable[[str, str], bool], rows: list[dict], skip: set[str] = frozenset()) -> tuple[int, int, int]:
    agree = n = false_pos = 0
    for row in rows:
        if row["cat"] in skip:
            continue
        n += 1
        try:
            got = fn(row["pred"], row["gold"])
        except Exception:
            got = None
        agree += got is row["match"]
        false_pos += got is True and not row["match"]
    return agree, n, false_pos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for path, pairs in PAIRS.items():
        assert all(decide(p, g).path in _accepted(path) for p, g in pairs), path
    start = time.perf_counter()
    default_pool().check("1", "1")  # start the worker (sympy import); reported separately
    cold_ms = (time.perf_counter() - start) * 1e3
    old, mv = old_checker(), plain_math_verify()
    table = []
    for path, pairs in PAIRS.items():
        reps = max(1, args.reps // (20 if path == "fallback" else 1))
        new = measure(answers_match, pairs, args.runs, reps)
        before = measure(old, pairs, args.runs, reps) if path != "hostile" else [float("nan")]
        direct = measure(mv, pairs, args.runs, reps) if path != "hostile" else [float("nan")]
        table.append({"path": path, "tirl_us": new, "old_us": before, "math_verify_us": direct})
    rows = [json.loads(line) for line in (ROOT / "tests" / "answers_corpus.jsonl").read_text().splitlines()]
    result = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "loadavg": Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None,
        "cpus": os.cpu_count(),
        "worker_start_ms": round(cold_ms, 1),
        "paths": table,
        "agreement": {
            "tirl": agreement(answers_match, rows),
            "old": agreement(old, rows),
            "math_verify_plain": agreement(mv, rows, skip={"hostile"}),
        },
    }
    shutdown_default_pool()
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['python']}, {result['cpus']} CPUs, load {result['loadavg']}; worker start {cold_ms:.0f} ms")
    head = ("path", "tirl µs/call", "old µs/call", "math-verify µs/call", "tirl/old", "mv/tirl")
    print(f"{head[0]:10} {head[1]:>24} {head[2]:>20} {head[3]:>26} {head[4]:>9} {head[5]:>8}")
    for row in table:
        cells = [_cell(row[k]) for k in ("tirl_us", "old_us", "math_verify_us")]
        med = {k: statistics.median(row[k]) for k in ("tirl_us", "old_us", "math_verify_us")}
        ratios = [f"{med['tirl_us'] / med['old_us']:.1f}x", f"{med['math_verify_us'] / med['tirl_us']:.1f}x"]
        ratios = [r if r != "nanx" else "—" for r in ratios]
        print(f"{row['path']:10} {cells[0]:>24} {cells[1]:>20} {cells[2]:>26} {ratios[0]:>9} {ratios[1]:>8}")
    for name, (agree, n, fp) in result["agreement"].items():
        print(f"agreement {name:18} {agree}/{n}  false positives {fp}")


def _accepted(path: str) -> set[str]:
    return {"normalise": {"string", "text"}}.get(path, {path})


def _cell(values: list[float]) -> str:
    if any(v != v for v in values):
        return "—"
    med = statistics.median(values)
    return f"{med:,.1f} ({min(values):,.1f}–{max(values):,.1f})"


if __name__ == "__main__":
    sys.exit(main())
