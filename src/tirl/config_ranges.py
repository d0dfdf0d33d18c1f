"""The range of every numeric config key: one table (:data:`RANGES`) that validation and the docs quote.

>>> RANGES["algo.group_size"].text()
'2..1024'
>>> check_range("algo.group_size", 100000)
Traceback (most recent call last):
...
tirl.errors.InvalidValue: config algo.group_size=100000 is invalid: use a value in 2..1024

Why bounds: a finite but absurd value (``trainer.threads=100000`` segfaulted torch, ``sandbox.pool_size=100000``
started sandbox servers without end, ``rollout.run_workers=1000000`` grew the process by 60 MB/s) must be
refused where the config is parsed, naming the key, the value and the range. Two upper bounds come from the
machine: ``trainer.threads`` (4 x ``os.cpu_count()``) and ``sandbox.pool_size`` (8 x the cores, at least 4:
each pool server is a process with its own interpreter); ``sandbox.memory_mb`` is capped at the machine's
physical memory (at least 1024). Every other bound is a stated constant, far above what any run of tirl
needs, and low enough that nothing it sizes (a queue, a worker pool, a token buffer) can exhaust the host.

Not covered: products of keys (``trainer.prompts_per_step x algo.group_size`` trajectories per step) are only
bounded through their factors; cross-key rules (``max_total_tokens > max_new_tokens``) live in each section's
``__post_init__``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from tirl.errors import ConfigError, InvalidValue


def _cores() -> int:
    return max(1, os.cpu_count() or 1)


def _ram_mb() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20)
    except (ValueError, OSError, AttributeError):  # not reported on this platform
        return 1024


@dataclass(frozen=True)
class Range:
    """A closed interval ``[lo, hi]`` (``lo_open``/``hi_open`` exclude an end); ``why`` explains a derived bound."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False
    why: str = ""

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the range (a NaN never does)."""
        if math.isnan(value):
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return above and below

    def text(self) -> str:
        """``1..8`` for a closed integer-style range, ``(0, 1]`` when an end is open."""
        if not (self.lo_open or self.hi_open):
            return f"{_num(self.lo)}..{_num(self.hi)}"
        return f"{'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.hi_open else ']'}"


def _num(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):_}" if abs(x) >= 10_000 else str(int(x))
    return repr(float(x))


_CORES = _cores()
_RAM_MB = max(_ram_mb(), 1024)
_DAY = 86_400.0
_SEED = 2**32 - 1  # numpy's and torch's seed range

RANGES: dict[str, Range] = {
    "model.vllm_gpu_memory_utilization": Range(0, 1, lo_open=True),  # the engine's share of the GPU's memory
    "model.vllm_max_model_len": Range(16, 16_777_216),
    "generation.temperature": Range(0, 100),
    "generation.top_p": Range(0, 1, lo_open=True),
    "generation.max_new_tokens": Range(1, 131_072),
    "generation.max_total_tokens": Range(2, 1_048_576),
    "generation.prefix_cache_mb": Range(0, 1_048_576),
    "env.difficulty": Range(1, 5),
    "env.max_turns": Range(1, 1000),
    "env.eval_size": Range(1, 1_000_000),
    "env.seed": Range(0, _SEED),
    "env.ood_rate": Range(0, 1),
    "env.eval_ood_rate": Range(0, 1),
    "env.chain_min": Range(1, 12),  # tir-chain tool calls per task (the dose ladder uses 4-8)
    "env.chain_max": Range(1, 12),
    "sandbox.timeout_s": Range(0, _DAY, lo_open=True),
    "sandbox.memory_mb": Range(64, _RAM_MB, why="the machine's physical memory in MB, at least 1024"),
    "sandbox.max_output_chars": Range(64, 10_000_000),
    "sandbox.pool_size": Range(1, max(4, 8 * _CORES), why="8 x the CPU cores, at least 4"),
    "filter.void_penalty": Range(0, 100),
    "filter.min_valid_per_group": Range(1, 1024),
    "filter.max_resample_rounds": Range(0, 100),
    "algo.group_size": Range(2, 1024),
    "algo.clip_low": Range(0, 1, lo_open=True, hi_open=True),
    "algo.clip_high": Range(0, 100, lo_open=True),
    "algo.dual_clip": Range(1, 1000, lo_open=True),
    "algo.kl_coef": Range(0, 1000),
    "algo.tis_cap": Range(1, 1_000_000),
    "algo.lr": Range(0, 1, lo_open=True),
    "algo.grad_clip": Range(0, 1_000_000),
    "algo.warmup_steps": Range(0, 10_000_000),
    "algo.minibatches": Range(1, 4096),
    "algo.epochs": Range(1, 100),
    "algo.micro_batch_tokens": Range(0, 16_777_216),
    "algo.lora_rank": Range(0, 65_536),
    "algo.lora_alpha": Range(0, 1_000_000, lo_open=True),
    "rollout.init_workers": Range(1, 256),
    "rollout.run_workers": Range(1, 1024),
    "rollout.eval_workers": Range(1, 256),
    "rollout.run_queue_size": Range(1, 4096),
    "rollout.eval_queue_size": Range(1, 4096),
    "rollout.trace_interval_s": Range(0, 31_536_000, lo_open=True),  # virtual-time benches trace once (1e6 s)
    "rollout.init_timeout_s": Range(0, _DAY, lo_open=True),
    "rollout.run_timeout_s": Range(0, _DAY, lo_open=True),
    "rollout.eval_timeout_s": Range(0, _DAY, lo_open=True),
    "rollout.retries": Range(0, 100),
    "rollout.batch_size": Range(0, 65_536),
    "rollout.max_staleness": Range(0, 1000),
    "trainer.steps": Range(1, 10_000_000),
    "trainer.prompts_per_step": Range(1, 65_536),
    "trainer.seed": Range(0, _SEED),
    "trainer.checkpoint_every": Range(1, 10_000_000),
    "trainer.samples_per_step": Range(0, 1024),
    "trainer.eval_samples": Range(0, 256),  # as tirl eval --samples (tirl.commands.evaluate.MAX_SAMPLES)
    "trainer.threads": Range(1, 4 * _CORES, why="4 x the CPU cores"),
    "trainer.tolerate_failed_steps": Range(0, 10_000_000),
}


def _advice(key: str, value: float) -> str | None:
    """``use a value in <range> (<why>)`` when ``value`` is outside ``key``'s range, else None."""
    bound = RANGES[key]
    if bound.contains(float(value)):
        return None
    why = f" ({bound.why}; this machine: {_CORES} cores, {_RAM_MB} MB)" if bound.why else ""
    return f"use a value in {bound.text()}{why}"


def check_range(key: str, value: float | None) -> None:
    """Raise :class:`~tirl.errors.InvalidValue` naming ``key``, ``value`` and the range when it is outside it.

    ``None`` (an unset optional key such as ``algo.dual_clip``) passes; a key missing from :data:`RANGES`
    is a programming error (KeyError), so a new numeric key cannot go unbounded silently.
    """
    advice = None if value is None else _advice(key, value)
    if advice is not None:
        raise InvalidValue(key, value, advice)


def check_flag(flag: str, key: str, value: float | None) -> None:
    """:func:`check_range` for a command-line flag that sets what config ``key`` sets (the error names ``flag``).

    ``tirl serve --threads`` and ``tirl sft --threads`` are ``trainer.threads`` under another name: the same
    bound, so ``--threads 100000`` is one error line there too, not a torch crash.
    """
    advice = None if value is None else _advice(key, value)
    if advice is not None:
        raise ConfigError(f"{flag} {value} is invalid: {advice}")


def check_section(section: str, obj: object) -> None:
    """Check every field of one config section (``section`` is its name) that :data:`RANGES` bounds."""
    prefix = f"{section}."
    for key in RANGES:
        if key.startswith(prefix):
            check_range(key, getattr(obj, key[len(prefix) :]))


def ranges_markdown() -> str:
    """The table docs/configuration.md quotes (``tests/test_config_ranges.py`` keeps them equal)."""
    rows = ["| key | range |", "|---|---|"]
    for key, bound in RANGES.items():
        shown = f"{_num(bound.lo)}..{bound.why}" if bound.why else bound.text()
        rows.append(f"| `{key}` | {shown} |")
    return "\n".join(rows)
