"""The CPU generation path: tirl's in-process sampler against ``model.generate`` and against the FLOP bound.

    python benchmarks/bench_sampling.py [--json] [--repeats 5] [--threads 1] [--max-new 96] [--profile]

Same model (the built-in ``tiny-chain`` policy of the main job), same prompts,
same batch, same lengths, same torch thread count (``torch.set_num_threads``
and ``HFGenerator(threads=...)`` for prefill and decode alike), one warm-up of
each side, then ``--repeats`` rounds that alternate which side goes first. Two
batches, the main job's shapes:

* ``turn1``: 64 first-turn prompts of ``tir-chain`` (8 prompts x 8 episodes
  of a ``tirl train`` step; 39 tokens each, no padding);
* ``later``: 16 contexts of 1 to 4 earlier tool turns (68-157 tokens,
  left-padded), as the later turns of an episode reach the generator.

Two regimes per batch:

* ``fixed`` (the like-for-like headline): every row generates exactly
  ``--max-new`` tokens (tirl: an EOS id the vocabulary cannot produce;
  ``generate``: ``min_new_tokens = max_new_tokens``), so both sides do the same
  work, B x max_new tokens;
* ``eos``: the model's own EOS ends a row (tokens counted up to and including
  it); tirl drops a finished row from the batch and its KV cache,
  ``generate`` keeps computing it until the whole batch is done. The two
  sides sample different tokens (different random streams), so their lengths
  agree only in distribution.

``generate`` is called with ``do_sample=True, temperature=1.0, top_p=1.0,
top_k=0`` (transformers' default ``top_k=50`` would change the distribution).

**The bound.** FLOPs per generated token = ``2 x P_lin`` (every weight of the
linear layers once, a multiply and an add; ``P_lin`` includes the tied LM
head, excludes the embedding lookup) ``+ 4 x layers x (heads x head_dim) x
ctx`` (the attention scores and the weighted sum over ``ctx`` cached
positions; ``ctx`` = the batch's mean context over the generated tokens).
FLOP/s is measured on this machine with the same threads: the linear layers
of one decode step (the model's own weight shapes, ``[B, in] @ [in, out]``
for each) in a loop, the batch ``B`` of the scenario. Bound tokens/s = FLOP/s
÷ FLOPs per token: what the matmuls alone would allow at that batch, with no
norms, rotary, softmax, sampling or Python. ``peak_gflop_s`` (one 1024 x 1024
matmul) is printed for scale.

Ratios are taken within a round (the sides run back to back), and reported
as the median and range over the rounds; on a loaded machine the absolute
tokens/s swing, the ratios much less. ``--profile`` adds the top operations
of tirl's decode loop (cProfile, by internal time) on ``turn1``.

Not covered: GPUs (the CPU path only), the HTTP server (``bench_generation.py``),
batching across requests that arrive while a batch runs (tirl's batcher
waits for the next batch; ``generate`` has no such notion).
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import torch  # noqa: E402

from tirl.cli import OneLineParser  # noqa: E402
from tirl.config import EnvConfig  # noqa: E402
from tirl.envs.registry import load_tasks  # noqa: E402
from tirl.inference.base import SamplingParams  # noqa: E402
from tirl.inference.hf import HFGenerator  # noqa: E402
from tirl.models.loading import Policy, load_policy  # noqa: E402
from tirl.types import Message, Role  # noqa: E402


@dataclass(frozen=True, slots=True)
class Scenario:
    """One batch of prompts of the main job's shape."""

    name: str
    prompts: list[list[int]]


@dataclass(frozen=True, slots=True)
class Side:
    """One timed call of one side: generated tokens and seconds."""

    tokens: int
    seconds: float

    @property
    def rate(self) -> float:
        """Generated tokens per second."""
        return self.tokens / self.seconds


def scenarios(policy: Policy, turn1: int = 64, later: int = 16) -> list[Scenario]:
    """``turn1``: first-turn tir-chain prompts; ``later``: contexts with 1-4 earlier tool turns (left-padded)."""
    tasks = load_tasks(EnvConfig(name="tir-chain"), max(turn1, later), seed=11)
    first = [policy.chat.prompt_ids([Message(role=Role.USER, content=t.prompt)]) for t in tasks[:turn1]]
    ctxs = []
    for i, t in enumerate(tasks[:later]):
        msgs = [Message(role=Role.USER, content=t.prompt)]
        for j in range(1 + i % 4):
            msgs += [
                Message(role=Role.ASSISTANT, content=f"```python\nprint({j} * {i + 3})\n```"),
                Message(role=Role.TOOL, content=str(j * (i + 3))),
            ]
        ctxs.append(policy.chat.prompt_ids(msgs))
    return [Scenario("turn1", first), Scenario("later", ctxs)]


def run_tirl(gen: HFGenerator, prompts: list[list[int]], max_new: int) -> Side:
    """Tirl's sampler on the batch (each row its own seed)."""
    params = [SamplingParams(max_new_tokens=max_new, temperature=1.0, seed=i) for i in range(len(prompts))]
    t0 = time.perf_counter()
    res = gen.generate_batch(prompts, params)
    return Side(sum(len(r.token_ids) for r in res), time.perf_counter() - t0)


def left_pad(prompts: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids [B, L] and attention mask [B, L]."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


@torch.inference_mode()
def run_generate(policy: Policy, prompts: list[list[int]], max_new: int, fixed: bool, pad: int) -> Side:
    """Transformers' ``model.generate`` on the same batch; tokens up to and including each row's first EOS."""
    ids, mask = left_pad(prompts, pad)
    eos = sorted(policy.chat.eos_ids)
    t0 = time.perf_counter()
    out = policy.model.generate(
        input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
        max_new_tokens=max_new, min_new_tokens=max_new if fixed else 0, eos_token_id=eos, pad_token_id=pad,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    new = out[:, ids.shape[1] :].tolist()
    tokens = 0
    for row in new:
        ends = [j for j, tok in enumerate(row) if tok in eos]
        tokens += ends[0] + 1 if ends else len(row)
    return Side(tokens, seconds)


def linear_shapes(model: torch.nn.Module) -> list[tuple[int, int]]:
    """(in, out) of every ``nn.Linear`` the decode step runs (the tied LM head included)."""
    return [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)]


def flops_per_token(model: torch.nn.Module, ctx: float) -> dict[str, float]:
    """Linear FLOPs (2 x weights), attention FLOPs (4 x layers x heads x head_dim x ctx), and their sum."""
    cfg = model.config  # type: ignore[union-attr]
    lin = 2.0 * sum(i * o for i, o in linear_shapes(model))
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    attn = 4.0 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * ctx
    return {"linear": lin, "attention": attn, "total": lin + attn}


@torch.inference_mode()
def matmul_flop_s(shapes: Sequence[tuple[int, int]], batch: int, seconds: float = 0.5) -> float:
    """FLOP/s of the decode step's matmuls ``[batch, in] @ [in, out]`` run back to back, on this machine."""
    xs = [torch.randn(batch, i) for i, _ in shapes]
    ws = [torch.randn(i, o) for i, o in shapes]
    flops = 2.0 * batch * sum(i * o for i, o in shapes)
    for x, w in zip(xs, ws, strict=True):  # warm-up
        x @ w
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds or n < 3:
        for x, w in zip(xs, ws, strict=True):
            x @ w
        n += 1
    return flops * n / elapsed


def peak_flop_s(size: int = 1024, reps: int = 5) -> float:
    """FLOP/s of a square fp32 matmul (for scale)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2.0 * size**3 * reps / (time.perf_counter() - t0)


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(policy: Policy, sc: Scenario, args: Any) -> dict[str, Any]:
    """Every regime of one scenario: rounds of tirl vs generate, ratios per round, and the bound."""
    pad = int(policy.tokenizer.pad_token_id or 0)
    unreachable = int(policy.model.config.vocab_size) + 1  # an EOS id no row can sample: fixed-length rows
    out: dict[str, Any] = {"batch": len(sc.prompts), "prompt_tokens": [min(map(len, sc.prompts)),
                                                                      max(map(len, sc.prompts))]}  # fmt: skip
    for regime in ("fixed", "eos"):
        eos = {unreachable} if regime == "fixed" else policy.chat.eos_ids
        gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=eos, threads=args.threads)
        fixed = regime == "fixed"
        run_tirl(gen, sc.prompts, args.max_new)  # warm-up, both sides
        run_generate(policy, sc.prompts, args.max_new, fixed, pad)
        rounds: list[tuple[Side, Side]] = []
        for r in range(args.repeats):
            if r % 2 == 0:
                t = run_tirl(gen, sc.prompts, args.max_new)
                g = run_generate(policy, sc.prompts, args.max_new, fixed, pad)
            else:
                g = run_generate(policy, sc.prompts, args.max_new, fixed, pad)
                t = run_tirl(gen, sc.prompts, args.max_new)
            rounds.append((t, g))
        out[regime] = {
            "tirl_tokens_per_s": _spread([t.rate for t, _ in rounds]),
            "generate_tokens_per_s": _spread([g.rate for _, g in rounds]),
            "tirl_over_generate": _spread([t.rate / g.rate for t, g in rounds]),
            "tokens": {"tirl": rounds[0][0].tokens, "generate": rounds[0][1].tokens},
        }
    # the fixed regime's mean context: the padded width (padding is attended over, then masked) + half the new
    ctx = max(len(p) for p in sc.prompts) + args.max_new / 2
    per_token = flops_per_token(policy.model, ctx)
    flop_s = [matmul_flop_s(linear_shapes(policy.model), len(sc.prompts)) for _ in range(3)]
    bound = statistics.median(flop_s) / per_token["total"]
    fixed_rates = [float(out["fixed"]["tirl_tokens_per_s"][k]) for k in ("median", "min", "max")]
    out["bound"] = {
        "flops_per_token": per_token,
        "mean_ctx": ctx,
        "matmul_gflop_s": _spread([f / 1e9 for f in flop_s]),
        "tokens_per_s": bound,
        "tirl_fixed_over_bound": _spread([r / bound for r in fixed_rates]),
    }
    return out


async def _episodes(gen: HFGenerator, policy: Policy, prompts: list[list[int]], args: Any) -> Side:
    """``prompts`` as episodes, ``--workers`` at a time: ``--turns`` turns each, a ``--tool-ms`` wait between."""
    sem = asyncio.Semaphore(args.workers)
    tool = [Message(role=Role.TOOL, content="42")]

    async def episode(i: int, ids: list[int]) -> int:
        n = 0
        async with sem:
            for turn in range(args.turns):
                res = await gen.generate(ids, SamplingParams(max_new_tokens=args.max_new, seed=1000 * i + turn))
                n += len(res.token_ids)
                ids = [*ids, *res.token_ids, *policy.chat.observation_ids(tool, res.token_ids)]
                if len(ids) + args.max_new > 512:  # the main job's generation.max_total_tokens
                    break
                await asyncio.sleep(args.tool_ms / 1000)  # the sandbox (modelled: a fixed wait)
        return n

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(episode(i, list(p)) for i, p in enumerate(prompts)))
    return Side(sum(counts), time.perf_counter() - t0)


@dataclass(slots=True)
class _Split:
    """CPU seconds, forward passes and positions of the prefill and the decode passes (a model spy)."""

    cpu_s: dict[str, float]
    forwards: dict[str, int]
    positions: dict[str, int]
    real: int = 0  # prefill positions that are not padding


def measure_episodes(policy: Policy, prompts: list[list[int]], args: Any) -> dict[str, Any]:
    """Multi-turn episodes through ``generate`` (the batcher): tokens/s and where the CPU time goes.

    Each forward pass is timed on its own thread's CPU clock (``time.thread_time``) and counted as prefill
    (a prompt: more than one position) or decode (one token per row).
    """
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, threads=args.threads)
    split = _Split({"prefill": 0.0, "decode": 0.0}, {"prefill": 0, "decode": 0}, {"prefill": 0, "decode": 0})
    real = policy.model.forward

    def spy(*a: Any, **kw: Any) -> Any:
        ids = kw["input_ids"]
        part = "prefill" if ids.shape[1] > 1 else "decode"
        t0 = time.thread_time()
        out = real(*a, **kw)
        split.cpu_s[part] += time.thread_time() - t0
        split.forwards[part] += 1
        split.positions[part] += ids.numel()
        split.real += int(kw["attention_mask"].sum()) if part == "prefill" else 0
        return out

    sides: list[Side] = []
    cpu: list[float] = []

    async def run() -> None:
        await _episodes(gen, policy, prompts[: args.workers], args)  # warm-up
        policy.model.forward = spy  # type: ignore[method-assign]
        try:
            for _ in range(args.repeats):
                c0 = time.process_time()
                sides.append(await _episodes(gen, policy, prompts, args))
                cpu.append(time.process_time() - c0)
        finally:
            del policy.model.forward
            await gen.close()

    asyncio.run(run())
    tokens = sum(s.tokens for s in sides)
    total = sum(cpu)
    return {
        "episodes": len(prompts),
        "workers": args.workers,
        "turns": args.turns,
        "tool_ms": args.tool_ms,
        "tokens_per_s": _spread([s.rate for s in sides]),
        "tokens_per_cpu_s": tokens / total,
        "cpu_share": {k: v / total for k, v in split.cpu_s.items()},
        "rows_per_decode_pass": split.positions["decode"] / max(split.forwards["decode"], 1),
        "prefill_padding_share": 1 - split.real / max(split.positions["prefill"], 1),
        "prefill_positions_per_token": split.real / max(tokens, 1),
    }


def profile(policy: Policy, sc: Scenario, args: Any, top: int = 15) -> str:
    """CProfile of one tirl batch (fixed regime), by internal time."""
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids={int(policy.model.config.vocab_size) + 1},
                      threads=args.threads)  # fmt: skip
    run_tirl(gen, sc.prompts, args.max_new)
    prof = cProfile.Profile()
    prof.enable()
    run_tirl(gen, sc.prompts, args.max_new)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the table (or ``--json``); bad arguments are one ``error:`` line, exit 2."""
    p = OneLineParser(prog="bench_sampling.py", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the result object only")
    p.add_argument("--repeats", type=int, default=5, help="rounds per regime (each: both sides, back to back)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of both sides (tirl's default: 1)")
    p.add_argument("--max-new", type=int, default=96, help="new tokens per row (the main job's max_new_tokens)")
    p.add_argument("--turn1", type=int, default=64, help="rows of the first-turn batch")
    p.add_argument("--later", type=int, default=16, help="rows of the later-turn batch")
    p.add_argument("--episodes", type=int, default=64, help="episodes of the multi-turn measurement (0: skip it)")
    p.add_argument("--workers", type=int, default=16, help="episodes at a time (the main job's rollout.run_workers)")
    p.add_argument("--turns", type=int, default=6, help="turns per episode (at most; 512 tokens in all)")
    p.add_argument("--tool-ms", type=float, default=20.0, help="the modelled sandbox wait between turns, ms")
    p.add_argument("--profile", action="store_true", help="print tirl's top operations on turn1 (stderr)")
    a = p.parse_args(argv)
    if a.episodes < 0 or a.tool_ms < 0:
        p.error("--episodes and --tool-ms must be >= 0")
    for name in ("repeats", "threads", "max_new", "turn1", "later", "workers", "turns"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} {getattr(a, name)}: use at least 1")
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    policy = load_policy(None, env="tir-chain", threads=a.threads)
    scs = scenarios(policy, a.turn1, a.later)
    res: dict[str, Any] = {
        "threads": a.threads,
        "max_new": a.max_new,
        "repeats": a.repeats,
        "params": sum(x.numel() for x in policy.model.parameters()),
        "peak_gflop_s": peak_flop_s() / 1e9,
        "scenarios": {sc.name: measure(policy, sc, a) for sc in scs},
    }
    if a.episodes:
        tasks = load_tasks(EnvConfig(name="tir-chain"), a.episodes, seed=12)
        firsts = [policy.chat.prompt_ids([Message(role=Role.USER, content=t.prompt)]) for t in tasks]
        res["episodes"] = measure_episodes(policy, firsts, a)
    if a.profile:
        print(profile(policy, scs[0], a), file=sys.stderr)
    print(json.dumps(res) if a.json else table(res))
    return 0


def table(res: dict[str, Any]) -> str:
    """The human-readable summary of the ``--json`` object."""
    lines = [f"{res['params']:,} parameters, {res['threads']} thread(s), {res['max_new']} new tokens per row, "
             f"{res['repeats']} rounds; peak matmul {res['peak_gflop_s']:.1f} GFLOP/s"]  # fmt: skip
    for name, sc in res["scenarios"].items():
        b = sc["bound"]
        lines.append(f"{name} (batch {sc['batch']}, prompts {sc['prompt_tokens'][0]}-{sc['prompt_tokens'][1]} tokens):"
                     f" bound {b['tokens_per_s']:.0f} tok/s at {b['matmul_gflop_s']['median']:.1f} GFLOP/s, "
                     f"{b['flops_per_token']['total'] / 1e6:.2f} MFLOP/token")  # fmt: skip
        for regime in ("fixed", "eos"):
            r = sc[regime]
            ratio = r["tirl_over_generate"]
            lines.append(f"  {regime:<5} tirl {r['tirl_tokens_per_s']['median']:.0f} tok/s, generate "
                         f"{r['generate_tokens_per_s']['median']:.0f} tok/s: tirl/generate {ratio['median']:.2f}x "
                         f"({ratio['min']:.2f}-{ratio['max']:.2f})")  # fmt: skip
        f = b["tirl_fixed_over_bound"]
        lines.append(f"  tirl (fixed) / bound {f['median']:.3f} ({f['min']:.3f}-{f['max']:.3f})")
    ep = res.get("episodes")
    if ep:
        lines.append(f"episodes ({ep['episodes']} x up to {ep['turns']} turns, {ep['workers']} at a time, "
                     f"{ep['tool_ms']:g} ms tool wait): {ep['tokens_per_s']['median']:.0f} tok/s, "
                     f"{ep['tokens_per_cpu_s']:.0f} per CPU s; CPU in prefill {ep['cpu_share']['prefill']:.0%}, "
                     f"decode {ep['cpu_share']['decode']:.0%}; {ep['rows_per_decode_pass']:.1f} rows per decode "
                     f"pass; prefill {ep['prefill_padding_share']:.0%} padding, "
                     f"{ep['prefill_positions_per_token']:.1f} prefilled positions per token")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
