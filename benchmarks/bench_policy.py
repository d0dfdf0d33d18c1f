"""Policy-side CPU figures: HFGenerator tokens/s at batch 64 and one eval pass over 200 tir-math tasks.

    .venv/bin/python benchmarks/bench_policy.py [--model PATH] [--threads 2]

Prints one line per measurement. The throughput run disables EOS so every row
samples exactly ``--new-tokens`` tokens (decode speed, prefill included); the
eval pass is the real thing: AgentLoop + tir-math env + sandbox, temperature 1.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import torch

from tirl.config import SandboxConfig
from tirl.envs.registry import env_factory
from tirl.envs.tasks.math_gen import generate_tasks
from tirl.inference.base import SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.models.loading import load_policy
from tirl.rollout.agent_loop import AgentLoop
from tirl.rollout.evaluation import evaluate_accuracy
from tirl.sandbox import create_sandbox
from tirl.types import Message, Role


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--window", type=float, default=0.005)
    ap.add_argument("--temperature", type=float, default=1.0)
    args = ap.parse_args()
    policy = load_policy(args.model, threads=args.threads)
    tasks = generate_tasks(args.tasks, difficulty=1, seed=0)
    prompts = [
        policy.chat.prompt_ids(
            [
                Message(
                    role=Role.SYSTEM, content="Use python to compute. Print the result. Then answer as \\boxed{...}."
                ),
                Message(role=Role.USER, content=t.prompt),
            ]
        )
        for t in tasks[: args.batch]
    ]
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=[-1], max_batch=args.batch, seed=0)
    params = SamplingParams(max_new_tokens=args.new_tokens)
    await gen.generate(prompts[0], SamplingParams(max_new_tokens=4))  # warm-up
    t0 = time.perf_counter()
    results = await asyncio.gather(*(gen.generate(p, params) for p in prompts))
    dt = time.perf_counter() - t0
    n = sum(len(r.token_ids) for r in results)
    print(
        f"throughput: batch {len(prompts)}, {n} tokens in {dt:.2f}s = {n / dt:.0f} tokens/s "
        f"(prompt ~{sum(map(len, prompts)) // len(prompts)} tokens, threads {torch.get_num_threads()})"
    )
    await gen.close()

    sandbox = create_sandbox(SandboxConfig())
    factory = env_factory("tir-math", sandbox=sandbox, max_turns=4)
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, seed=0, batch_window_s=args.window)
    runner = AgentLoop(
        gen,
        policy.chat,
        params=SamplingParams(max_new_tokens=96, temperature=args.temperature),
        max_turns=4,
        max_total_tokens=512,
    )
    report = await evaluate_accuracy(runner, factory, tasks, concurrency=64)
    print(
        f"eval pass: {report.n} tasks in {report.wall_s:.1f}s, accuracy {report.accuracy:.3f}, "
        f"ends {report.terminations}, mean turns {report.mean_turns:.2f}, mean tokens {report.mean_tokens:.0f}, "
        f"generator busy {gen.busy_s:.1f}s in {gen.batches} batches"
    )
    await gen.close()
    await sandbox.close()


if __name__ == "__main__":
    asyncio.run(main())
