"""The warm-start recipe behind ``tirl sft``: model, env, demonstrations, training, evaluation, checkpoint.

:func:`run_sft` is the whole run (the command only turns its arguments into an
:class:`~tirl.sft.SFTConfig` and :class:`SFTRunOptions`):

1. **model** — ``options.init``'s checkpoint, or a fresh tiny model of ``options.spec``;
2. **parts** — :func:`sft_parts`: the sandbox, the env factory and the agent
   loops, all sharing one action rule, the one training uses for this env
   (:func:`tirl.filters.rules_from_config` with the default ``[filter]`` section:
   the env's own rule, else the default fields). The demonstrations, the sampled
   held-out evaluation and the greedy one all run :class:`~tirl.rollout.agent_loop.AgentLoop`;
3. **demonstrations** — the expert's episodes through the real env
   (:func:`tirl.sft.build_demonstrations`, only the correct ones);
4. **training** — the copy curriculum (``copy_steps``), then the demonstrations
   with a held-out evaluation (temperature 1, seeded per turn) every
   ``eval_every`` steps and a checkpoint after each;
5. **greedy evaluation**, the checkpoint and its card (``README.md``).

Progress lines go to ``cfg.log``. Not covered: several runs sharing one
sandbox, and a GPU (the model stays on the CPU).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from tirl.config import EnvConfig, FilterConfig, SandboxConfig
from tirl.envs.base import Task
from tirl.envs.registry import env_factory
from tirl.errors import InputError
from tirl.fileio import atomic_write, check_output, check_output_dir, refuse_overwrite
from tirl.filters import rules_from_config
from tirl.inference.base import SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.models.chat_format import ChatFormat, chat_format_for
from tirl.models.init import ModelSpec, build_model, spec_tokenizer
from tirl.models.loading import load_policy
from tirl.models.tiny import TinyModelSpec, build_tiny_model, count_parameters
from tirl.models.toolcalls import tools_for_env
from tirl.parsing import ParseRules
from tirl.rollout.agent_loop import AgentLoop
from tirl.rollout.base import EnvFactory
from tirl.rollout.evaluation import evaluate_accuracy
from tirl.sandbox import Sandbox, create_sandbox
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
from tirl.sft_checkpoint import check_sft_out, save_sft_checkpoint
from tirl.types import Trajectory
from tirl.wording import counted


def demo_env(cfg: SFTConfig) -> str:
    """The env the demonstrations run in: swe-lite for its curriculum, else tir-math (tir-chain too)."""
    return "swe-lite" if cfg.env == "swe-lite" else "tir-math"


@dataclass(frozen=True, slots=True)
class SFTRunOptions:
    """Where the checkpoint goes and what the run starts from (the parts of ``tirl sft`` not in SFTConfig)."""

    out: Path
    init: str | None = None  # a model directory to start from; None: a fresh model (``bpe`` or ``spec``)
    spec: TinyModelSpec = field(default_factory=TinyModelSpec)
    bpe: ModelSpec | None = None  # set: a fresh Qwen2/Llama with a BPE tokenizer (``tirl model init``'s) instead
    threads: int = 2  # torch CPU threads
    sandbox: str = "auto"  # sandbox.backend: auto | bwrap | process
    command: str = "tirl sft"  # how to rebuild the checkpoint, written into its card
    demos_out: Path | None = None  # also write the demonstrations here (trajectory JSONL with token ids)


@dataclass(slots=True)
class SFTParts:
    """What one SFT run executes episodes with: one action rule for the env and every loop."""

    rules: ParseRules
    sandbox: Sandbox
    factory: EnvFactory
    generator: HFGenerator
    sampled: AgentLoop  # held-out evaluation during training: temperature 1, seeded per turn
    greedy: AgentLoop  # the evaluation after training: temperature 0

    async def close(self) -> None:
        """Stop the generator and the sandbox."""
        await self.generator.close()
        await self.sandbox.close()


def sft_rules(cfg: SFTConfig) -> ParseRules:
    """The action rule of the demonstrated env, as training builds it from a default ``[filter]`` section."""
    return rules_from_config(FilterConfig(), EnvConfig(name=cfg.env))


def sft_tools(cfg: SFTConfig) -> tuple[dict[str, Any], ...]:
    """The tool definitions every SFT prompt renders: the env's tools with ``cfg.tools``, else none."""
    return tools_for_env(cfg.env) if cfg.tools else ()


def sft_runner(
    generator: Any, chat: ChatFormat, cfg: SFTConfig, rules: ParseRules, *, temperature: float, seed: int | None
) -> AgentLoop:
    """The agent loop of every SFT episode (``seed`` set: per-turn sampling seeds, reproducible)."""
    return AgentLoop(
        generator,
        chat,
        params=SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=temperature),
        max_turns=cfg.max_turns,
        max_total_tokens=cfg.max_total_tokens,
        rules=rules,
        seed=seed,
        tools=sft_tools(cfg),
    )


def sft_parts(cfg: SFTConfig, model: Any, tokenizer: Any, chat: ChatFormat, sandbox_backend: str) -> SFTParts:
    """The sandbox, env factory, generator and loops of one run, built around one action rule."""
    rules = sft_rules(cfg)
    sandbox = create_sandbox(SandboxConfig(backend=sandbox_backend))  # type: ignore[arg-type]
    factory = env_factory(demo_env(cfg), sandbox=sandbox, max_turns=cfg.max_turns, rules=rules)
    generator = HFGenerator(model, tokenizer, eos_ids=chat.eos_ids, seed=cfg.seed)
    return SFTParts(
        rules=rules,
        sandbox=sandbox,
        factory=factory,
        generator=generator,
        sampled=sft_runner(generator, chat, cfg, rules, temperature=1.0, seed=cfg.seed),
        greedy=sft_runner(generator, chat, cfg, rules, temperature=0.0, seed=None),
    )


def sft_tasks(cfg: SFTConfig, n: int, seed: int, *, held_out: bool = False) -> list[Task]:
    """``n`` generated tasks of the configured family (swe-lite: its training split, validation when held out)."""
    if cfg.env == "swe-lite":
        from tirl.envs.tasks.swe_curriculum import SPEC_DIFFICULTY, generate_curriculum

        spec = cfg.difficulty >= SPEC_DIFFICULTY
        return generate_curriculum(n, seed=seed, split="validation" if held_out else "train", spec=spec)
    if cfg.env == "tir-chain":
        from tirl.envs.tasks.chain_gen import generate_chain_tasks

        return generate_chain_tasks(n, seed=seed)
    from tirl.envs.tasks.math_gen import generate_tasks

    return generate_tasks(n, difficulty=cfg.difficulty, seed=seed)


def load_sft_model(options: SFTRunOptions, cfg: SFTConfig) -> tuple[Any, Any]:
    """``options.init``'s model, a fresh BPE model of ``options.bpe`` or a tiny one of ``spec``, fit to the episodes.

    The context is raised to ``cfg.max_total_tokens`` when shorter (:func:`fit_context`): the generator caps
    an episode at the model's ``max_position_embeddings``, and swe-lite's run past tiny-tir's 1,024.
    """
    if options.init:
        policy = load_policy(options.init, need_tools=cfg.tools)
        model, tokenizer = policy.model, policy.tokenizer
    elif options.bpe is not None:  # a fresh BPE model (--arch qwen2|llama)
        tokenizer = spec_tokenizer(options.bpe)
        model = build_model(options.bpe, tokenizer)
    else:
        model, tokenizer = build_tiny_model(options.spec, seed=cfg.seed)
    where = f"--init {options.init}" if options.init else "the fresh tiny model"
    if fit_context(model, tokenizer, cfg.max_total_tokens, where=where):
        cfg.log(f"context raised to {cfg.max_total_tokens} positions (the episodes' token cap)")
    return model, tokenizer


def fit_context(model: Any, tokenizer: Any, positions: int, *, where: str) -> bool:
    """Give ``model`` at least ``positions`` positions; whether it changed anything.

    Only for plain rotary positions (``rope_type`` default): they are computed, not learned, so no weight
    changes and the new positions are what the training then teaches. A model with a learned position table
    or a scaled rotary type (its behaviour depends on the length) is an :class:`InputError` naming ``where``.
    """
    have = int(getattr(model.config, "max_position_embeddings", 0) or 0)
    if have >= positions:
        return False
    rope = getattr(model.config, "rope_parameters", None) or {}
    kind = rope.get("rope_type") if isinstance(rope, dict) else None
    if kind != "default":
        raise InputError(where, None, f"has {have} positions, fewer than the {positions} tokens of an episode, "
                         f"and its positions are not plain rotary (rope_type {kind}), so tirl cannot extend them",
                         "start from a model with enough positions (max_position_embeddings)")  # fmt: skip
    model.config.max_position_embeddings = positions
    tokenizer.model_max_length = positions
    return True


def _as_tool_call_solution(fenced: Callable[[Task], list[str]]) -> Callable[[Task], list[str]]:
    """The expert ``fenced`` with every python fence of its turns written as a Hermes tool call."""
    from tirl.models.corpus import as_tool_calls

    def solution(task: Task) -> list[str]:
        return [as_tool_calls(turn) for turn in fenced(task)]

    return solution


async def _demonstrations(cfg: SFTConfig, chat: ChatFormat, parts: SFTParts) -> list[Trajectory]:
    """The expert's episodes on the training tasks, through the real env (only the correct ones)."""
    from tirl.envs.tasks.chain_gen import chain_expert_solution
    from tirl.envs.tasks.math_gen import expert_solution
    from tirl.envs.tasks.swe_experts import curriculum_expert_solution

    tasks = sft_tasks(cfg, cfg.train_tasks, sft_task_seed(cfg.seed))
    solutions: dict[str, Callable[[Task], list[str]]] = {
        "tir-chain": chain_expert_solution,
        "swe-lite": curriculum_expert_solution,
    }
    solution = solutions.get(cfg.env, expert_solution)
    if cfg.tools:  # the same turns, each python fence written as a Hermes tool call
        solution = _as_tool_call_solution(solution)
    demos = await build_demonstrations(
        tasks,
        solution,
        chat,
        parts.factory,
        max_turns=cfg.max_turns,
        max_total_tokens=cfg.max_total_tokens,
        rules=parts.rules,
        tools=sft_tools(cfg),
    )
    if demos:
        lengths = sorted(len(t.token_ids) for t in demos)
        cfg.log(
            f"demonstrations: {len(demos)} of {len(tasks)} tasks, tokens median {lengths[len(lengths) // 2]} "
            f"max {lengths[-1]}"
        )
    return demos


def _copy_warmup(model: Any, tokenizer: Any, chat: ChatFormat, cfg: SFTConfig) -> None:
    """The synthetic copy curriculum before the demonstrations (``copy_steps``).

    swe-lite: :func:`tirl.sft_swe_copy.swe_copy_curriculum` (expert episode prefixes on fresh names);
    every other env: :func:`tirl.sft.copy_curriculum` (digits).
    """
    if not cfg.copy_steps:
        return
    copy_cfg = replace(
        cfg, steps=cfg.copy_steps, batch_size=cfg.copy_batch_size, decay_steps=cfg.copy_steps, stop_at_accuracy=None
    )
    n = cfg.copy_steps * cfg.copy_batch_size
    swe = cfg.env == "swe-lite"
    if swe:
        from tirl.sft_swe_copy import swe_copy_curriculum

        copies = swe_copy_curriculum(n, chat, seed=cfg.seed, short_share=cfg.copy_short_share)
        kind = f"swe-lite copy curriculum ({cfg.copy_short_share:.0%} short episodes)"
    else:
        copies, kind = copy_curriculum(n, chat, seed=cfg.seed, tools=cfg.tools), "copy curriculum"
    cfg.log(f"{kind}: {counted(cfg.copy_steps, 'step')} of {cfg.copy_batch_size}")
    if swe:
        _log_copy_check(model, chat, cfg, "before")
    train_sft(model, copies, copy_cfg, pad_id=int(tokenizer.pad_token_id or 0))
    if swe:
        _log_copy_check(model, chat, cfg, "after")


def _log_copy_check(model: Any, chat: ChatFormat, cfg: SFTConfig, when: str) -> None:
    """Log :func:`tirl.sft_swe_copy.copy_check` on 12 validation tasks (a few seconds).

    The tasks are the same whatever ``cfg.seed`` (:data:`tirl.sft_swe_copy.COPY_CHECK_SEED`), so the checks of
    runs with different seeds compare (before, two runs of the same weights at seeds 0 and 1 read locate 5/12
    and 6/12).
    """
    from tirl.sft_swe_copy import COPY_CHECK_SEED, copy_check

    check = copy_check(model, chat, 12, seed=COPY_CHECK_SEED)
    cfg.log(f"copy check {when} the warm-up (12 validation tasks, greedy, exact turn): {check.line()}")


def write_demonstrations(demos: list[Trajectory], path: str | Path) -> None:
    """Write ``demos`` as trajectory JSONL (with token ids and loss masks), atomically."""
    with atomic_write(path) as f:
        for traj in demos:
            f.write(traj.to_json(tokens=True) + "\n")


def run_sft(cfg: SFTConfig, options: SFTRunOptions) -> SFTResult:
    """Build demonstrations, train, evaluate, save ``options.out``; returns what the run did."""
    out = check_output_dir(options.out, staged=True)  # a bad --out fails now, not after training
    refuse_overwrite(out, [options.init], option="--out")  # the starting checkpoint is an input
    check_sft_out(out)  # nor one that holds a run, a model tirl sft did not write, or a user's files
    if options.demos_out is not None:
        check_output(options.demos_out, option="--demos-out")
    torch.set_num_threads(max(1, options.threads))
    model, tokenizer = load_sft_model(options, cfg)
    chat = chat_format_for(tokenizer)
    cfg.log(f"model: {count_parameters(model):,} parameters")
    loop = asyncio.new_event_loop()
    try:
        parts = sft_parts(cfg, model, tokenizer, chat, options.sandbox)
        try:
            result = _train(loop, cfg, options, model, tokenizer, chat, parts, out)
        finally:
            loop.run_until_complete(parts.close())
    finally:
        loop.close()
    _save(model, tokenizer, out, cfg, result, options)
    cfg.log(f"saved {options.out} after {counted(result.steps, 'step')} ({result.wall_s:.0f}s); evals {result.evals}")
    return result


def _save(model: Any, tokenizer: Any, out: Path, cfg: SFTConfig, result: SFTResult, options: SFTRunOptions) -> None:
    """The checkpoint and its card (titled as the user named ``--out``) swapped into ``out`` whole."""
    title = Path(options.out).name
    save_sft_checkpoint(model, tokenizer, out, lambda d: write_card(d, cfg, result, options.command, name=title))


def _train(
    loop: asyncio.AbstractEventLoop,
    cfg: SFTConfig,
    options: SFTRunOptions,
    model: Any,
    tokenizer: Any,
    chat: ChatFormat,
    parts: SFTParts,
    out: Path,
) -> SFTResult:
    """Demonstrations, copy curriculum, training, checkpoints into ``out`` (the resolved --out), greedy evaluation."""
    demos = loop.run_until_complete(_demonstrations(cfg, chat, parts))
    if options.demos_out is not None:
        write_demonstrations(demos, options.demos_out)
        cfg.log(f"wrote {len(demos)} demonstrations to {options.demos_out}")
    held_out = sft_tasks(cfg, cfg.eval_tasks, sft_eval_seed(cfg.seed), held_out=True)

    def evaluate() -> float:
        report = loop.run_until_complete(evaluate_accuracy(parts.sampled, parts.factory, held_out, seed=cfg.seed))
        cfg.log(f"  eval: {report.correct}/{report.n} correct, ends {report.terminations}, {report.wall_s:.1f}s")
        return report.accuracy

    def checkpoint(partial: SFTResult) -> None:  # a usable checkpoint after every evaluation, swapped in whole
        _save(model, tokenizer, out, cfg, partial, options)

    _copy_warmup(model, tokenizer, chat, cfg)
    result = train_sft(
        model, demos, cfg, pad_id=int(tokenizer.pad_token_id or 0), evaluate=evaluate, on_eval=checkpoint
    )
    greedy = loop.run_until_complete(evaluate_accuracy(parts.greedy, parts.factory, held_out, seed=cfg.seed))
    result.greedy_accuracy = greedy.accuracy
    cfg.log(f"{cfg.eval_split} greedy accuracy {greedy.accuracy:.3f} ends {greedy.terminations}")
    return result


__all__ = ["SFTParts", "SFTRunOptions", "demo_env", "fit_context", "load_sft_model", "run_sft", "sft_parts",
           "sft_rules", "sft_runner", "sft_tasks", "sft_tools", "write_demonstrations"]  # fmt: skip
