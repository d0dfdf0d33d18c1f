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
AdamW at the same constant learning rate with no warm-up on either side (tirl:
``algo.warmup_steps=0``; TRL: ``lr_scheduler_type="constant"``,
``warmup_steps=0``), float32 on the CPU with the same thread count and
``OMP_WAIT_POLICY=PASSIVE``. tirl runs with ``filter.mode=off`` so that it
updates on exactly as many trajectories as TRL.

Entries: ``tirl`` (its defaults: no gradient checkpointing, micro-batches
of ``algo.micro_batch_tokens`` = 1024 padded tokens in flight, which on the
CPU with a small model its 2 threads share as 2 concurrent 512-token
micro-batches with one intra-op thread each, see ``tirl.trainer.parallel``);
``tirl_matched`` and ``tirl_matched_ckpt``, tirl without and with
``algo.gradient_checkpointing=true`` at exactly the padded tokens TRL's matched
micro-batch holds (:func:`trl_in_flight`, below); ``trl``, TRL
as its users run it (its other defaults, notably ``gradient_checkpointing=True``,
which lowers activation memory and costs a second forward pass, and one
micro-batch of all 32 sequences of an optimiser step); ``trl_matched`` and
``trl_matched_ckpt``, TRL without and with checkpointing at tirl's
micro-batch: ``per_device_train_batch_size`` = m sequences and
``gradient_accumulation_steps`` = 32 / m, where m is the most sequences
(a divisor of 32) whose padded length (the longest prompt + ``--max-new``)
fits in ``algo.micro_batch_tokens`` (:func:`matched_micro_batch`; both sides
then hold at most that many padded tokens in flight, and each sums the same
token-level loss over its micro-batches). TRL's micro-batch is a whole number of
sequences, so it holds fewer padded tokens than tirl's budget (8 x 99 = 792 of
1024 on the default task); the ``tirl_matched`` entries run at TRL's figure, so
that both sides of a like-for-like pair hold the same tokens in flight (before
2026-12-02 the pairs compared tirl at 1024 with TRL at 792); ``trl_no_ckpt`` (not run unless
named with ``--only``), TRL's one 32-sequence micro-batch without
checkpointing. Both sides use ``--threads`` threads.

The ``--json`` object leads with ``like_for_like``: ``no_checkpointing``
(``tirl_matched`` ÷ ``trl_matched``) and ``checkpointing`` (``tirl_matched_ckpt`` ÷
``trl_matched_ckpt``), then ``defaults`` (``tirl`` ÷ ``trl``); each holds
``tokens_per_s_ratio`` (ratio of the medians, with its per-run range),
``train_mem_ratio`` and ``peak_rss_ratio``, tirl ÷ TRL. ``entries`` holds
every entry's medians and ranges, ``machine`` the set-up and the load.

Measured, each side in its own process:

- ``tokens_per_s``: prompt + completion tokens of every sampled sequence,
  divided by the wall time, both counted from the end of the first generation
  batch (its 2 optimiser steps) to the end of training, so start-up, the first
  compilation-like warm-up and the first batch are excluded;
- ``peak_rss_mb``: the process's peak resident set size (``ru_maxrss``),
  imports and model load included (tirl imports less, so this favours it);
- ``train_mem_mb``: the peak RSS during training above the process's own RSS
  just before training starts (model, optimiser and trainer built): the
  kernel's peak counter is reset there (``/proc/self/clear_refs``), so this is
  what training itself adds (activations, gradients, Adam state).

tirl also reports ``rollout_s`` and ``update_s``, the timed wall time's split.
``--tirl-set KEY=VALUE`` (repeatable) adds a tirl config override to both tirl
entries (e.g. ``algo.micro_batch_tokens=2048`` for the previous default); it is
recorded in the JSON's ``machine.tirl_set``.

``--repeats N`` runs every entry N times, interleaved, and reports the median
and the range of each figure; ``cat /proc/loadavg`` is recorded before the run
and the run is marked ``noisy`` when the 1-minute load exceeded 1.5.

    .venv/bin/pip install -c /work/constraints.txt trl datasets   # the `bench` extra
    .venv/bin/python benchmarks/bench_trainer_vs_trl.py [--steps 10] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling peak_rss module

from peak_rss import PeakRss

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


class TrainMemory(PeakRss):
    """Peak RSS during training above the RSS just before it (:class:`peak_rss.PeakRss`; Linux only)."""

    def used_mb(self) -> float:
        """Peak RSS since :meth:`start` minus the RSS at :meth:`start`, in MiB."""
        used = self.above_mb()
        if used is None:
            raise RuntimeError("peak RSS unreadable: this benchmark needs Linux /proc/self/{clear_refs,status}")
        return used


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


async def _tirl(
    args: argparse.Namespace, model_dir: Path, run_dir: Path, *, checkpointing: bool, matched: bool
) -> dict[str, Any]:
    from tirl.config import load_config
    from tirl.inference.base import SamplingParams
    from tirl.inference.hf import HFGenerator
    from tirl.models.loading import load_policy
    from tirl.rollout.agent_loop import AgentLoop
    from tirl.rollout.strategies import make_strategy
    from tirl.trainer.learner import build_learner
    from tirl.trainer.trainer import Trainer

    cfg = load_config(
        None,
        [
            f"algo.group_size={args.group}",
            "algo.minibatches=2",
            f"algo.lr={args.lr}",
            "algo.kl_coef=0",
            "algo.warmup_steps=0",
            "filter.mode=off",
            f"trainer.prompts_per_step={args.prompts}",
            f"trainer.steps={args.steps}",
            f"generation.max_new_tokens={args.max_new}",
            f"trainer.threads={args.threads}",
            f"rollout.run_workers={args.prompts * args.group}",
            f"algo.gradient_checkpointing={str(checkpointing).lower()}",
            *args.tirl_set,
            # tirl_matched*: exactly the padded tokens TRL's matched micro-batch holds at most (below tirl's budget)
            *([f"algo.micro_batch_tokens={trl_in_flight(args, model_dir)}"] if matched else []),
        ],
    )
    policy = load_policy(model_dir, threads=args.threads)
    if checkpointing:
        from tirl.models.memory import apply_memory_options

        policy.model = apply_memory_options(policy.model, cfg.algo)
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
        learner=build_learner(cfg, policy.model, policy.tokenizer),
        tokenizer=policy.tokenizer,
        strategy=strategy,
        tasks=lambda step, n: tasks[(step - 1) * n : step * n],
        run_dir=run_dir,
        progress=False,
    )
    tokens = 0
    rewards: list[float] = []
    split = {"rollout_s": 0.0, "update_s": 0.0}  # of the timed steps
    mem = TrainMemory()
    mem.start()
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        metrics, sampled = await trainer.train_step(step)
        if step == 1:  # timing starts at the end of the first batch
            t0 = time.perf_counter()
        else:
            tokens += sum(len(t.token_ids) for t in sampled)
            split["rollout_s"] += float(metrics.get("time/rollout_s") or 0.0)
            split["update_s"] += float(metrics.get("time/update_s") or 0.0)
        rewards.append(float(metrics["reward/mean"] or 0.0))
        if metrics.get("train/no_signal") == 1:  # every group's rewards equal: tirl skips the update, TRL does not
            raise NoSignal(
                f"tirl step {step}: every group of {args.group} got equal rewards, so tirl made no update while "
                "TRL steps anyway and the timings would not compare — raise --group or --prompts (the defaults "
                "give every step a group with a spread)"
            )
        if metrics.get("train/optimizer_steps") != 2:
            raise RuntimeError(f"tirl step {step} made {metrics.get('train/optimizer_steps')} optimiser steps, not 2")
    wall = time.perf_counter() - t0
    train_mb = mem.used_mb()
    await strategy.close()
    await gen.close()
    return {
        "tokens": tokens,
        "wall_s": wall,
        "optimizer_steps": 2 * args.steps,
        "reward_mean": sum(rewards) / len(rewards),
        "train_mem_mb": train_mb,
        "micro_batch_tokens": cfg.algo.micro_batch_tokens,
        **split,
    }


# ----------------------------------------------------------------------------------------------- TRL
def matched_micro_batch(sequences: int, seq_tokens: int, budget: int) -> int:
    """TRL's micro-batch (sequences) at tirl's: the largest divisor of ``sequences`` whose padded tokens fit ``budget``.

    ``sequences`` per optimiser step, ``seq_tokens`` the padded length of one
    (the longest prompt + the completion budget), ``budget`` tirl's
    ``algo.micro_batch_tokens`` (0 = the whole mini-batch). At least 1.
    """
    if budget <= 0:
        return sequences
    fits = [d for d in range(1, sequences + 1) if sequences % d == 0 and d * seq_tokens <= budget]
    return max(fits, default=1)


def _trl_prompts(tok: Any, tasks: list[Any]) -> list[str]:
    """The exact prompt ids tirl feeds its generator, as text (special tokens are single tokens)."""
    from tirl.models.chat_format import chat_format_for
    from tirl.types import Message, Role

    chat = chat_format_for(tok)
    return [tok.decode(chat.prompt_ids([Message(role=Role.USER, content=t.prompt)])) for t in tasks]


def _trl_shape(args: argparse.Namespace, tok: Any, prompts: list[str], matched: bool) -> tuple[int, int, int]:
    """TRL's batch shape: (sequences per optimiser step, padded length of one, micro-batch sequences).

    The padded length is the longest prompt + ``--max-new``; the micro-batch is :func:`matched_micro_batch`
    at tirl's ``algo.micro_batch_tokens`` when ``matched``, else the whole optimiser step (TRL's default).
    One function for the TRL child and :func:`trl_in_flight`, so both sides read the same shape.
    """
    from tirl.config import load_config

    per_step = args.prompts * args.group // 2  # sequences per optimiser step (2 per generation batch)
    seq_tokens = max(len(tok.encode(p, add_special_tokens=False)) for p in prompts) + args.max_new
    budget = load_config(None, list(args.tirl_set)).algo.micro_batch_tokens
    micro = matched_micro_batch(per_step, seq_tokens, budget) if matched else per_step
    return per_step, seq_tokens, micro


def trl_in_flight(args: argparse.Namespace, model_dir: Path) -> int:
    """The most padded tokens ``trl_matched`` holds in flight: its micro-batch's sequences x their padded length.

    TRL's micro-batch is a whole number of sequences (a divisor of an optimiser step's), so it usually
    holds fewer padded tokens than tirl's ``algo.micro_batch_tokens`` (792 of 1024 on the default task);
    ``tirl_matched`` runs at exactly this budget, so that both sides hold the same tokens in flight.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    _, seq_tokens, micro = _trl_shape(args, tok, _trl_prompts(tok, _tasks(args)), matched=True)
    return micro * seq_tokens


def _trl(
    args: argparse.Namespace, model_dir: Path, out_dir: Path, *, checkpointing: bool, matched: bool
) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tirl.models.chat_format import chat_format_for

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    chat = chat_format_for(tok)
    tasks = _tasks(args)
    prompts = _trl_prompts(tok, tasks)
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
        """Starts the clock and the token count at the end of the first generation batch (optimiser step 2)."""

        def on_step_end(self, a: Any, state: Any, c: Any, **k: Any) -> None:
            if state.global_step == 2:
                clock["t0"] = time.perf_counter()
                clock["tokens0"] = counted["tokens"]

        def on_train_end(self, *a: Any, **k: Any) -> None:
            clock["t1"] = time.perf_counter()

    end_id = chat.eos_ids and min(chat.eos_ids)
    per_step, seq_tokens, micro = _trl_shape(args, tok, prompts, matched)
    config = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=per_step // micro,
        generation_batch_size=2 * per_step,
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
        **({} if checkpointing else {"gradient_checkpointing": False}),  # trl: TRL's default (True)
    )
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=data, processing_class=tok, callbacks=[Clock()]
    )
    mem = TrainMemory()
    mem.start()
    trainer.train()
    rewards = counted["rewards"]
    return {
        "tokens": int(counted["tokens"] - clock["tokens0"]),
        "wall_s": clock["t1"] - clock["t0"],
        "optimizer_steps": trainer.state.global_step,
        "reward_mean": sum(rewards) / max(len(rewards), 1),
        "train_mem_mb": mem.used_mb(),
        "gradient_checkpointing": bool(config.gradient_checkpointing),
        "micro_batch_sequences": micro,
        "gradient_accumulation_steps": per_step // micro,
        "padded_tokens_in_flight_max": micro * seq_tokens,
    }


# ------------------------------------------------------------------------------------------- driver
class NoSignal(Exception):
    """A tirl step without an update: the comparison cannot be made at these settings (one line, not a trace)."""


def _child(args: argparse.Namespace) -> None:
    try:
        _child_run(args)
    except NoSignal as exc:
        print(f"ERROR {exc}", flush=True)
        raise SystemExit(2) from None


def _child_run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model_dir)
        if args.child.startswith("tirl"):
            ckpt, matched = args.child.endswith("_ckpt"), args.child.startswith("tirl_matched")
            res = asyncio.run(_tirl(args, model_dir, Path(tmp) / "run", checkpointing=ckpt, matched=matched))
        else:
            ckpt, matched = args.child in ("trl", "trl_matched_ckpt"), args.child.startswith("trl_matched")
            res = _trl(args, model_dir, Path(tmp) / "trl", checkpointing=ckpt, matched=matched)
    res["tokens_per_s"] = res["tokens"] / res["wall_s"]
    res["peak_rss_mb"] = _peak_mb()
    print("RESULT " + json.dumps(res), flush=True)


def _spawn(name: str, args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", name, "--model-dir", str(model_dir)]
    for key in ("steps", "prompts", "group", "max_new", "threads", "seed", "lr"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    for item in args.tirl_set:
        cmd += ["--tirl-set", item]
    # the same OpenMP settings for both (passive waiting: see tirl.commands.train)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(args.threads)}
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]
        if line.startswith("ERROR "):
            raise SystemExit(f"error: {name}: {line[len('ERROR ') :]}")
    raise SystemExit(f"{name} run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")


ENTRIES = ("tirl", "tirl_matched", "trl_matched", "tirl_matched_ckpt", "trl_matched_ckpt", "trl", "trl_no_ckpt")
DEFAULT_ENTRIES = ENTRIES[:6]  # trl_no_ckpt (TRL's one big micro-batch without checkpointing) only with --only
#: key -> (tirl entry, TRL entry); like for like first, then each side's defaults
PAIRS = {
    "no_checkpointing": ("tirl_matched", "trl_matched"),
    "checkpointing": ("tirl_matched_ckpt", "trl_matched_ckpt"),
    "defaults": ("tirl", "trl"),
}
FIGURES = ("tokens_per_s", "train_mem_mb", "peak_rss_mb", "wall_s")
TRL_SETUP = ("gradient_checkpointing", "micro_batch_sequences", "gradient_accumulation_steps",
             "padded_tokens_in_flight_max", "micro_batch_tokens")  # fmt: skip


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def _entry(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and range of every figure of one entry's runs, and its set-up."""
    out: dict[str, Any] = {
        **{k: statistics.median(r[k] for r in rs) for k in FIGURES},
        **{f"{k}_range": [min(r[k] for r in rs), max(r[k] for r in rs)] for k in FIGURES},
        "tokens": rs[0]["tokens"],
        "optimizer_steps": rs[0]["optimizer_steps"],
        "reward_mean": statistics.median(r["reward_mean"] for r in rs),
    }
    for k in ("rollout_s", "update_s"):  # tirl only: where the timed wall time went
        if k in rs[0]:
            out[k] = statistics.median(r[k] for r in rs)
    out.update({k: rs[0][k] for k in TRL_SETUP if k in rs[0]})
    return out


def _pair(runs: dict[str, list[dict[str, Any]]], entries: dict[str, Any], mine: str, theirs: str) -> dict[str, Any]:
    """The ratios tirl ÷ TRL of the medians, and the per-run range of the throughput ratio."""
    per_run = [t["tokens_per_s"] / q["tokens_per_s"] for t, q in zip(runs[mine], runs[theirs], strict=True)]
    a, b = entries[mine], entries[theirs]
    return {
        "tirl": mine,
        "trl": theirs,
        "tokens_per_s_ratio": a["tokens_per_s"] / b["tokens_per_s"],
        "tokens_per_s_ratio_per_run_range": [min(per_run), max(per_run)],
        "train_mem_ratio": a["train_mem_mb"] / b["train_mem_mb"],
        "peak_rss_ratio": a["peak_rss_mb"] / b["peak_rss_mb"],
    }


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """``like_for_like`` and ``defaults`` (tirl ÷ TRL, where both entries ran), then every entry's figures."""
    entries = {name: _entry(rs) for name, rs in runs.items()}
    ratios = {key: _pair(runs, entries, *pair) for key, pair in PAIRS.items() if set(pair) <= set(runs)}
    like = {k: ratios[k] for k in ("no_checkpointing", "checkpointing") if k in ratios}
    return {"like_for_like": like, "defaults": ratios.get("defaults", {}), "entries": entries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="generation batches (each = 2 optimiser steps)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per batch")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max-new", type=int, default=64, help="completion token budget")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--repeats", type=int, default=1, help="runs of every entry (interleaved); median and range")
    parser.add_argument(
        "--tirl-set", action="append", default=[], metavar="KEY=VALUE", help="extra tirl config override (repeatable)"
    )
    parser.add_argument("--only", choices=ENTRIES, action="append", help="run these entries only (repeatable)")
    parser.add_argument("--json", action="store_true", help='print {"like_for_like": {...}, "defaults": {...}, ...}')
    parser.add_argument("--child", choices=ENTRIES, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first batch is excluded from the timing)")
    names = [n for n in ENTRIES if n in (args.only or DEFAULT_ENTRIES)]
    load_before = _load()
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = _model_dir(Path(tmp), args.seed)
        for _ in range(args.repeats):
            for name in names:
                runs[name].append(_spawn(name, args, model_dir))
    results = _summary(runs)
    results["machine"] = {
        "loadavg_before": load_before,
        "loadavg_after": _load(),
        "noisy": load_before[0] > 1.5,
        "repeats": args.repeats,
        "python": sys.executable,
        "threads": args.threads,
        "model": model_dir.name,
        "steps": args.steps,
        "timed_batches": args.steps - 1,
        "tirl_set": args.tirl_set,
        "entries": names,
    }
    if args.json:
        print(json.dumps(results))
        return
    print(f"model: {model_dir.name}  prompts/batch {args.prompts}  group {args.group}  max-new {args.max_new}  "
          f"batches {args.steps} (timed from batch 2)  threads {args.threads}  repeats {args.repeats}  "
          f"load before {load_before}{'  NOISY' if results['machine']['noisy'] else ''}")  # fmt: skip
    print(f"{'':17} {'tokens/s':>10} {'train MB':>9} {'peak RSS MB':>12} {'wall s':>8} {'tokens':>8} {'reward':>7}"
          f"  micro-batch")  # fmt: skip
    for name in names:
        r = results["entries"][name]
        micro = (
            f"  {r['micro_batch_sequences']} seq x {r['gradient_accumulation_steps']}"
            if "micro_batch_sequences" in r
            else ""
        )
        print(f"{name:17} {r['tokens_per_s']:10.1f} {r['train_mem_mb']:9.1f} {r['peak_rss_mb']:12.1f} "
              f"{r['wall_s']:8.1f} {r['tokens']:8d} {r['reward_mean']:7.3f}{micro}")  # fmt: skip
    for key, c in [*results["like_for_like"].items(), ("defaults", results["defaults"])]:
        if not c:
            continue
        lo, hi = c["tokens_per_s_ratio_per_run_range"]
        print(f"{key} ({c['tirl']} / {c['trl']}): tokens/s {c['tokens_per_s_ratio']:.2f}x (runs {lo:.2f}-{hi:.2f}x), "
              f"training memory {c['train_mem_ratio']:.2f}x, peak RSS {c['peak_rss_ratio']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
