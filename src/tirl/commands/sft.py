"""``tirl sft``: warm-start the built-in tiny model on tir-math demonstrations.

The shipped checkpoint is rebuilt with::

    tirl sft --out src/tirl/assets/tiny-tir --seed 0

and the chain-task checkpoint (``tiny-chain``, started from ``tiny-tir``) with
``tirl sft --env tir-chain --init src/tirl/assets/tiny-tir --out src/tirl/assets/tiny-chain --seed 0 --threads 1``.

``--env swe-lite`` demonstrates the swe-lite curriculum (training split; the stop-early accuracy is measured
on its validation split) with :func:`~tirl.envs.tasks.swe_experts.curriculum_expert_solution`, through the
real swe-lite env and judge. ``--demos-out FILE`` also writes the demonstrations (trajectory JSONL with token
ids and loss masks) before training.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from tirl.config import SandboxConfig
from tirl.envs.base import Task
from tirl.envs.registry import env_factory
from tirl.envs.tasks.chain_gen import chain_expert_solution, generate_chain_tasks
from tirl.envs.tasks.math_gen import expert_solution, generate_tasks
from tirl.envs.tasks.swe_curriculum import generate_curriculum
from tirl.envs.tasks.swe_experts import curriculum_expert_solution
from tirl.errors import ConfigError
from tirl.fileio import atomic_write, check_output, check_output_dir, refuse_overwrite
from tirl.inference.base import SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.models.chat_format import chat_format_for
from tirl.models.loading import load_policy
from tirl.models.tiny import TinyModelSpec, build_tiny_model, count_parameters, save_policy
from tirl.rollout.agent_loop import AgentLoop
from tirl.rollout.evaluation import evaluate_accuracy
from tirl.sandbox import create_sandbox
from tirl.sft import (
    SFTConfig,
    SFTResult,
    build_demonstrations,
    copy_curriculum,
    sft_eval_seed,
    sft_task_seed,
    train_sft,
    write_card,
)

_SFT_OPTIONS = (
    ("steps", "maximum optimizer steps"),
    ("batch_size", "episodes per step"),
    ("lr", "peak learning rate (AdamW, cosine decay)"),
    ("train_tasks", "generated tasks to demonstrate"),
    ("difficulty", "tir-math difficulty (1-5)"),
    ("eval_every", "steps between held-out evaluations"),
    ("eval_tasks", "held-out tasks per evaluation"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tirl sft``."""
    d = SFTConfig()
    parser.add_argument("--out", required=True, help="directory to write the checkpoint to (save_pretrained layout)")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of the model init, data and sampling")
    parser.add_argument(
        "--env",
        choices=("tir-math", "tir-chain", "swe-lite"),
        default=d.env,
        help="task family to demonstrate (tir-chain: 3-6 tool turns; use --init with the tir-math model; "
        "swe-lite: the bug-fixing curriculum, 5-8 shell turns)",
    )
    parser.add_argument(
        "--demos-out",
        default=None,
        help="also write the demonstrations to this trajectory JSONL (token ids and loss masks included)",
    )
    parser.add_argument("--init", default=None, help="start from this model directory instead of a fresh tiny model")
    for name, text in _SFT_OPTIONS:  # options named after SFTConfig fields, with their defaults and types
        default = getattr(d, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default, help=text)
    parser.add_argument(
        "--stop-at-accuracy",
        type=float,
        default=d.stop_at_accuracy,
        help="stop once held-out accuracy (temperature 1) reaches this; negative = never stop early",
    )
    spec = TinyModelSpec()
    parser.add_argument("--layers", type=int, default=spec.layers, help="layers of a fresh tiny model")
    parser.add_argument("--hidden", type=int, default=spec.hidden_size, help="width of a fresh tiny model")
    parser.add_argument("--heads", type=int, default=spec.heads, help="attention heads of a fresh tiny model")
    parser.add_argument(
        "--copy-steps",
        type=int,
        default=d.copy_steps,
        help="steps of the synthetic copy curriculum before the demonstrations (0 = none)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--sandbox", choices=("auto", "bwrap", "process"), default="auto", help="sandbox backend")


def _config(args: argparse.Namespace) -> SFTConfig:
    if args.steps < 1 or args.batch_size < 1 or args.train_tasks < 1 or args.eval_tasks < 1 or args.eval_every < 1:
        raise ConfigError("--steps, --batch-size, --train-tasks, --eval-tasks and --eval-every must be >= 1")
    if not 1 <= args.difficulty <= 5:
        raise ConfigError(f"--difficulty {args.difficulty} is invalid: use a level from 1 to 5")
    stop = args.stop_at_accuracy if args.stop_at_accuracy is not None and args.stop_at_accuracy >= 0 else None
    same = ("steps", "batch_size", "lr", "train_tasks", "difficulty", "seed", "eval_every", "eval_tasks", "env")
    if args.env == "swe-lite":  # 5-8 shell turns with tool output: longer episodes and turns
        return SFTConfig(
            **{name: getattr(args, name) for name in same},
            stop_at_accuracy=stop,
            copy_steps=max(0, args.copy_steps),
            max_turns=10,
            max_new_tokens=384,
            max_total_tokens=6144,
        )
    return SFTConfig(
        **{name: getattr(args, name) for name in same},
        stop_at_accuracy=stop,
        copy_steps=max(0, args.copy_steps),
        max_turns=6 if args.env == "tir-chain" else SFTConfig.max_turns,
    )


def _tasks(cfg: SFTConfig, n: int, seed: int, *, held_out: bool = False) -> list[Task]:
    """``n`` generated tasks of the configured family (swe-lite: training split, or validation when held out)."""
    if cfg.env == "swe-lite":
        return generate_curriculum(n, seed=seed, split="validation" if held_out else "train")
    if cfg.env == "tir-chain":
        return generate_chain_tasks(n, seed=seed)
    return generate_tasks(n, difficulty=cfg.difficulty, seed=seed)


def _model(args: argparse.Namespace, cfg: SFTConfig) -> tuple[Any, Any]:
    """``--init``'s model and tokenizer, or a fresh tiny model of the given shape."""
    if args.init:
        policy = load_policy(args.init)
        return policy.model, policy.tokenizer
    spec = TinyModelSpec(
        hidden_size=args.hidden,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.heads,
        intermediate_size=3 * args.hidden,
    )
    return build_tiny_model(spec, seed=cfg.seed)


def _demonstrations(loop: asyncio.AbstractEventLoop, cfg: SFTConfig, chat: Any, factory: Any) -> list[Any]:
    """The expert's episodes on the training tasks, through the real env (only the correct ones)."""
    tasks = _tasks(cfg, cfg.train_tasks, sft_task_seed(cfg.seed))
    solutions = {"tir-chain": chain_expert_solution, "swe-lite": curriculum_expert_solution}
    solution = solutions.get(cfg.env, expert_solution)
    demos = loop.run_until_complete(
        build_demonstrations(
            tasks, solution, chat, factory, max_turns=cfg.max_turns, max_total_tokens=cfg.max_total_tokens
        )
    )
    lengths = sorted(len(t.token_ids) for t in demos)
    print(
        f"demonstrations: {len(demos)} of {len(tasks)} tasks, tokens median {lengths[len(lengths) // 2]} "
        f"max {lengths[-1]}",
        flush=True,
    )
    return demos


def write_demonstrations(demos: list[Any], path: str | Path) -> None:
    """Write ``demos`` as trajectory JSONL (with token ids and loss masks), atomically."""
    with atomic_write(path) as f:
        for traj in demos:
            f.write(traj.to_json(tokens=True) + "\n")
    print(f"wrote {len(demos)} demonstrations to {path}", flush=True)


def _runner(generator: HFGenerator, chat: Any, cfg: SFTConfig, temperature: float, seed: int | None) -> AgentLoop:
    return AgentLoop(
        generator,
        chat,
        params=SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=temperature),
        max_turns=cfg.max_turns,
        max_total_tokens=cfg.max_total_tokens,
        seed=seed,
    )


def _copy_warmup(model: Any, tokenizer: Any, chat: Any, cfg: SFTConfig) -> None:
    """The synthetic copy curriculum before the demonstrations (``--copy-steps``)."""
    if not cfg.copy_steps:
        return
    copy_cfg = replace(
        cfg, steps=cfg.copy_steps, batch_size=cfg.copy_batch_size, decay_steps=cfg.copy_steps, stop_at_accuracy=None
    )
    copies = copy_curriculum(cfg.copy_steps * cfg.copy_batch_size, chat, seed=cfg.seed)
    print(f"copy curriculum: {cfg.copy_steps} steps of {cfg.copy_batch_size}", flush=True)
    train_sft(model, copies, copy_cfg, pad_id=int(tokenizer.pad_token_id or 0))


def run(args: argparse.Namespace) -> int:
    """Build demonstrations, train, evaluate, save."""
    cfg = _config(args)
    check_output_dir(args.out)  # a bad --out fails now, not after training
    if args.demos_out:
        check_output(args.demos_out)
    refuse_overwrite(args.out, [args.init], option="--out")  # the starting checkpoint is an input
    torch.set_num_threads(max(1, args.threads))
    model, tokenizer = _model(args, cfg)
    chat = chat_format_for(tokenizer)
    print(f"model: {count_parameters(model):,} parameters", flush=True)
    loop = asyncio.new_event_loop()
    try:
        sandbox = create_sandbox(SandboxConfig(backend=args.sandbox))
        env_name = "swe-lite" if cfg.env == "swe-lite" else "tir-math"
        factory = env_factory(env_name, sandbox=sandbox, max_turns=cfg.max_turns)
        demos = _demonstrations(loop, cfg, chat, factory)
        if args.demos_out:
            write_demonstrations(demos, args.demos_out)
        held_out = _tasks(cfg, cfg.eval_tasks, sft_eval_seed(cfg.seed), held_out=True)
        generator = HFGenerator(model, tokenizer, eos_ids=chat.eos_ids, seed=cfg.seed)
        # per-turn sampling seeds: the held-out accuracy, hence the stop step, is reproducible
        runner = _runner(generator, chat, cfg, 1.0, cfg.seed)

        def evaluate() -> float:
            report = loop.run_until_complete(evaluate_accuracy(runner, factory, held_out, seed=cfg.seed))
            print(
                f"  eval: {report.correct}/{report.n} correct, ends {report.terminations}, {report.wall_s:.1f}s",
                flush=True,
            )
            return report.accuracy

        cfg.log = lambda line: print(line, flush=True)
        out = Path(args.out)
        command = "tirl sft " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else "tirl sft"

        def checkpoint(partial: SFTResult) -> None:  # a usable checkpoint after every evaluation
            save_policy(model, tokenizer, out)
            write_card(out, cfg, partial, command)

        _copy_warmup(model, tokenizer, chat, cfg)
        result = train_sft(
            model, demos, cfg, pad_id=int(tokenizer.pad_token_id or 0), evaluate=evaluate, on_eval=checkpoint
        )
        greedy = _runner(generator, chat, cfg, 0.0, None)
        greedy_report = loop.run_until_complete(evaluate_accuracy(greedy, factory, held_out, seed=cfg.seed))
        result.greedy_accuracy = greedy_report.accuracy
        print(f"held-out greedy accuracy {greedy_report.accuracy:.3f} ends {greedy_report.terminations}", flush=True)
        loop.run_until_complete(generator.close())
        loop.run_until_complete(sandbox.close())
    finally:
        loop.close()
    save_policy(model, tokenizer, out)
    write_card(out, cfg, result, command)
    print(f"saved {out} after {result.steps} steps ({result.wall_s:.0f}s); evals {result.evals}", flush=True)
    return 0
