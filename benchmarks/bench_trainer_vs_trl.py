"""tirl's trainer vs TRL's GRPOTrainer: the same model, task, prompts, group size, token budget and steps.

Each framework runs in its own subprocess (so peak RSS is measured separately)
and trains the same tiny causal LM (the built-in warm-started model when it is
installed, else a freshly initialised one of the same shape) on the same
single-turn task: tir-math prompts rendered with the built-in chat format, one
completion of at most ``--max-new`` tokens, reward 1 when the boxed answer is
right, else a small dense shaping term (see ``_reward``). Both use
``--prompts`` prompts per generation batch (in the same order), ``--group``
completions per prompt, 2 optimiser steps per batch (TRL:
``steps_per_generation=2``; tirl: ``algo.minibatches=2``), clip 0.2/0.28,
token-level loss aggregation (TRL ``loss_type="dapo"``), no KL, temperature 1,
AdamW at the same learning rate, float32 on the CPU with the same thread count
and ``OMP_WAIT_POLICY=PASSIVE``. TRL keeps its other defaults (notably
``gradient_checkpointing=True``, which lowers its memory and costs compute).
tirl runs with ``filter.mode=off`` so that it updates on exactly as many
trajectories as TRL.

Measured: tokens per second of whole steps (generation + scoring + update;
prompt + completion tokens of every sampled sequence, divided by the wall time
of the training loop, without start-up) and the peak resident set size of the
process (``ru_maxrss``).

    .venv/bin/pip install trl        # the `bench` extra; check that it does not upgrade torch
    .venv/bin/python benchmarks/bench_trainer_vs_trl.py [--steps 4] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SYSTEM = None  # no system prompt: the shortest shared prompt format


def _reward(text: str, answer: str) -> float:
    """1 for the right boxed answer, else a dense shaping term (share of digits, times 0.5).

    The shaping term gives every group reward variance even for an untrained
    model, so both trainers do real updates on every batch.
    """
    from tirl.parsing import extract_final_answer

    got = extract_final_answer(text)
    if got is not None and got.strip() == answer:
        return 1.0
    return 0.5 * sum(c.isdigit() for c in text) / max(len(text), 1)


def _model_dir(tmp: Path, seed: int) -> Path:
    from tirl.models.loading import builtin_model_path
    from tirl.models.tiny import build_tiny_model, save_policy

    p = builtin_model_path()
    if (p / "config.json").is_file():
        return p
    model, tok = build_tiny_model(seed=seed)
    return save_policy(model, tok, tmp / "tiny-random")


def _tasks(args: argparse.Namespace) -> list[Any]:
    from tirl.envs.tasks.math_gen import generate_tasks

    return generate_tasks(args.prompts * args.steps, difficulty=1, seed=args.seed)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---------------------------------------------------------------------------------------------- tirl
class OneTurnEnv:
    """The single-turn task: one assistant message, then the reward."""

    name = "bench-one-turn"

    def __init__(self) -> None:
        self._answer = ""
        self._reward = 0.0

    async def reset(self, task: Any, *, seed: int | None = None) -> list[Any]:
        """The user message."""
        from tirl.types import Message, Role

        self._answer = task.answer
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Any) -> Any:
        """Score the one assistant message; the episode ends."""
        from tirl.envs.base import StepResult
        from tirl.types import TerminationReason

        self._reward = _reward(action.content or "", self._answer)
        return StepResult(observation=[], reward=self._reward, terminated=True, reason=TerminationReason.ANSWERED)

    async def evaluate(self) -> Any:
        """The reward of the step."""
        from tirl.envs.base import EvalResult

        return EvalResult(reward=self._reward, correct=self._reward >= 1.0)

    async def close(self) -> None:
        """Nothing to release."""


async def _tirl(args: argparse.Namespace, model_dir: Path, run_dir: Path) -> dict[str, Any]:
    from tirl.config import load_config
    from tirl.inference.base import SamplingParams
    from tirl.inference.hf import HFGenerator
    from tirl.models.loading import load_policy
    from tirl.rollout.agent_loop import AgentLoop
    from tirl.rollout.strategies import make_strategy
    from tirl.trainer.trainer import Trainer

    cfg = load_config(
        None,
        [
            f"algo.group_size={args.group}",
            "algo.minibatches=2",
            f"algo.lr={args.lr}",
            "algo.kl_coef=0",
            "filter.mode=off",
            f"trainer.prompts_per_step={args.prompts}",
            f"trainer.steps={args.steps}",
            f"generation.max_new_tokens={args.max_new}",
            f"trainer.threads={args.threads}",
            f"rollout.run_workers={args.prompts * args.group}",
        ],
    )
    policy = load_policy(model_dir, threads=args.threads)
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, seed=args.seed)
    runner = AgentLoop(
        generator=gen,
        chat=policy.chat,
        params=SamplingParams(max_new_tokens=args.max_new, temperature=1.0, top_p=1.0),
        max_turns=1,
        max_total_tokens=cfg.generation.max_total_tokens,
    )
    strategy = make_strategy(cfg.rollout, lambda task: OneTurnEnv(), runner)
    tasks = _tasks(args)
    trainer = Trainer(
        cfg=cfg,
        model=policy.model,
        tokenizer=policy.tokenizer,
        strategy=strategy,
        tasks=lambda step, n: tasks[(step - 1) * n : step * n],
        run_dir=run_dir,
        progress=False,
    )
    tokens = 0
    rewards: list[float] = []
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        metrics, sampled = await trainer.train_step(step)
        tokens += sum(len(t.token_ids) for t in sampled)
        rewards.append(float(metrics["reward/mean"] or 0.0))
        if metrics.get("train/optimizer_steps") != 2:
            raise RuntimeError(f"tirl step {step} made {metrics.get('train/optimizer_steps')} optimiser steps, not 2")
    wall = time.perf_counter() - t0
    await strategy.close()
    await gen.close()
    return {
        "tokens": tokens,
        "wall_s": wall,
        "optimizer_steps": 2 * args.steps,
        "reward_mean": sum(rewards) / len(rewards),
    }


# ----------------------------------------------------------------------------------------------- TRL
def _trl(args: argparse.Namespace, model_dir: Path, out_dir: Path) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tirl.models.chat_format import chat_format_for
    from tirl.types import Message, Role

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    chat = chat_format_for(tok)
    tasks = _tasks(args)
    # the exact prompt ids tirl feeds its generator, as text (special tokens are single tokens)
    prompts = [tok.decode(chat.prompt_ids([Message(role=Role.USER, content=t.prompt)])) for t in tasks]
    data = Dataset.from_dict({"prompt": prompts, "answer": [t.answer for t in tasks]})
    counted = {"tokens": 0, "rewards": []}

    def reward(
        prompts: list[str], completions: list[str], completion_ids: list[list[int]], answer: list[str], **_: Any
    ):
        out = [_reward(c, a) for c, a in zip(completions, answer, strict=True)]
        counted["tokens"] += sum(len(tok.encode(p, add_special_tokens=False)) + len(ids)
                                 for p, ids in zip(prompts, completion_ids, strict=True))  # fmt: skip
        counted["rewards"].extend(out)
        return out

    clock: dict[str, float] = {}

    class Clock(TrainerCallback):
        def on_train_begin(self, *a: Any, **k: Any) -> None:
            clock["t0"] = time.perf_counter()

        def on_train_end(self, *a: Any, **k: Any) -> None:
            clock["t1"] = time.perf_counter()

    end_id = chat.eos_ids and min(chat.eos_ids)
    config = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=args.prompts * args.group // 2,
        gradient_accumulation_steps=1,
        steps_per_generation=2,
        num_generations=args.group,
        max_completion_length=args.max_new,
        num_iterations=1,
        max_steps=2 * args.steps,
        learning_rate=args.lr,
        weight_decay=0.0,
        max_grad_norm=1.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        temperature=1.0,
        top_p=1.0,
        shuffle_dataset=False,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=args.seed,
        dataloader_num_workers=0,
        generation_kwargs={"eos_token_id": end_id, "pad_token_id": tok.pad_token_id},
    )
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=data, processing_class=tok, callbacks=[Clock()]
    )
    trainer.train()
    rewards = counted["rewards"]
    return {
        "tokens": counted["tokens"],
        "wall_s": clock["t1"] - clock["t0"],
        "optimizer_steps": trainer.state.global_step,
        "reward_mean": sum(rewards) / max(len(rewards), 1),
    }


# ------------------------------------------------------------------------------------------- driver
def _child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model_dir)
        if args.child == "tirl":
            res = asyncio.run(_tirl(args, model_dir, Path(tmp) / "run"))
        else:
            res = _trl(args, model_dir, Path(tmp) / "trl")
    res["tokens_per_s"] = res["tokens"] / res["wall_s"]
    res["peak_rss_mb"] = _peak_mb()
    print("RESULT " + json.dumps(res), flush=True)


def _spawn(name: str, args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", name, "--model-dir", str(model_dir)]
    for key in ("steps", "prompts", "group", "max_new", "threads", "seed", "lr"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    # the same OpenMP settings for both (passive waiting: see tirl.commands.train)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(args.threads)}
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]
    raise SystemExit(f"{name} run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="generation batches (each = 2 optimiser steps)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per batch")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max-new", type=int, default=64, help="completion token budget")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--only", choices=["tirl", "trl"], help="run one side only")
    parser.add_argument("--json", action="store_true", help='print {"tirl": {...}, "trl": {...}}')
    parser.add_argument("--child", choices=["tirl", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = _model_dir(Path(tmp), args.seed)
        results = {name: _spawn(name, args, model_dir) for name in ("tirl", "trl") if args.only in (None, name)}
    if args.json:
        print(json.dumps(results))
        return
    print(f"model: {model_dir.name}  prompts/batch {args.prompts}  group {args.group}  max-new {args.max_new}  "
          f"batches {args.steps}  threads {args.threads}")  # fmt: skip
    print(f"{'':6} {'tokens/s':>10} {'peak RSS MB':>12} {'wall s':>8} {'tokens':>8} {'opt steps':>9} {'reward':>7}")
    for name, r in results.items():
        print(f"{name:6} {r['tokens_per_s']:10.1f} {r['peak_rss_mb']:12.1f} {r['wall_s']:8.1f} {r['tokens']:8d} "
              f"{r['optimizer_steps']:9d} {r['reward_mean']:7.3f}")  # fmt: skip
    if len(results) == 2:
        t, q = results["tirl"], results["trl"]
        print(f"tirl/TRL throughput {t['tokens_per_s'] / q['tokens_per_s']:.2f}x, "
              f"peak memory {t['peak_rss_mb'] / q['peak_rss_mb']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
