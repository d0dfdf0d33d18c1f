r"""The void-turn rule: turns judged per second, and ``tirl filter`` end to end on a JSONL file.

The mix (seeded): about 850 characters per assistant turn on average —
reasoning prose with inline LaTeX (``\\frac``, ``\\le``, ``x^{2}``) and
comparisons (``<``, ``>``, ``a<b``), fenced blocks of several languages
(python, bash, text, output, json), answers with nested braces, unclosed
fences, inline backticks, and OpenAI tool calls (some malformed). The prose
carries backslashes and ``<`` in most turns, so the answer search runs on
them (an earlier mix had neither, and the judge skipped the search on 70% of
its turns). Every turn is distinct text; nothing is cached.

Two measurements:

* ``turns_per_s``: :func:`tirl.parsing.judge_message` alone, CPU time of this
  process, best of ``--repeats`` (target >= 200,000 on one core);
* ``cli``: ``tirl filter IN --verdicts V --kept K --json`` as a subprocess on
  ``--trajectories`` four-turn trajectories (system, user, then assistant and
  tool messages; the answer in ``answer``): JSON in, JSON out, interpreter
  start-up and imports included; assistant turns per wall second and per CPU
  second of the subprocess (user + system), best of ``--cli-repeats``
  (target >= 100,000 on 25,000 trajectories).

The load average before the run is printed; ``noisy`` when it was above 1.5.

    python benchmarks/bench_filter.py [--turns N] [--trajectories N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tirl.parsing import judge_message
from tirl.types import Message, Role, ToolCall

WORDS = (
    "we need to compute the value first then check the result carefully because the sum of terms over the "
    "range is large so let us write a short program that prints it and verify the remainder modulo the prime "
    r"\frac{n}{2} \le x^{2} $a<b$ since n>0 \sqrt{k} \cdot \{1,\dots,n\} a_{i}>a_{j} p<q \pmod{p} \alpha"
).split()


def prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def make_turn(rng: random.Random, i: int) -> Message:
    kind = rng.random()
    if kind < 0.08:
        args = f'{{"code": "print({i})"}}' if rng.random() < 0.8 else f'{{"code": print({i})'
        return Message(Role.ASSISTANT, prose(rng, 200), (ToolCall(name="python", arguments=args, id=f"c{i}"),))
    parts = [prose(rng, rng.randint(300, 800))]
    if kind < 0.55:
        lang = rng.choice(["python", "python", "py", "bash", "sh", "Python"])
        body = "\n".join(f"x{j} = {rng.randint(1, 10**6)} * {rng.randint(1, 999)}" for j in range(rng.randint(3, 10)))
        parts.append(f"```{lang}\n{body}\nprint(x0 % 97)\n```")
    elif kind < 0.65:
        parts.append(f"```{rng.choice(['text', 'output', 'json'])}\n{prose(rng, 120)}\n```")
        parts.append("Let me double-check `print(x)` before answering.")
    elif kind < 0.85:
        parts.append(f"So the answer is \\boxed{{\\frac{{{rng.randint(1, 999)}}}{{{rng.randint(2, 99)}}}}}.")
    elif kind < 0.9:
        parts.append(f"<answer>{rng.randint(1, 10**9)}</answer>")
    elif kind < 0.95:
        parts.append(f"```python\nprint({i})\n")  # unclosed fence
    else:
        parts.append("\\boxed{} \\boxed{{unbalanced")
    parts.append(prose(rng, rng.randint(100, 400)))
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


def bench_cli(n: int, repeats: int) -> dict[str, float]:
    """``tirl filter`` on ``n`` four-turn trajectories as a subprocess; best wall time of ``repeats``."""
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.jsonl"
        with src.open("w", encoding="utf-8") as fh:
            for i in range(n):
                fh.write(json.dumps(make_trajectory(rng, i)) + "\n")
        cmd = [sys.executable, "-m", "tirl.cli", "filter", str(src), "--verdicts", str(Path(tmp) / "v.jsonl")]
        cmd += ["--kept", str(Path(tmp) / "k.jsonl"), "--json"]
        best = best_cpu = float("inf")
        summary: dict[str, object] = {}
        for _ in range(repeats):
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            best = min(best, time.perf_counter() - t0)
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            best_cpu = min(best_cpu, c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime)
            summary = json.loads(out.stdout.strip().splitlines()[-1])
        return {
            "trajectories": n,
            "assistant_turns": 4 * n,
            "input_mb": src.stat().st_size / 1e6,
            "wall_s": best,
            "turns_per_s": 4 * n / best,
            "cpu_s": best_cpu,  # user + system CPU of the subprocess: what the run costs, robust to other load
            "turns_per_cpu_s": 4 * n / best_cpu,
            "void_ratio": float(summary["void_ratio"]),  # type: ignore[arg-type]
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--trajectories", type=int, default=25_000, help="tirl filter: four-turn trajectories")
    parser.add_argument("--cli-repeats", type=int, default=3)
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
    machine = {"loadavg_before": [round(x, 2) for x in load], "noisy": load[0] > 1.5, "python": sys.executable}
    if args.json:
        row = {"turns_per_s": round(per_s), "mean_chars": round(mean_chars), "void_fraction": voids / len(turns)}
        print(json.dumps({**row, "answer_search_share": searched, "cli": cli, "machine": machine}))
        return
    print(f"{len(turns)} turns, {mean_chars:.0f} chars/turn on average, {voids / len(turns):.1%} void, "
          f"{searched:.0%} with a backslash or '<' (the answer search runs)")  # fmt: skip
    print(f"turns judged per second (best of {args.repeats}, one core): {per_s:,.0f}  (target >= 200,000)")
    if cli is not None:
        print(f"tirl filter end to end: {cli['trajectories']:,.0f} trajectories ({cli['input_mb']:.0f} MB), "
              f"{cli['wall_s']:.2f} s wall (best of {args.cli_repeats}): {cli['turns_per_s']:,.0f} assistant "
              f"turns/s; {cli['cpu_s']:.2f} s CPU: {cli['turns_per_cpu_s']:,.0f} turns per CPU second "
              f"(target >= 100,000)")  # fmt: skip
    print(f"load average before the run: {machine['loadavg_before']}{'  (noisy)' if machine['noisy'] else ''}")


if __name__ == "__main__":
    main()
