r"""The void-turn rule: turns judged per second, and ``tirl filter`` end to end on a JSONL file.

The mix (seeded): about 850 characters per assistant turn on average —
reasoning prose with inline LaTeX (``\\frac``, ``\\le``, ``x^{2}``),
comparisons (``<``, ``>``, ``a<b``), non-ASCII words in three turns of ten (``≤``, ``→``),
fenced blocks of several languages (python, bash, text, output, json), answers
with nested braces, unclosed fences, inline backticks, and OpenAI tool calls
(some malformed). The prose carries backslashes and ``<`` in most turns, so
the answer search runs on them (an earlier mix had neither, and the judge
skipped the search on 70% of its turns). Every turn is distinct text; nothing
is cached.

The ``--json`` object leads with the like-for-like headline,
``turns_per_cpu_s_one_worker`` (``tirl filter --workers 1``, min / median /
max assistant turns per CPU second, against the one-process reference's
``reference_turns_per_cpu_s``), then ``parallel`` (``tirl filter`` with its
default workers: turns per wall second and per CPU second); these three are
absent with ``--trajectories 0``.

Two measurements:

* ``turns_per_s``: :func:`tirl.parsing.judge_message` alone, CPU time of this
  process, best of ``--repeats`` (target >= 200,000 on one core);
* ``cli``: ``--trajectories`` four-turn trajectories (system, user, then
  assistant and tool messages; the answer in ``answer``) judged end to end by
  three sides, each a subprocess run ``--cli-repeats`` times, interleaved
  (``cli.how`` says exactly how): ``reference`` (the plain loop the fast path
  must match, streamed: ``json.loads``, typed objects; the command before this
  change also held every trajectory in memory first), ``filter_1`` (``tirl filter --workers 1``)
  and ``filter`` (``tirl filter`` as a user runs it: default workers). Each
  gives min / median / max of wall seconds, CPU seconds (the process and its
  forked workers), assistant turns per wall second and per CPU second, and
  peak RSS above its own one-trajectory baseline; the outputs of every run are
  compared byte for byte. Target: >= 100,000 turns per second end to end on
  25,000 trajectories.

The load average before and after the run, the usable CPUs and the
interpreter are printed; ``noisy`` when the load was above 1.5.

    python benchmarks/bench_filter.py [--turns N] [--trajectories N] [--json]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import orjson

from tirl.filters import stream
from tirl.filters.forked import usable_cpus
from tirl.parsing import DEFAULT_RULES, judge_message
from tirl.types import Message, Role, ToolCall

WORDS = (
    "we need to compute the value first then check the result carefully because the sum of terms over the "
    "range is large so let us write a short program that prints it and verify the remainder modulo the prime "
    r"\frac{n}{2} \le x^{2} $a<b$ since n>0 \sqrt{k} \cdot \{1,\dots,n\} a_{i}>a_{j} p<q \pmod{p} \alpha"
).split()
UNICODE_WORDS = (*WORDS, *"so ≤ n·m → café ×".split())  # non-ASCII, as models write it (json.dumps: \\uXXXX)


def prose(rng: random.Random, chars: int, words: tuple[str, ...] | list[str] = WORDS) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(words)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def make_turn(rng: random.Random, i: int) -> Message:
    words = UNICODE_WORDS if rng.random() < 0.3 else WORDS  # three turns in ten hold some non-ASCII text
    kind = rng.random()
    if kind < 0.08:
        args = f'{{"code": "print({i})"}}' if rng.random() < 0.8 else f'{{"code": print({i})'
        return Message(Role.ASSISTANT, prose(rng, 200, words), (ToolCall(name="python", arguments=args, id=f"c{i}"),))
    parts = [prose(rng, rng.randint(300, 800), words)]
    if kind < 0.55:
        lang = rng.choice(["python", "python", "py", "bash", "sh", "Python"])
        body = "\n".join(f"x{j} = {rng.randint(1, 10**6)} * {rng.randint(1, 999)}" for j in range(rng.randint(3, 10)))
        parts.append(f"```{lang}\n{body}\nprint(x0 % 97)\n```")
    elif kind < 0.65:
        parts.append(f"```{rng.choice(['text', 'output', 'json'])}\n{prose(rng, 120, words)}\n```")
        parts.append("Let me double-check `print(x)` before answering.")
    elif kind < 0.85:
        parts.append(f"So the answer is \\boxed{{\\frac{{{rng.randint(1, 999)}}}{{{rng.randint(2, 99)}}}}}.")
    elif kind < 0.9:
        parts.append(f"<answer>{rng.randint(1, 10**9)}</answer>")
    elif kind < 0.95:
        parts.append(f"```python\nprint({i})\n")  # unclosed fence
    else:
        parts.append("\\boxed{} \\boxed{{unbalanced")
    parts.append(prose(rng, rng.randint(100, 400), words))
    return Message(Role.ASSISTANT, "\n\n".join(parts))


def make_trajectory(rng: random.Random, i: int) -> dict[str, object]:
    """One four-turn trajectory in the JSONL format of ``tirl filter``."""
    msgs: list[dict[str, object]] = [
        {"role": "system", "content": "Solve the problem. Use python; end with \\boxed{}."},
        {"role": "user", "content": f"Problem {i}: {prose(rng, 200)}"},
    ]
    for k in range(4):
        msgs.append(make_turn(rng, 4 * i + k).to_dict())
        if k < 3:
            msgs.append({"role": "tool", "content": f"```output\n{rng.randint(0, 10**6)}\n```"})
    return {"id": f"t{i}", "group": f"g{i // 8}", "messages": msgs, "reward": 0.0, "answer": str(rng.randint(1, 999))}


REFERENCE = """
import json, sys
from tirl.config import load_config
from tirl.fileio import atomic_write
from tirl.filters.stream import reference_part
from tirl.filters.void_turn import rules_from_config
cfg = load_config(None)
part = reference_part(sys.argv[1], rules_from_config(cfg.filter, cfg.env), keep=True)
with atomic_write(sys.argv[2], "wb") as fh:
    fh.write("".join(part.verdicts).encode("ascii"))
with atomic_write(sys.argv[3], "wb") as fh:
    fh.write(b"".join(part.kept))
print(json.dumps({"trajectories": part.trajectories, "void_ratio": part.void / max(part.trajectories, 1)}))
"""
HOW = (
    "each side is a subprocess of this script (JSON in, JSON out: verdicts and kept files written, interpreter "
    "start-up and imports included); wall_s: perf_counter around it; cpu_s: user + system CPU of the process and "
    "its forked workers (os.wait4, from a small launcher process); peak_rss_mb: its peak RSS (the memory-mapped "
    "input's pages count), above_baseline_mb: minus the same command's peak on a one-trajectory input. 'reference' is "
    "the plain loop the fast path must match, streamed (tirl.filters.stream.reference_part: json.loads through "
    "the one JSONL reader, Trajectory objects, judge_trajectory, json.dumps lines), 'filter_1' is "
    "`tirl filter --workers 1`, 'filter' is `tirl filter` with its default workers. The sides run interleaved, "
    "--cli-repeats times each; the outputs of every run are compared byte for byte."
)


LAUNCH = """
import json, os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
row = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_kb": usage.ru_maxrss}
with open(sys.argv[1], "w") as fh:
    json.dump({**row, "rc": os.waitstatus_to_exitcode(status)}, fh)
"""


def _run(cmd: list[str], tmp: Path) -> tuple[float, float, float, str]:
    """Run ``cmd``; (wall s, CPU s of it and its reaped workers, peak RSS MB, its output).

    A small launcher process forks and execs it and reads ``os.wait4``: a peak RSS read from a child of this
    (large) process would start at this process's size (Linux keeps the peak across exec).
    """
    log, stats = tmp / "log", tmp / "stats.json"
    with log.open("w") as fh:
        subprocess.run(
            [sys.executable, "-c", LAUNCH, str(stats), *cmd], stdout=fh, stderr=subprocess.STDOUT, check=True
        )
    row, out = json.loads(stats.read_text()), log.read_text()
    if row["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({row['rc']}): {out[-2000:]}")
    return row["wall"], row["cpu"], row["rss_kb"] / 1024, out


def _spread(values: list[float], digits: int = 3) -> dict[str, float]:
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
            "max": round(max(values), digits)}  # fmt: skip


def _sides(tmp: Path, src: Path) -> dict[str, list[str]]:
    py = [sys.executable, "-m", "tirl.cli", "filter", str(src), "--verdicts", str(tmp / "v"), "--kept", str(tmp / "k")]
    return {
        "reference": [sys.executable, "-c", REFERENCE, str(src), str(tmp / "v"), str(tmp / "k")],
        "filter_1": [*py, "--json", "--workers", "1"],
        "filter": [*py, "--json"],
    }


def bench_decode(src: Path, repeats: int = 3) -> dict[str, float]:
    """CPU seconds to decode every line of ``src`` (best of ``repeats``): what orjson saves over json.loads."""
    lines = src.read_bytes().splitlines()
    best: dict[str, float] = {}
    for name, loads in (("json.loads", json.loads), ("orjson.loads", orjson.loads)):
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            for line in lines:
                loads(line)
            times.append(time.process_time() - t0)
        best[name] = round(min(times), 3)
    return best


def bench_phases(src: Path, repeats: int = 2) -> dict[str, float]:
    """Where the judging CPU of ``tirl filter --workers 1`` goes, in this process (best of ``repeats``).

    Differences of runs of :func:`tirl.filters.stream.judge_range` over the whole file with one part stubbed out
    (the void-but-correct audit, then also the judge): ``audit``, ``judge`` (``turn_acts``) and the rest
    (slicing, orjson decoding, field checks, verdict lines). Start-up and writing are not in these figures.
    """

    def best() -> float:
        times = []
        with src.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            for _ in range(repeats):
                t0 = time.process_time()
                stream.judge_range(src, buf, 0, len(buf), DEFAULT_RULES, keep=True)
                times.append(time.process_time() - t0)
        return min(times)

    full = best()
    with mock.patch.object(stream, "answers_match", lambda a, b: False):
        no_audit = best()
        with mock.patch.object(stream, "turn_acts", lambda c, t, r: (True, None)):
            rest = best()
    return {"judging": round(full, 3), "audit": round(full - no_audit, 3), "judge": round(no_audit - rest, 3),
            "decode_and_rest": round(rest, 3)}  # fmt: skip


def bench_cli(n: int, repeats: int) -> dict[str, object]:
    """Each side on ``n`` four-turn trajectories, ``repeats`` interleaved runs each, outputs compared."""
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        src, one = tmp / "in.jsonl", tmp / "one.jsonl"
        with src.open("w", encoding="utf-8") as fh:
            for i in range(n):
                fh.write(json.dumps(make_trajectory(rng, i)) + "\n")
        # the baseline input holds one trajectory: tirl filter refuses a file with none (it wrote empty verdicts)
        one.write_text(src.read_text(encoding="utf-8").splitlines(keepends=True)[0], encoding="utf-8")
        sides = _sides(tmp, src)
        on_one = {k: [str(one) if x == str(src) else x for x in cmd] for k, cmd in sides.items()}
        baseline = {k: _run(cmd, tmp)[2] for k, cmd in on_one.items()}  # start-up and imports, one trajectory
        runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in sides}
        expected: tuple[bytes, bytes] | None = None
        summary: dict[str, object] = {}
        for r in range(repeats):
            order = list(sides)[r % 3 :] + list(sides)[: r % 3]  # each side goes first once in three
            for side in order:
                wall, cpu, rss, out = _run(sides[side], tmp)
                runs[side].append((wall, cpu, rss))
                got = ((tmp / "v").read_bytes(), (tmp / "k").read_bytes())
                if expected is None:
                    expected = got
                elif got != expected:
                    raise SystemExit(f"{side}: its output differs from the first run's")
                summary = json.loads(out.strip().splitlines()[-1])
        turns = 4 * n
        result: dict[str, object] = {
            "trajectories": n,
            "assistant_turns": turns,
            "input_mb": round(src.stat().st_size / 1e6, 1),
            "outputs_identical": True,
            "void_ratio": summary["void_ratio"],
            "how": HOW,
            "decode_cpu_s": bench_decode(src),
            "phases_cpu_s": bench_phases(src),
        }
        for side, rows in runs.items():
            walls, cpus = [w for w, _, _ in rows], [c for _, c, _ in rows]
            peak = max(m for _, _, m in rows)
            result[side] = {
                "wall_s": _spread(walls), "cpu_s": _spread(cpus),
                "turns_per_s": _spread([turns / w for w in walls], 0),
                "turns_per_cpu_s": _spread([turns / c for c in cpus], 0),
                "peak_rss_mb": round(peak), "above_baseline_mb": round(peak - baseline[side]),
            }  # fmt: skip
        ref = statistics.median(w for w, _, _ in runs["reference"])
        result["speedup_median_wall"] = {s: round(ref / statistics.median(w for w, _, _ in runs[s]), 2) for s in runs}
        return result


def headline(cli: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON's first keys: the one-worker figure per CPU second, then the parallel one; {} without ``cli``.

    ``tirl filter --workers 1`` per CPU second is like for like with the
    one-process reference; the parallel figure (default workers) is per wall
    and per CPU second.
    """
    if cli is None:
        return {}
    return {
        "turns_per_cpu_s_one_worker": cli["filter_1"]["turns_per_cpu_s"],
        "parallel": {
            "workers": "tirl filter's default: one per 4 MB of input, up to the usable CPUs",
            "usable_cpus": usable_cpus(),
            "turns_per_s": cli["filter"]["turns_per_s"],
            "turns_per_cpu_s": cli["filter"]["turns_per_cpu_s"],
        },
        "reference_turns_per_cpu_s": cli["reference"]["turns_per_cpu_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--trajectories", type=int, default=25_000, help="tirl filter: four-turn trajectories")
    parser.add_argument("--cli-repeats", type=int, default=5, help="runs of each tirl filter side")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()
    rng = random.Random(0)
    turns = [make_turn(rng, i) for i in range(args.turns)]
    mean_chars = sum(len(t.content or "") for t in turns) / len(turns)
    best = float("inf")
    voids = 0
    for _ in range(args.repeats):
        t0 = time.process_time()  # CPU seconds of this process: "one core", robust to other load
        voids = sum(1 for t in turns if judge_message(t).is_void)
        best = min(best, time.process_time() - t0)
    per_s = len(turns) / best
    searched = sum(1 for t in turns if "\\" in (t.content or "") or "<" in (t.content or "")) / len(turns)
    cli = bench_cli(args.trajectories, args.cli_repeats) if args.trajectories > 0 else None
    after = os.getloadavg()
    machine = {
        "loadavg_before": [round(x, 2) for x in load],
        "loadavg_after": [round(x, 2) for x in after],
        "noisy": max(load[0], after[0]) > 1.5,
        "usable_cpus": usable_cpus(),
        "python": f"{sys.executable} (CPython {platform.python_version()}, no flags)",
    }
    if args.json:
        row = {"turns_per_s": round(per_s), "mean_chars": round(mean_chars), "void_fraction": voids / len(turns)}
        print(json.dumps({**headline(cli), **row, "answer_search_share": searched, "cli": cli, "machine": machine}))
        return
    print(f"{len(turns)} turns, {mean_chars:.0f} chars/turn on average, {voids / len(turns):.1%} void, "
          f"{searched:.0%} with a backslash or '<' (the answer search runs)")  # fmt: skip
    print(f"turns judged per second (best of {args.repeats}, one core): {per_s:,.0f}  (target >= 200,000)")
    if cli is not None:
        _print_cli(cli, args.cli_repeats)
    print(f"load average before / after: {machine['loadavg_before']} / {machine['loadavg_after']}"
          f"{'  (noisy)' if machine['noisy'] else ''}; {machine['usable_cpus']} CPUs; {machine['python']}")  # fmt: skip


def _print_cli(cli: dict[str, Any], repeats: int) -> None:
    print(f"tirl filter end to end: {cli['trajectories']:,} trajectories ({cli['input_mb']} MB), "
          f"{cli['assistant_turns']:,} assistant turns, {repeats} runs per side (min / median / max):")  # fmt: skip
    for side in ("reference", "filter_1", "filter"):
        row = cli[side]
        t, c = row["turns_per_s"], row["turns_per_cpu_s"]
        print(f"  {side:<10} wall {row['wall_s']['median']:.2f} s: {t['min']:>9,.0f} / {t['median']:>9,.0f} / "
              f"{t['max']:>9,.0f} turns/s;  per CPU s {c['min']:>9,.0f} / {c['median']:>9,.0f} / {c['max']:>9,.0f};  "
              f"x{cli['speedup_median_wall'][side]} wall vs reference; peak {row['peak_rss_mb']} MB "
              f"(+{row['above_baseline_mb']} MB)")  # fmt: skip
    print("  (target >= 100,000 turns/s end to end; outputs identical across all runs)")
    dec = cli["decode_cpu_s"]
    print(f"  decoding every line alone (CPU s, best of 3): json.loads {dec['json.loads']:.3f}, "
          f"orjson.loads {dec['orjson.loads']:.3f}")  # fmt: skip
    ph = cli["phases_cpu_s"]
    print(f"  judging CPU s with --workers 1, in-process: {ph['judging']:.3f} = turn_acts {ph['judge']:.3f} + "
          f"void-but-correct audit {ph['audit']:.3f} + decoding and the rest {ph['decode_and_rest']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
