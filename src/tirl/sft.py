"""Warm start: supervised fine-tuning on demonstrations made by the real environment.

Demonstrations are produced by running each task's scripted
``expert_solution`` through the *real* env (sandbox included) on the same
rollout path as training (the strategy's stages, a group size of 1) with the
same :class:`~tirl.rollout.agent_loop.AgentLoop` and chat format that RL
uses: a :class:`ScriptedGenerator` plays the expert's turns as "sampled"
ids. The token format the model learns is therefore exactly the one RL will
show it (prompt, turn ids, the real tool output, turn closes).

The loss is cross-entropy on loss-mask-1 ids only (the assistant's turns);
prompt, template and tool-output ids are context, not targets.

Training stops early once the accuracy on held-out tasks (sampled at
temperature 1 through the full agent loop) reaches ``stop_at_accuracy``:
the point is a model that *sometimes* succeeds, so RL has room to improve.

Not covered: packing several episodes into one row, mixed precision,
gradient accumulation; a run is deterministic for a seed on one machine and
torch build, not bit-identical across CPU types.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tirl.config import RolloutConfig
from tirl.envs.base import Env, Task
from tirl.inference.base import GenerationResult, SamplingParams
from tirl.models.chat_format import ChatFormat
from tirl.models.kernels import build_line
from tirl.parsing import ParseRules
from tirl.rollout.agent_loop import AgentLoop
from tirl.rollout.base import EnvFactory, RolloutRequest
from tirl.rollout.evaluation import EvalReport, evaluate_accuracy
from tirl.sft_config import SFTConfig
from tirl.types import Message, Trajectory


class ScriptedGenerator:
    """A :class:`~tirl.inference.base.Generator` that plays fixed assistant contents, one per call."""

    def __init__(self, chat: ChatFormat, contents: Sequence[str]) -> None:
        self.chat = chat
        self._turns = list(contents)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        """The next scripted turn as ids (ending with the turn's EOS id), log-probs 0."""
        if not self._turns:
            raise RuntimeError("the scripted solution has no more turns but the episode continues")
        ids = self.chat.assistant_ids(self._turns.pop(0))
        return GenerationResult(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="eos")

    async def close(self) -> None:
        """Nothing to release."""


@dataclass(slots=True)
class ScriptedSolutions:
    """An :class:`~tirl.rollout.base.EpisodeRunner`: the :class:`AgentLoop` with the task's scripted solution."""

    chat: ChatFormat
    solution: Callable[[Task], list[str]]
    max_turns: int = 4
    max_total_tokens: int = 1024
    rules: ParseRules = field(default_factory=ParseRules)  # the env's action rule (labels the turn records)
    tools: tuple[dict[str, Any], ...] = ()  # tool definitions rendered into the prompt (``env.tools = true``)

    async def __call__(self, env: Env, task: Task, initial: list[Message], traj: Trajectory) -> None:
        """Play ``solution(task)`` as sampled ids through the agent loop."""
        loop = AgentLoop(
            ScriptedGenerator(self.chat, self.solution(task)),
            self.chat,
            params=SamplingParams(max_new_tokens=self.max_total_tokens - 1),
            max_turns=self.max_turns,
            max_total_tokens=self.max_total_tokens,
            rules=self.rules,
            tools=self.tools,
        )
        await loop(env, task, initial, traj)


async def build_demonstrations(
    tasks: Sequence[Task],
    solution: Callable[[Task], list[str]],
    chat: ChatFormat,
    env_factory: EnvFactory,
    *,
    max_turns: int = 4,
    max_total_tokens: int = 1024,
    concurrency: int = 16,
    rules: ParseRules | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> list[Trajectory]:
    """One trajectory per task whose scripted solution the env judges correct (others are skipped).

    ``rules``: the action rule the env factory's envs judge with (default: :class:`~tirl.parsing.ParseRules`).
    ``tools``: tool definitions for the prompt, as ``tirl train`` renders them with ``env.tools = true``.
    """
    from tirl.rollout.strategies import make_strategy

    runner = ScriptedSolutions(
        chat,
        solution,
        max_turns=max_turns,
        max_total_tokens=max_total_tokens,
        rules=rules or ParseRules(),
        tools=tuple(tools),
    )
    cfg = RolloutConfig(run_workers=concurrency, run_queue_size=concurrency)
    strategy = make_strategy(cfg, env_factory, runner)
    try:
        batch = await strategy.collect(RolloutRequest(tasks=list(tasks), group_size=1))
    finally:
        await strategy.close()
    return [t for t in batch.trajectories if t.correct is True]


_COPY_WORDS = ("Compute", "What is", "Find", "Sum", "Copy", "Take", "x =", "Evaluate", "Check")
_COPY_OPS = ("+", "-", "*", "%", " mod ", ",", " to ", "**", "/")


def copy_curriculum(n: int, chat: ChatFormat, *, seed: int = 0, tools: bool = False) -> list[Trajectory]:
    r"""Short synthetic episodes whose assistant turn copies numbers from the user turn.

    A dense, cheap signal for the one skill the demonstrations need and a
    from-scratch model lacks: copying digit strings from earlier in the
    context (induction). Each is ``user: "<word> <a><op><b>."`` then an
    assistant turn ``print(<a><op><b>)`` or ``\boxed{<a>}`` or the bare
    numbers, in the same chat format as the demonstrations; loss mask 1 on the
    assistant turn only. ``tools``: the ``print`` reply is a Hermes ``python`` tool call instead of a fence.
    """
    from tirl.models.corpus import as_tool_calls
    from tirl.types import Message, Role

    rng = random.Random(f"copy/{seed}")
    out: list[Trajectory] = []
    for i in range(n):
        a = str(rng.randint(0, 10 ** rng.randint(1, 6)))
        b = str(rng.randint(0, 10 ** rng.randint(1, 5)))
        op = rng.choice(_COPY_OPS)
        expr = f"{a}{op}{b}"
        kind = rng.randrange(3)
        reply = f"```python\nprint({expr})\n```" if kind == 0 else (f"\\boxed{{{a}}}" if kind == 1 else expr)
        if tools:
            reply = as_tool_calls(reply)
        prompt = chat.prompt_ids([Message(role=Role.USER, content=f"{rng.choice(_COPY_WORDS)} {expr}.")])
        turn = chat.assistant_ids(reply)
        traj = Trajectory(id=f"copy-{i}", messages=[])
        traj.token_ids = prompt + turn
        traj.loss_mask = [0] * len(prompt) + [1] * len(turn)
        traj.logprobs = [0.0] * len(traj.token_ids)
        out.append(traj)
    return out


def masked_lm_loss(
    logits: torch.Tensor,  # [B, T, V] model outputs at each position
    input_ids: torch.Tensor,  # [B, T]
    loss_mask: torch.Tensor,  # [B, T] 1 where the token is a training target
) -> torch.Tensor:
    """Mean next-token cross-entropy over target tokens (``loss_mask == 1`` at the *predicted* position)."""
    pred = logits[:, :-1, :].float()  # [B, T-1, V]: position t predicts token t+1
    target = input_ids[:, 1:]  # [B, T-1]
    mask = loss_mask[:, 1:].float()  # [B, T-1]
    nll = torch.nn.functional.cross_entropy(pred.transpose(1, 2), target, reduction="none")  # [B, T-1]
    return (nll * mask).sum() / mask.sum().clamp(min=1.0)


def pad_batch(trajs: Sequence[Trajectory], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad token ids; returns (input_ids [B, T], attention_mask [B, T], loss_mask [B, T])."""
    width = max(len(t.token_ids) for t in trajs)
    ids = torch.full((len(trajs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(trajs), width), dtype=torch.long)
    mask = torch.zeros((len(trajs), width), dtype=torch.long)
    for i, t in enumerate(trajs):
        n = len(t.token_ids)
        ids[i, :n] = torch.tensor(t.token_ids, dtype=torch.long)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(t.loss_mask, dtype=torch.long)
    return ids, attn, mask


@dataclass
class SFTResult:
    """What one SFT run did."""

    steps: int
    demonstrations: int
    final_loss: float
    evals: list[tuple[int, float]]  # (step, accuracy on SFTConfig.eval_split)
    wall_s: float
    greedy_accuracy: float | None = None  # SFTConfig.eval_split accuracy at temperature 0 after training


def _lr_at(step: int, cfg: SFTConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.decay_steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def train_sft(
    model: torch.nn.Module,
    demos: Sequence[Trajectory],
    cfg: SFTConfig,
    *,
    pad_id: int,
    evaluate: Callable[[], float] | None = None,
    on_eval: Callable[[SFTResult], None] | None = None,
) -> SFTResult:
    """Train ``model`` in place on ``demos``; evaluate every ``eval_every`` steps and stop at the target.

    ``on_eval`` is called after each evaluation with the result so far (e.g. to save a checkpoint).
    """
    if not demos:
        raise ValueError("no demonstrations to train on")
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    order: list[int] = []
    evals: list[tuple[int, float]] = []
    loss_value = float("nan")
    t0 = time.perf_counter()
    step = 0
    for step in range(1, cfg.steps + 1):
        model.train()
        if len(order) < cfg.batch_size:
            more = list(range(len(demos)))
            rng.shuffle(more)
            order.extend(more)
        batch = [demos[i] for i in order[: cfg.batch_size]]
        del order[: cfg.batch_size]
        ids, attn, mask = pad_batch(batch, pad_id)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step - 1, cfg)
        logits = model(input_ids=ids, attention_mask=attn).logits  # [B, T, V]
        loss = masked_lm_loss(logits, ids, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = loss.item()
        if step % 20 == 0:
            cfg.log(
                f"step {step:5d}  loss {loss_value:.4f}  lr {_lr_at(step - 1, cfg):.2e}  "
                f"{time.perf_counter() - t0:6.1f}s"
            )
        if evaluate is not None and step % cfg.eval_every == 0:
            model.eval()
            acc = evaluate()
            evals.append((step, acc))
            cfg.log(f"step {step:5d}  {cfg.eval_split} accuracy {acc:.3f}")
            if on_eval is not None:
                on_eval(SFTResult(step, len(demos), loss_value, list(evals), time.perf_counter() - t0))
            model.train()
            if cfg.stop_at_accuracy is not None and acc >= cfg.stop_at_accuracy:
                break
    model.eval()
    return SFTResult(step, len(demos), loss_value, evals, time.perf_counter() - t0)


def sft_task_seed(seed: int) -> int:
    """The generator seed of the training tasks (far from the evaluation seeds 0..999)."""
    return 100_000 + seed


def sft_eval_seed(seed: int) -> int:
    """The generator seed of SFT's held-out tasks (not the trainer's evaluation set)."""
    return 200_000 + seed


def demonstration_prompts(env: str, difficulty: int = 1, *, n: int | None = None, seed: int = 0) -> frozenset[str]:
    """The task prompts ``tirl sft`` demonstrates for these settings; the defaults are the built-in checkpoint's.

    The trainer keeps them out of its held-out and validation sets (a model
    must not be evaluated on tasks it was fine-tuned on). Empty for a task
    family ``tirl sft`` does not demonstrate.
    """
    count = SFTConfig.train_tasks if n is None else n
    if env == "tir-math":
        from tirl.envs.tasks.math_gen import generate_tasks

        return frozenset(t.prompt for t in generate_tasks(count, difficulty=difficulty, seed=sft_task_seed(seed)))
    if env == "tir-chain":
        from tirl.envs.tasks.chain_gen import generate_chain_tasks

        return frozenset(t.prompt for t in generate_chain_tasks(count, seed=sft_task_seed(seed)))
    return frozenset()


def write_card(out: Path, cfg: SFTConfig, result: SFTResult, command: str, *, name: str | None = None) -> None:
    """A short README in the checkpoint directory saying how it was made (titled ``name``, else ``out``'s name)."""
    lines = [
        f"# {name or out.name}: a warm-started tirl policy",
        "",
        f"Rebuild: `{command}`",
        "",
        f"- copy curriculum: {cfg.copy_steps} steps of {cfg.copy_batch_size} synthetic copy episodes first",
        f"- demonstrations: {result.demonstrations} ("
        + (f"tir-math difficulty {cfg.difficulty}" if cfg.env == "tir-math" else cfg.env)
        + ", expert solutions run through the real env)",
        *(
            ["- tools: the python tool offered in every prompt; calls written as Hermes <tool_call> blocks"]
            if cfg.tools
            else []
        ),
        f"- steps: {result.steps}, batch {cfg.batch_size}, lr {cfg.lr}, final loss {result.final_loss:.4f}",
        f"- {cfg.eval_split} accuracy (temperature 1) by step: {', '.join(f'{s}: {a:.3f}' for s, a in result.evals)}",
        f"- {cfg.eval_split} greedy accuracy after training: {result.greedy_accuracy}",
        f"- wall time: {result.wall_s:.0f} s",
        f"- built with: {build_line()} (the weights' bytes repeat where these kernels match; tirl.models.kernels)",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")


__all__ = [
    "EvalReport",
    "SFTConfig",
    "SFTResult",
    "ScriptedGenerator",
    "build_demonstrations",
    "evaluate_accuracy",
    "masked_lm_loss",
    "pad_batch",
    "train_sft",
]
