"""Real mode of ``bench_pipeline.py`` (``--real``): the strategies on ``swe-lite`` with the tiny policy.

The same strategies as the simulation (``STRATEGIES`` there), with the
``swe-lite`` env (real workspaces, the real sandbox, hidden pytest for the
reward), :class:`tirl.rollout.agent_loop.AgentLoop` and
:class:`tirl.inference.hf.HFGenerator` on this machine. ``gather_all`` is one
batch holding the whole request (one ``asyncio.gather`` with the per-stage
caps); with ``run_workers=16`` the pipeline holds at most 4 + 16 + 16 + 16 + 4
= 56 envs, more than the 32 episodes of the default request, so the
equal-budget baselines are ``gather_all`` here.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from tirl.config import RolloutConfig
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy

REAL_ENTRIES = {"sync_batch": "sync_batch", "async_batch": "async_batch", "gather_all": "async_batch",
                "pipeline": "pipeline"}  # fmt: skip


def _real_parts(args: argparse.Namespace) -> tuple[Any, Any, Any, Any, str]:
    """(env factory, runner, generator, sandbox, model description) from the other modules of tirl."""
    from tirl.config import EnvConfig, SandboxConfig
    from tirl.envs.registry import env_factory
    from tirl.inference.base import SamplingParams
    from tirl.inference.hf import HFGenerator
    from tirl.rollout.agent_loop import AgentLoop
    from tirl.sandbox import create_sandbox

    try:
        from tirl.models.loading import load_policy

        policy = load_policy(args.model or None, device=args.device)
        model, tokenizer, chat, what = policy.model, policy.tokenizer, policy.chat, str(policy.path)
    except Exception as exc:  # the built-in checkpoint is not built yet: same architecture, random weights
        if args.model:
            raise
        from tirl.models.chat_format import chat_format_for
        from tirl.models.tiny import build_tiny_model

        model, tokenizer = build_tiny_model(seed=0)
        model.to(args.device).eval()
        chat = chat_format_for(tokenizer)
        what = f"untrained tiny model (built-in checkpoint unavailable: {exc})"
    sandbox = create_sandbox(SandboxConfig(), warn=False)
    env_cfg = EnvConfig(name="swe-lite", max_turns=args.real_max_turns)
    factory = env_factory("swe-lite", config=env_cfg, sandbox=sandbox)
    ctx = int(getattr(model.config, "max_position_embeddings", 1024))
    generator = HFGenerator(
        model, tokenizer, eos_ids=chat.eos_ids, max_batch=64, seed=0, batch_window_s=args.real_batch_window
    )
    runner = AgentLoop(
        generator,
        chat,
        params=SamplingParams(max_new_tokens=args.real_max_new, temperature=1.0),
        max_turns=args.real_max_turns,
        max_total_tokens=ctx,
    )
    return factory, runner, generator, sandbox, what


async def _run_real(args: argparse.Namespace) -> dict[str, Any]:
    from tirl.config import EnvConfig
    from tirl.envs.registry import load_tasks

    factory, runner, generator, sandbox, what = _real_parts(args)
    tasks = load_tasks(EnvConfig(name="swe-lite"), args.real_tasks, seed=args.seed)
    pools = {
        "init_workers": 4,
        "run_workers": args.real_run_workers,
        "eval_workers": 4,
        "run_queue_size": args.real_run_workers,
        # >= run_workers: finished episodes never wait for evaluation room, so a generator that
        # batches only requests arriving together is not left with a straggler batch
        "eval_queue_size": args.real_run_workers,
    }
    out: dict[str, Any] = {
        "model": what,
        "tasks": len(tasks),
        "group_size": args.real_group,
        "pools": pools,
        "batch_window_s": args.real_batch_window,
    }
    try:
        # warm-up (untimed): materialises the task templates into the cache and warms the model
        warm = make_strategy(RolloutConfig(strategy="pipeline", **pools), factory, runner)
        await warm.collect(RolloutRequest(tasks=tasks, group_size=1))
        await warm.close()
        n = len(tasks) * args.real_group
        for name, strategy in REAL_ENTRIES.items():
            size = n if name == "gather_all" else args.batch_size
            cfg = RolloutConfig(strategy=strategy, batch_size=size, **pools)  # type: ignore[arg-type]
            trace = Path(args.trace_dir) / f"real.{name}.jsonl" if args.trace_dir else None
            strat = make_strategy(cfg, factory, runner, trace_path=trace, generator_busy=generator)
            batch = await strat.collect(RolloutRequest(tasks=tasks, group_size=args.real_group, step=1))
            await strat.close()
            trajs = batch.trajectories
            terms: dict[str, int] = {}
            for t in trajs:
                key = t.termination.value if t.termination else "none"
                terms[key] = terms.get(key, 0) + 1
            out[name] = {
                "traj_per_s": len(trajs) / batch.wall_s,
                "wall_s": batch.wall_s,
                "gpu_util": batch.stats.get("rollout/gpu_util"),
                # wall time in which the generator had no request: robust to how fast generation is
                "generator_idle_s": batch.wall_s * (1.0 - batch.stats.get("rollout/gpu_util", 0.0)),
                "turns_mean": sum(len(t.turns) for t in trajs) / max(1, len(trajs)),
                "terminations": terms,
                "max_live_envs": batch.stats["rollout/max_live_envs"],
            }
    finally:
        await generator.close()
        await sandbox.close()
    return out


def run_real(args: argparse.Namespace) -> dict[str, Any]:
    """The three strategies on swe-lite with the tiny policy; prints a table unless ``--json``."""
    try:
        out = asyncio.run(_run_real(args))
    except ImportError as exc:
        sys.exit(f"--real needs the swe-lite env and the agent loop from tirl ({exc}); they are not available")
    if not args.json:
        print(f"\nswe-lite, real  (model: {out['model']}; {out['tasks']} tasks x {out['group_size']})")
        for name in REAL_ENTRIES:
            r = out[name]
            print(
                f"  {name:<12} {r['traj_per_s']:7.3f} traj/s  wall {r['wall_s']:6.2f}s  "
                f"gpu_util {r['gpu_util'] or 0:.2f}  generator idle {r['generator_idle_s']:5.1f}s  "
                f"turns {r['turns_mean']:.1f}  {r['terminations']}"
            )
        p = out["pipeline"]["traj_per_s"]
        print(
            f"  pipeline/async_batch {p / out['async_batch']['traj_per_s']:.2f}x  "
            f"pipeline/sync_batch {p / out['sync_batch']['traj_per_s']:.2f}x  "
            f"pipeline/gather_all {p / out['gather_all']['traj_per_s']:.2f}x"
        )
    return out
