"""Real mode of ``bench_pipeline.py`` (``--real``): the strategies on the SWE job's env and tasks.

The same strategies as the simulation (``STRATEGIES`` there), with the
``swe-lite`` env as ``tirl train --env swe-lite`` configures it (the env
preset: the bug-fixing curriculum ``env.difficulty=2``, 10 turns, 384 new
tokens per turn, a 6,144-token episode cap clipped to the model's positions;
real workspaces, the real sandbox, hidden pytest judged by the scorer),
:class:`tirl.rollout.agent_loop.AgentLoop` and
:class:`tirl.inference.hf.HFGenerator` on this machine, with the policy
``--model`` names (default: the env's built-in model).

Entries: ``sync_batch`` (batches of ``B`` = run_workers, a barrier each),
``async_batch_equal`` (batches of the pipeline's live-env budget: init +
run queue + run workers + eval queue + eval workers, 56 at the defaults),
``gather_all`` (one batch holding the whole request: one ``asyncio.gather``
with the per-stage caps, no bound on live envs) and ``pipeline``. Each reports
trajectories/s, the generator's busy fraction (``gpu_util``: the share of the
wall time with a request in the generator), the most environments alive at
once, and ``rss_peak_mb``: this process's peak RSS during the entry above its
RSS at the entry's start (``/proc/self/clear_refs`` resets the peak; Linux
only, else None).

The env's built-in model is ``tiny-swe`` (the swe-lite warm start: 28 of 200
held-out bugs fixed greedily), sampled at the SWE job's temperature
(``generation.temperature`` of the swe-lite preset, 0.7) as ``tirl train --env
swe-lite`` samples; its episodes run most of the 10 turns.

Not covered: the sandbox's and pytest's own processes (their memory is not in
this process's RSS; the live-env count is the proxy), and a policy that
solves most tasks (at 0.7 ``tiny-swe`` fixes 3-8% of its sampled episodes).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from peak_rss import PeakRss
from tirl.config import RolloutConfig
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy

REAL_ENTRIES = {"sync_batch": "sync_batch", "async_batch_equal": "async_batch", "gather_all": "async_batch",
                "pipeline": "pipeline"}  # fmt: skip
INIT_WORKERS = EVAL_WORKERS = 4


def swe_job_config(args: argparse.Namespace) -> Any:
    """The resolved config of ``tirl train --env swe-lite`` (its env preset) with the ``--real-*`` overrides."""
    from tirl.config import resolve_config

    sets = ["env.name=swe-lite"]
    if args.real_max_turns:
        sets.append(f"env.max_turns={args.real_max_turns}")
    if args.real_max_new:
        sets.append(f"generation.max_new_tokens={args.real_max_new}")
    return resolve_config(None, sets).config


def live_budget(run_workers: int) -> int:
    """The most envs the pipeline holds: init workers + run queue + run workers + eval queue + eval workers."""
    return INIT_WORKERS + 3 * run_workers + EVAL_WORKERS


def _real_parts(args: argparse.Namespace) -> tuple[Any, Any, Any, Any, str]:
    """(env factory, runner, generator, sandbox, model description) from the other modules of tirl."""
    from tirl.config import SandboxConfig
    from tirl.envs.registry import env_factory
    from tirl.inference.base import SamplingParams
    from tirl.inference.hf import HFGenerator
    from tirl.models.loading import load_policy
    from tirl.rollout.agent_loop import AgentLoop
    from tirl.sandbox import create_sandbox

    # no fallback: a missing shipped checkpoint is a broken install, and a random model's figures would be
    # printed as the SWE job's
    policy = load_policy(args.model or None, device=args.device, env="swe-lite")
    model, tokenizer, chat, what = policy.model, policy.tokenizer, policy.chat, str(policy.path)
    sandbox = create_sandbox(SandboxConfig(), warn=False)
    cfg = swe_job_config(args)
    factory = env_factory("swe-lite", config=cfg.env, sandbox=sandbox)
    ctx = min(cfg.generation.max_total_tokens, int(getattr(model.config, "max_position_embeddings", 1024)))
    generator = HFGenerator(
        model, tokenizer, eos_ids=chat.eos_ids, max_batch=64, seed=0, batch_window_s=args.real_batch_window
    )
    runner = AgentLoop(
        generator,
        chat,
        params=SamplingParams(max_new_tokens=cfg.generation.max_new_tokens, temperature=cfg.generation.temperature),
        max_turns=cfg.env.max_turns,
        max_total_tokens=ctx,
    )
    return factory, runner, generator, sandbox, what


async def _run_real(args: argparse.Namespace) -> dict[str, Any]:
    from tirl.envs.registry import load_tasks

    factory, runner, generator, sandbox, what = _real_parts(args)
    cfg = swe_job_config(args)
    tasks = load_tasks(cfg.env, args.real_tasks, seed=args.seed)
    pools = {
        "init_workers": INIT_WORKERS,
        "run_workers": args.real_run_workers,
        "eval_workers": EVAL_WORKERS,
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
        "env": {"difficulty": cfg.env.difficulty, "max_turns": cfg.env.max_turns,
                "max_new_tokens": cfg.generation.max_new_tokens, "max_total_tokens": runner.max_total_tokens},
        "live_budget": live_budget(args.real_run_workers),
    }  # fmt: skip
    try:
        # warm-up (untimed): materialises the task templates into the cache and warms the model
        warm = make_strategy(RolloutConfig(strategy="pipeline", **pools), factory, runner)
        await warm.collect(RolloutRequest(tasks=tasks, group_size=1))
        await warm.close()
        n = len(tasks) * args.real_group
        sizes = {"sync_batch": args.batch_size or args.real_run_workers, "gather_all": n,
                 "async_batch_equal": live_budget(args.real_run_workers), "pipeline": args.batch_size}  # fmt: skip
        for name, strategy in REAL_ENTRIES.items():
            size = sizes[name]
            memory = PeakRss()
            memory.start()
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
                "gpu_util": batch.stats.gpu_util,
                # wall time in which the generator had no request: robust to how fast generation is
                "generator_idle_s": batch.wall_s * (1.0 - (batch.stats.gpu_util or 0.0)),
                "turns_mean": sum(len(t.turns) for t in trajs) / max(1, len(trajs)),
                "terminations": terms,
                "max_live_envs": float(batch.stats.max_live_envs),
                "batch_size": size,
                "rss_peak_mb": memory.above_mb(),
            }
    finally:
        await generator.close()
        await sandbox.close()
    return out


def print_table(out: dict[str, Any]) -> None:
    """The human-readable table of :func:`run_real`'s result: one line per entry, then pipeline ÷ each other."""
    print(f"\nswe-lite, real  (model: {out['model']}; {out['tasks']} tasks x {out['group_size']}; {out['env']})")
    for name in REAL_ENTRIES:
        r = out[name]
        print(
            f"  {name:<17} {r['traj_per_s']:7.3f} traj/s  wall {r['wall_s']:6.2f}s  "
            f"gpu_util {r['gpu_util'] or 0:.2f}  generator idle {r['generator_idle_s']:5.1f}s  "
            f"turns {r['turns_mean']:.1f}  live envs {r['max_live_envs']}  "
            f"RSS +{r['rss_peak_mb'] or 0:.0f} MB  {r['terminations']}"
        )
    p = out["pipeline"]["traj_per_s"]
    print("  " + "  ".join(f"pipeline/{n} {p / out[n]['traj_per_s']:.2f}x" for n in REAL_ENTRIES if n != "pipeline"))


def run_real(args: argparse.Namespace) -> dict[str, Any]:
    """The three strategies on swe-lite with the tiny policy; prints a table unless ``--json``."""
    try:
        out = asyncio.run(_run_real(args))
    except ImportError as exc:
        sys.exit(f"--real needs the swe-lite env and the agent loop from tirl ({exc}); they are not available")
    if not args.json:
        print_table(out)
    return out
