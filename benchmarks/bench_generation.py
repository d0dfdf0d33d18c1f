"""In-process generation vs generation through ``tirl serve``, same requests, same weights.

Both sides sample the same ``--requests`` prompts (tir-math prompts in the
model's chat format), each with its own seed, at ``--concurrency`` requests in
flight: the in-process side calls :class:`~tirl.inference.hf.HFGenerator`
directly; the HTTP side calls :class:`~tirl.inference.openai_http.OpenAIGenerator`
against a ``tirl serve`` subprocess (the same HFGenerator behind uvicorn).
Each side gets the same torch thread count. Rounds alternate the two sides
(the order flips every round); the median round of each side is reported,
because on a shared machine single rounds swing with the load. The HTTP
overhead is ``1 - http_tokens_per_s / in_process_tokens_per_s``.

    python benchmarks/bench_generation.py [--model DIR] [--concurrency 32] [--requests 128] [--json]

Without ``--model`` the built-in model is used, or, when it has not been
built, a randomly initialised tiny model of the same shape (printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from tirl.config import EnvConfig
from tirl.envs.registry import load_tasks
from tirl.errors import SetupError
from tirl.inference.base import Generator, SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.inference.openai_http import OpenAIGenerator
from tirl.models.loading import load_policy
from tirl.types import Message, Role


def model_dir(arg: str | None, tmp: Path) -> tuple[Path, str]:
    if arg:
        return Path(arg), arg
    from tirl.models.loading import builtin_model_path

    p = builtin_model_path()
    if (p / "config.json").is_file():
        return p, "built-in tiny-tir"
    from tirl.models.tiny import build_tiny_model, save_policy

    model, tok = build_tiny_model(seed=0)
    return save_policy(model, tok, tmp / "tiny"), "random tiny model (built-in not built)"


async def run_side(
    gen: Generator, prompts: list[list[int]], params: list[SamplingParams], conc: int
) -> tuple[int, float]:
    sem = asyncio.Semaphore(conc)

    async def one(ids: list[int], p: SamplingParams) -> int:
        async with sem:
            return len((await gen.generate(ids, p)).token_ids)

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(one(ids, p) for ids, p in zip(prompts, params, strict=True)))
    return sum(counts), time.perf_counter() - t0


def start_server(path: Path, threads: int, window_ms: float) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "tirl.cli", "serve", "--model", str(path), "--port", "0", "--threads", str(threads),
           "--batch-window-ms", str(window_ms), "--served-model-name", "bench"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    found: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(r"listening on (http://\S+/v1)", line)
            if m:
                found.append(m.group(1))
                return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(180)
    if not found:
        proc.kill()
        raise SetupError("tirl serve did not start within 180 s")
    return proc, found[0]


def batch_count(local: HFGenerator | None, url: str) -> int:
    if local is not None:
        return local.batches
    import httpx

    return int(httpx.get(url.removesuffix("/v1") + "/health").json()["batches"])


async def bench(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        path, what = model_dir(args.model, Path(tmp))
        policy = load_policy(path, threads=args.threads)
        tasks = load_tasks(EnvConfig(name="tir-math"), args.requests, seed=11)
        prompts = [policy.chat.prompt_ids([Message(role=Role.USER, content=t.prompt)]) for t in tasks]
        params = [
            SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=i) for i in range(len(tasks))
        ]
        local = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids,
                            batch_window_s=args.batch_window_ms / 1000)  # fmt: skip
        proc, url = start_server(path, args.threads, args.batch_window_ms)
        remote = OpenAIGenerator(url, model="bench", eos_ids=policy.chat.eos_ids, max_concurrency=args.concurrency)
        rates: dict[str, list[tuple[float, int, float]]] = {"in_process": [], "http": []}
        batches: dict[str, int] = {}
        try:
            for gen in (local, remote):  # warm-up (first batch, connections)
                await run_side(gen, prompts[: args.concurrency], params[: args.concurrency], args.concurrency)
            for r in range(args.rounds):
                order = [("in_process", local), ("http", remote)]
                for name, gen in order if r % 2 == 0 else order[::-1]:
                    b0 = batch_count(local, url) if name == "in_process" else batch_count(None, url)
                    tokens, wall = await run_side(gen, prompts, params, args.concurrency)
                    b1 = batch_count(local, url) if name == "in_process" else batch_count(None, url)
                    batches[name] = b1 - b0
                    rates[name].append((tokens / wall, tokens, wall))
                    if not args.json:
                        print(f"round {r + 1} {name:<10} {tokens} tokens in {wall:.2f} s = {tokens / wall:.0f} tok/s, "
                              f"{batches[name]} batches")  # fmt: skip
        finally:
            await remote.close()
            await local.close()
            proc.terminate()
            proc.wait(timeout=30)
    out = {}
    for name, rows in rates.items():
        rate, tokens, wall = sorted(rows)[len(rows) // 2]
        out[name] = {"tokens_per_s": round(rate, 1), "tokens": tokens, "wall_s": round(wall, 3)}
    if not args.json:
        ip, hp = out["in_process"]["tokens_per_s"], out["http"]["tokens_per_s"]
        print(f"model: {what}; {args.requests} requests, concurrency {args.concurrency}, "
              f"max_new_tokens {args.max_new_tokens}, {args.threads} torch thread(s) per side")  # fmt: skip
        print(f"median: in-process {ip:.0f} tok/s | http {hp:.0f} tok/s | HTTP overhead {100 * (1 - hp / ip):.1f}%")
        pairs = sorted(1 - h[0] / i[0] for i, h in zip(rates["in_process"], rates["http"], strict=True))
        print(f"per-round overhead (same round, back to back): median {100 * pairs[len(pairs) // 2]:.1f}%, "
              f"range {100 * pairs[0]:.1f}% .. {100 * pairs[-1]:.1f}%")  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: built-in)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each side")
    parser.add_argument("--batch-window-ms", type=float, default=5.0, help="batching window of both sides")
    parser.add_argument("--json", action="store_true", help='print {"in_process": {...}, "http": {...}}')
    args = parser.parse_args()
    out = asyncio.run(bench(args))
    if args.json:
        print(json.dumps({k: {"tokens_per_s": v["tokens_per_s"]} for k, v in out.items()}))


if __name__ == "__main__":
    main()
