"""Run every benchmark, each only on a quiet machine and at least 3 times, and write ``docs/results.md``.

    python benchmarks/run_all.py [--quick] [--out docs/results.md] [--max-load 0.5] [--repeats 3]
                                 [--only NAME ...] [--allow-noisy] [--wait-s 600]

What it does, for each benchmark in ``bench_table.BENCHMARKS`` (or those named with
``--only``), ``--repeats`` times in a row:

1. **The load gate.** It reads the 1-minute load average (``/proc/loadavg``).
   Above ``--max-load`` it waits, polling every few seconds, up to
   ``--wait-s`` seconds (the previous benchmark's own residue takes a minute
   or two to decay); still above, it refuses: one ``error:`` line, exit 1,
   and the page is left as it was. With ``--allow-noisy`` it runs anyway and
   marks the run ``noisy`` on the page.
2. **The run.** ``python benchmarks/<script> --json ARGS`` in its own
   subprocess, with this checkout's ``src/`` first on ``PYTHONPATH``; the last
   line of its standard output that is a JSON object is its result. A
   benchmark that fails stops the whole script (exit 1, page untouched).
3. **The page.** One table per benchmark: each headline figure's median over
   the runs, its range (min-max) and its target, then one row per run (start
   time, load before and after, wall time, quiet or noisy), the command that
   re-derives it, and the commit, date and machine (cores, CPU model, Python,
   torch) in the page's head. Where a curve says more than a number (steps per
   hour against the staleness bound K from ``bench_async``, held-out accuracy
   against K from ``bench_staleness``: the speed and what it costs) a PNG goes
   to ``img/`` beside the page.
   The page and the images are written atomically (``tirl.fileio``).

``--quick`` runs every benchmark at its smallest sizes: a check that the
benchmarks and this page work, not a result (the page says so in its head).

**Keeping sections.** Each section says when, at which commit and by which
command it was measured. ``--keep`` rewrites the page with the benchmarks
measured now and keeps, verbatim, the sections of the existing page for the
others (so ``--only NAME --keep`` re-measures one benchmark without losing
the rest; a kept section from a page older than these lines gets its date
and commit from that page's head). Without ``--keep`` the page holds only
this run's benchmarks. ``--bench-arg NAME=ARG`` appends ARG to one benchmark's command line (the
page shows it): ``staleness=--out=DIR`` keeps the staleness runs in DIR, and
a later run with the same argument reads the finished ones instead of
re-running them (``bench_staleness.py``'s own rule). A benchmark may fix its own number of runs
(:attr:`bench_table.Bench.runs`: ``staleness``, whose seeds are its
repeats); its section says why.

Not covered: the GPU check (``gpu_check.sh``, it needs a GPU), ``bench_memory``
(it needs a model directory) and ``bench_pipeline --real``; a benchmark's
own noise beyond the load gate (thermal state, other users' I/O).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from tirl.cli import OneLineParser  # noqa: E402
from tirl.errors import TirlError, one_line  # noqa: E402
from tirl.fileio import check_output, write_bytes, write_text  # noqa: E402
from tirl.models.kernels import cpu_model, package_version  # noqa: E402

sys.path.insert(0, str(HERE))
from bench_table import BENCHMARKS, NAMES, Bench, Figure, Result  # noqa: E402


# ---------------------------------------------------------------------------------------- measuring
class Refused(Exception):
    """The load average stayed above the gate and ``--allow-noisy`` was not given."""


class Failed(Exception):
    """A benchmark exited non-zero or printed no JSON object."""


@dataclasses.dataclass(frozen=True)
class Run:
    """One repetition of one benchmark."""

    started: datetime.datetime
    load_before: float
    load_after: float
    wall_s: float
    noisy: bool
    result: Result


@dataclasses.dataclass(frozen=True)
class Machine:
    """Where and at which commit the page was measured."""

    cores: int
    usable_cores: int
    cpu: str
    python: str
    torch: str
    commit: str


@dataclasses.dataclass(frozen=True)
class Gate:
    """The load gate: the limit, where the load is read, how long to wait, and whether to run anyway."""

    max_load: float
    loadavg_file: Path
    wait_s: float
    allow_noisy: bool
    poll_s: float = 5.0

    def load(self) -> float:
        """The 1-minute load average."""
        return float(self.loadavg_file.read_text().split()[0])

    def wait(self, what: str) -> tuple[float, bool]:
        """Wait for the load to fall to the limit; returns (load, noisy) or raises :class:`Refused`."""
        deadline = time.monotonic() + self.wait_s
        load = self.load()
        while load > self.max_load and time.monotonic() < deadline:
            time.sleep(max(0.0, min(self.poll_s, deadline - time.monotonic())))
            load = self.load()
        if load <= self.max_load:
            return load, False
        if self.allow_noisy:
            return load, True
        raise Refused(
            f"the 1-minute load average is {load:.2f} before {what}, above --max-load {self.max_load:g} "
            f"after waiting {self.wait_s:g} s — run it on a quiet machine (or wait longer with --wait-s), or pass "
            "--allow-noisy to measure anyway with the runs marked noisy"
        )


def run_once(bench: Bench, quick: bool, gate: Gate, index: int) -> Run:
    """One gated run of ``bench``: its JSON object, the load before and after, the wall time."""
    load, noisy = gate.wait(f"{bench.name} run {index}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.perf_counter()
    cmd = [sys.executable, *bench.argv(quick)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=bench.timeout_s)
    except subprocess.TimeoutExpired:
        limit = f"{bench.name} run {index} took over {bench.timeout_s:g} s"
        raise Failed(f"{limit} — run `{shown(bench, quick)}` alone") from None
    wall = time.perf_counter() - t0
    objects = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not objects:
        tail = one_line(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output")
        raise Failed(f"{bench.name} run {index} exited {proc.returncode} ({tail}) — run `{shown(bench, quick)}` alone")
    result = json.loads(objects[-1])
    return Run(started, load, gate.load(), wall, noisy, result)


def shown(bench: Bench, quick: bool) -> str:
    """The command a reader re-runs, as text."""
    return " ".join(["python", *bench.argv(quick)])


def _git(*args: str) -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def machine() -> Machine:
    """Cores, CPU model, Python, torch and the commit (``+dirty`` when tracked files differ from it)."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    if _git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    return Machine(
        cores=os.cpu_count() or 1,
        usable_cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
        cpu=cpu_model(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        torch=package_version("torch"),
        commit=commit,
    )


# ------------------------------------------------------------------------------------------- the page
def _fmt(value: float, fig: Figure) -> str:
    text = f"{value:,.{fig.digits}f}"
    return f"{text}×" if fig.unit == "×" else f"{text} {fig.unit}".rstrip()


def figure_rows(fig: Figure, runs: Sequence[Run]) -> str:
    """One row of a benchmark's figure table: median, range, target, and how many runs held the figure."""
    values = [v for v in (fig.read(r.result) for r in runs) if v is not None]
    if not values:
        return f"| {fig.name} | — | not in this run's output | {fig.target or '—'} | 0 of {len(runs)} |"
    lo, hi = min(values), max(values)
    spread = _fmt(lo, fig) if lo == hi else f"{_fmt(lo, fig)} – {_fmt(hi, fig)}"
    return f"| {fig.name} | **{_fmt(statistics.median(values), fig)}** | {spread} | {fig.target or '—'} | " \
        f"{len(values)} of {len(runs)} |"  # fmt: skip


def section(bench: Bench, runs: Sequence[Run], args: argparse.Namespace, image: str | None, m: Machine) -> list[str]:
    """A benchmark's section of the page."""
    quick = args.quick
    when = min(r.started for r in runs)
    lines = [f"## {bench.name}", "", f"Measured {when:%Y-%m-%d %H:%M} UTC, commit `{m.commit}`, by "
             f"`python benchmarks/run_all.py{_flags(args)}`.", "", bench.what, ""]  # fmt: skip
    if bench.runs and not quick:
        lines += [f"{bench.runs[0]} run(s) whatever `--repeats` says: {bench.runs[1]}", ""]
    lines += [f"Command (each run): `{shown(bench, quick)}`", ""]
    lines += ["| figure | median | range over the runs | target | runs |", "|---|---|---|---|---|"]
    lines += [figure_rows(f, runs) for f in bench.figures]
    lines += ["", "| run | started (UTC) | 1-min load before → after | wall s | gate |", "|---|---|---|---|---|"]
    for i, r in enumerate(runs, 1):
        gate = "**noisy**" if r.noisy else "quiet"
        lines.append(f"| {i} | {r.started:%Y-%m-%d %H:%M:%S} | {r.load_before:.2f} → {r.load_after:.2f} | "
                     f"{r.wall_s:.1f} | {gate} |")  # fmt: skip
    if image:
        lines += ["", f"![{bench.name}](img/{image})"]
    return [*lines, ""]


MEASURED = re.compile(r"^Measured \d{4}-\d\d-\d\d \d\d:\d\d UTC, commit `")
WRITTEN = re.compile(r"^Written by `.*` on (\d{4}-\d\d-\d\d \d\d:\d\d) UTC .*commit `([^`]+)`")


def kept_sections(text: str) -> dict[str, str]:
    """The sections of an existing page by benchmark name, each with its ``Measured …`` line.

    A section written before sections carried that line gets it from the page's ``Written by`` head.
    """
    head, *parts = re.split(r"^## ", text, flags=re.M)
    written = next((w for line in head.splitlines() if (w := WRITTEN.match(line))), None)
    out = {}
    for part in parts:
        name, _, body = part.partition("\n")
        name = name.strip()
        if name not in NAMES:
            continue
        body = body.strip("\n")
        if not MEASURED.match(body) and written is not None:
            body = f"Measured {written[1]} UTC, commit `{written[2]}` (kept from an earlier page).\n\n{body}"
        out[name] = f"## {name}\n\n{body}\n"
    return out


def page(
    done: Sequence[tuple[Bench, list[Run], str | None]],
    args: argparse.Namespace,
    m: Machine,
    took: float,
    kept: dict[str, str] | None = None,
) -> str:
    """The whole results page: this run's sections and the ``kept`` ones, in :data:`BENCHMARKS` order."""
    now = datetime.datetime.now(datetime.UTC)
    noisy = sum(r.noisy for _, runs, _ in done for r in runs)
    head = [
        "# Measured results",
        "",
        "<!-- written by benchmarks/run_all.py: change that script and re-run it, do not edit this page -->",
        "",
        f"Written by `python benchmarks/run_all.py{_flags(args)}` on {now:%Y-%m-%d %H:%M} UTC "
        f"({took / 60:.1f} min), commit `{m.commit}`.",
        "",
        f"Machine: {m.cores} cores ({m.usable_cores} usable), {m.cpu}; {m.python}; torch {m.torch}.",
        "",
        f"Each benchmark ran {args.repeats} times in a row (unless its section says otherwise). Each run started "
        "only when the 1-minute load "
        f"average was at most {args.max_load:g}"
        + (f"; {noisy} run(s) started above it (`--allow-noisy`) and are marked **noisy**." if noisy else "."),
        "A figure is the median over the runs, with its range; a reader re-derives it by running the command "
        "beside it as many times.",
        "",
    ]
    if args.quick:
        head += ["**Quick mode: every benchmark at its smallest size. These figures check that the benchmarks "
                 "and this page work; they are not results.**", ""]  # fmt: skip
    if kept:
        head += [f"Sections kept from an earlier page (`--keep`): {', '.join(f'`{n}`' for n in kept)}; each says "
                 "its own date and commit.", ""]  # fmt: skip
    new = {bench.name: "\n".join(section(bench, runs, args, image, m)) for bench, runs, image in done}
    body = [new.get(name) or (kept or {})[name] for name in NAMES if name in new or name in (kept or {})]
    return "\n".join(head) + "\n" + "\n".join(body)


def _flags(args: argparse.Namespace) -> str:
    parts = [" --quick"] if args.quick else []
    parts += [f" --repeats {args.repeats}", f" --max-load {args.max_load:g}"]
    parts += [f" --only {n}" for n in args.only or []]
    parts += [" --keep"] if args.keep else []
    parts += [f" --bench-arg {a}" for a in args.bench_arg]
    return "".join(parts) + (" --allow-noisy" if args.allow_noisy else "")


# --------------------------------------------------------------------------------------------- main
def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; bad values are one ``error:`` line and exit 2."""
    p = OneLineParser(prog="run_all.py", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="every benchmark at its smallest size (a check, not a result)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="the page (images go to img/ beside it)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each benchmark (at least 3 unless --quick)")
    p.add_argument("--max-load", type=float, default=0.5, help="the 1-minute load average a run may start at")
    p.add_argument("--wait-s", type=float, default=600.0, help="how long to wait for the load to fall before a run")
    p.add_argument("--allow-noisy", action="store_true", help="run above --max-load and mark those runs noisy")
    p.add_argument("--only", action="append", choices=NAMES, help="run this benchmark only (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep the existing page's sections of the other benchmarks")
    p.add_argument("--bench-arg", action="append", default=[], metavar="NAME=ARG",
                   help="append ARG to benchmark NAME's command line (repeatable; the page shows the command), "
                   "e.g. staleness=--out=DIR to keep its runs and read finished ones")  # fmt: skip
    p.add_argument("--loadavg-file", default="/proc/loadavg", help=argparse.SUPPRESS)  # tests: a stubbed load
    args = p.parse_args(argv)
    for item in args.bench_arg:
        name, sep, arg = item.partition("=")
        if not sep or name not in NAMES or not arg:
            p.error(f"--bench-arg {item!r}: use NAME=ARG with NAME one of {', '.join(NAMES)}")
    fixed = {b.name for b in BENCHMARKS if b.runs}
    if args.repeats < (1 if args.quick else 3) and not (args.only and set(args.only) <= fixed):
        p.error(f"--repeats {args.repeats}: use at least {1 if args.quick else 3} (a range needs 3 runs)")
    if args.max_load < 0 or args.wait_s < 0:
        p.error("--max-load and --wait-s must be >= 0")
    return args


def measure(benches: Sequence[Bench], args: argparse.Namespace, gate: Gate) -> list[tuple[Bench, list[Run]]]:
    """Every run of every benchmark, in order; progress on stderr."""
    done = []
    for bench in benches:
        runs = []
        n = repeats_of(bench, args)
        for i in range(1, n + 1):
            run = run_once(bench, args.quick, gate, i)
            print(f"{bench.name} run {i}/{n}: {run.wall_s:.1f} s, load {run.load_before:.2f} → "
                  f"{run.load_after:.2f}{' (noisy)' if run.noisy else ''}", file=sys.stderr, flush=True)  # fmt: skip
            runs.append(run)
        done.append((bench, runs))
    return done


def with_args(bench: Bench, bench_args: Sequence[str]) -> Bench:
    """``bench`` with the ``--bench-arg NAME=ARG`` values for its name appended to both its command lines."""
    extra = tuple(arg for name, _, arg in (a.partition("=") for a in bench_args) if name == bench.name)
    return dataclasses.replace(bench, args=bench.args + extra, quick_args=bench.quick_args + extra) if extra else bench


def repeats_of(bench: Bench, args: argparse.Namespace) -> int:
    """How many times ``bench`` runs: its own fixed count (:attr:`Bench.runs`), else ``--repeats``."""
    return bench.runs[0] if bench.runs and not args.quick else args.repeats


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, then write the page and its images; 0 when written, 1 when refused or failed, 2 on bad input."""
    args = parse(argv)
    t0 = time.monotonic()
    try:
        out = check_output(args.out)
        gate = Gate(args.max_load, Path(args.loadavg_file), args.wait_s, args.allow_noisy)
        gate.load()
    except (TirlError, OSError, ValueError, IndexError) as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    benches = [with_args(b, args.bench_arg) for b in BENCHMARKS if not args.only or b.name in args.only]
    try:
        kept = kept_sections(out.read_text(encoding="utf-8")) if args.keep and out.is_file() else {}
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: --keep: cannot read {args.out}: {one_line(str(exc))} — fix the page or drop --keep",
              file=sys.stderr)  # fmt: skip
        return 2
    for bench in benches:
        kept.pop(bench.name, None)
    try:
        measured = measure(benches, args, gate)
    except (Refused, Failed) as exc:
        print(f"error: {exc} (the page was not written)", file=sys.stderr)
        return 1
    done: list[tuple[Bench, list[Run], str | None]] = []
    for bench, runs in measured:
        png = bench.plot([r.result for r in runs]) if bench.plot else None
        name = f"results_{bench.name}.png" if png else None
        if png and name:
            write_bytes(out.parent / "img" / name, png)
        done.append((bench, runs, name))
    write_text(out, page(done, args, machine(), time.monotonic() - t0, kept))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
