"""The configuration's sections as dataclasses, each validating itself in ``__post_init__``.

Every section checks its keys' values (a ConfigError naming the key, the bad value and the fix) and the numeric
ranges of :data:`tirl.config_ranges.RANGES` at the end (:func:`~tirl.config_ranges.check_section`). Reading them
from TOML, ``--set`` text and saved configs is :mod:`tirl.config`'s, which re-exports every class here: import
them from ``tirl.config``. Not covered here: unknown keys, value text and types (the loader's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tirl.config_ranges import check_section
from tirl.errors import InvalidValue


def _check(cond: bool, key: str, value: Any, fix: str) -> None:
    if not cond:
        raise InvalidValue(key, value, fix)


@dataclass
class ModelConfig:
    """Which policy to train and where its tokens come from."""

    path: str | None = None  # a local Hugging Face directory; None = the built-in warm-started tiny model
    generator: Literal["hf", "openai", "vllm"] = "hf"
    base_url: str | None = None  # for generator=openai
    model_id: str | None = None  # served model name for generator=openai (default: ask /v1/models)
    api_key_env: str = "OPENAI_API_KEY"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # training: float32 (bf16: algo.autocast=bf16)
    device: str = "cpu"  # cpu | cuda | cuda:N | auto (cuda when torch sees a GPU, else cpu; resolved here)
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # generator=vllm; auto: model.dtype
    vllm_gpu_memory_utilization: float = 0.5  # generator=vllm: the engine's share of the GPU's memory
    vllm_max_model_len: int | None = None  # generator=vllm: context length; None: generation.max_total_tokens

    def __post_init__(self) -> None:
        _check(self.path is None or self.path.strip() != "", "model.path", self.path, "name a model directory")
        _check(self.generator != "openai" or bool(self.base_url), "model.base_url", self.base_url,
               "generator=openai needs a server, e.g. --base-url http://127.0.0.1:8000/v1")  # fmt: skip
        device = self.device.strip().lower()
        known = device in ("auto", "cpu", "cuda", "mps") or (device.startswith("cuda:") and device[5:].isdigit())
        _check(known, "model.device", self.device, "use cpu, cuda, cuda:N or auto (a visible GPU, else cpu)")
        if device == "auto":  # torch only here: the other devices need no import to validate
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        check_section("model", self)  # vllm_gpu_memory_utilization, vllm_max_model_len (tirl.config_ranges.RANGES)

    @property
    def generator_dtype(self) -> str:
        """The dtype vLLM's engine computes in: ``vllm_dtype``, or ``dtype`` for ``auto`` (same on both sides)."""
        return self.dtype if self.vllm_dtype == "auto" else self.vllm_dtype


@dataclass
class GenerationConfig:
    """Sampling and token caps of one episode."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96  # per assistant turn
    max_total_tokens: int = 512  # whole episode, prompt included
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # the generator's weights (hf: a refreshed copy)
    prefix_cache_mb: float = 1024.0  # hf: earlier turns' keys/values kept for the next turn (0: prefill it all)
    continuous_batching: bool = False  # hf: requests join a running batch's stragglers (SWE job: 0.96x, off)

    def __post_init__(self) -> None:
        _check(self.temperature >= 0, "generation.temperature", self.temperature, "use a value >= 0")
        _check(0 < self.top_p <= 1, "generation.top_p", self.top_p, "use a value in (0, 1]")
        _check(self.max_new_tokens > 0, "generation.max_new_tokens", self.max_new_tokens, "use a positive integer")
        check_section("generation", self)  # every numeric key in its range, before the rule between two keys
        _check(
            self.max_total_tokens > self.max_new_tokens,
            "generation.max_total_tokens",
            self.max_total_tokens,
            "must exceed generation.max_new_tokens",
        )


@dataclass
class EnvConfig:
    """The task environment."""

    name: str = "tir-chain"  # tir-chain (the main job: 3-6 tool turns) | tir-math | swe-lite | a registered name
    tasks_file: str | None = None  # parquet or JSONL of tasks (tirl, verl, SkyRL); None = the built-in generator
    prompt_key: str = "prompt"  # task files: dotted path of the chat prompt
    answer_key: str | None = None  # dotted path of the ground truth; None: reward_model.ground_truth,
    # then reward_spec.ground_truth, then answer
    difficulty: int = 1  # tir-math 1-5; swe-lite 1 planted bugs, 2 the curriculum, 3 its spec variant
    max_turns: int = 6  # tir-chain needs up to 6 (4 calls, a fixed error, the answer)
    eval_size: int = 200
    eval_split: Literal["heldout", "validation"] = "heldout"  # what the trainer evaluates: validation is for tuning
    seed: int = 0
    tools: bool = False  # offer the env's tools as functions (python; swe-lite: bash, submit); needs a tool template
    offer_tools: bool = True  # verifiers envs: describe the env's tools to the model (false: a template without tools)
    ood_rate: float = 0.0  # share of tool outputs replaced/extended by out-of-distribution text (tirl.envs.ood)
    eval_ood_rate: float = 0.0  # the same in evaluation (tirl eval, a run's before/after); 0: the clean env
    chain_min: int = 2  # tir-chain: fewest tool calls a task's chain needs (longer horizons: 4)
    chain_max: int = 4  # tir-chain: most calls (8 needs env.max_turns >= 10 and ~1024 total tokens)
    skyrl_host_code: bool = False  # skyrl-gym: run env classes tirl cannot sandbox (their code runs on this host)
    reward_mode: Literal["all", "fraction"] = "all"  # swe-lite's training reward: all hidden tests pass | their share

    def __post_init__(self) -> None:
        _check(self.max_turns >= 1, "env.max_turns", self.max_turns, "use at least 1")
        _check(1 <= self.difficulty <= 5, "env.difficulty", self.difficulty, "use a level from 1 to 5")
        _check(self.eval_size >= 1, "env.eval_size", self.eval_size, "use at least 1")
        _check(bool(self.prompt_key.strip()), "env.prompt_key", self.prompt_key, "name a field, e.g. prompt")
        check_section("env", self)  # every numeric key in its range (tirl.config_ranges.RANGES)
        _check(self.chain_max >= self.chain_min, "env.chain_max", self.chain_max, "use >= env.chain_min")


@dataclass
class SandboxConfig:
    """Where model-written code runs."""

    backend: Literal["auto", "bwrap", "process"] = "auto"
    timeout_s: float = 5.0
    memory_mb: int = 1024
    max_output_chars: int = 2000
    warm_pool: bool = True
    pool_size: int = 4

    def __post_init__(self) -> None:
        _check(self.timeout_s > 0, "sandbox.timeout_s", self.timeout_s, "use a positive number of seconds")
        _check(self.memory_mb >= 64, "sandbox.memory_mb", self.memory_mb, "use at least 64 MB")
        _check(self.max_output_chars >= 64, "sandbox.max_output_chars", self.max_output_chars, "use at least 64")
        _check(self.pool_size >= 1, "sandbox.pool_size", self.pool_size, "use at least 1")
        check_section("sandbox", self)  # every numeric key in its range (tirl.config_ranges.RANGES)


@dataclass
class FilterConfig:
    """Void-turn filtering (see ``tirl.parsing`` for the rule)."""

    mode: Literal["drop", "mask", "off", "penalize", "roc"] = "off"  # not separable yet on the tiny job (3-5 seeds);
    # the pre-registered ablation that decides the default: docs/training.md#ablation
    void_penalty: float = 1.0  # penalize: the fixed negative advantage on a void turn's own tokens
    exec_langs: list[str] = field(default_factory=lambda: ["python", "py", "python3", "bash", "sh", "shell"])
    boxed: bool = True
    answer_tags: bool = True
    action_tags: list[str] = field(default_factory=list)  # <NAME>...</NAME> acts (tag-based envs: sql, search)
    answer_markers: list[str] = field(default_factory=list)  # e.g. "####": the rest of the line answers
    action_rule: str = "auto"  # auto: the env's own rule, else these fields | fields | tir | gsm8k | search | sql
    min_valid_per_group: int = 2
    max_resample_rounds: int = 2

    def __post_init__(self) -> None:
        _check(bool(self.exec_langs) and all(len(lang.split()) == 1 for lang in self.exec_langs), "filter.exec_langs",
               self.exec_langs, "list at least one language, each one word (a fence's tag: python)")  # fmt: skip
        from tirl.parsing import ACTION_RULES  # the named rules live with the rule itself

        rules = ("auto", "fields", *ACTION_RULES)
        _check(self.action_rule in rules, "filter.action_rule", self.action_rule, f"use one of {', '.join(rules)}")
        _check(self.min_valid_per_group >= 1, "filter.min_valid_per_group", self.min_valid_per_group, "use >= 1")
        _check(self.max_resample_rounds >= 0, "filter.max_resample_rounds", self.max_resample_rounds, "use >= 0")
        _check(self.void_penalty >= 0, "filter.void_penalty", self.void_penalty, "use >= 0 (0: penalize acts as drop)")
        check_section("filter", self)  # every numeric key in its range (tirl.config_ranges.RANGES)


@dataclass
class AlgoConfig:
    """Advantage estimator and policy loss."""

    advantage: Literal["grpo", "rloo"] = "grpo"
    group_size: int = 8
    std_normalize: bool = True
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    loss_agg: Literal["token_mean", "seq_mean"] = "token_mean"
    kl_coef: float = 0.0
    kl_estimator: Literal["k1", "k2", "k3", "k3+"] = "k3"  # k3 is clamped to <= 10; k3+ = k3 value, k2 gradient
    tis_cap: float | None = 2.0  # truncated importance sampling cap for generator/trainer log-prob gaps
    lr: float = 5e-5  # at 1e-4 the built-in job drifted into void turns in 2 of 3 runs (see README)
    grad_clip: float = 1.0
    warmup_steps: int = 10  # linear LR warm-up over the first optimiser steps (0: off); a fresh Adam's first
    # steps are lr-sized in every coordinate whatever the gradient, which spiked the IS ratio to ~5 at step 1
    minibatches: int = 2
    epochs: int = 1
    micro_batch_tokens: int = 1024  # padded tokens per forward pass (bounds activation memory); 0 = whole mini-batch
    # 1024: on the CPU as fast as 2048 with about half the activation memory (docs/trainer.md, vs TRL)
    # memory for large models (tirl.models.memory; docs/models.md "Memory")
    autocast: Literal["off", "bf16"] = "off"  # bf16: forward passes under bf16 autocast, float32 master weights
    gradient_checkpointing: bool = False  # recompute each layer's activations in the backward pass
    lora_rank: int = 0  # > 0: train a LoRA adapter of this rank (peft) instead of all weights
    lora_alpha: float = 32.0  # LoRA scale is lora_alpha / lora_rank
    lora_targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )

    def __post_init__(self) -> None:
        _check(self.lora_rank >= 0, "algo.lora_rank", self.lora_rank, "use >= 0 (0 trains all weights)")
        _check(self.lora_alpha > 0, "algo.lora_alpha", self.lora_alpha, "use a positive scale")
        _check(bool(self.lora_targets), "algo.lora_targets", self.lora_targets, "list at least one module name")
        _check(self.group_size >= 2, "algo.group_size", self.group_size, "group-relative advantages need >= 2")
        _check(0 < self.clip_low < 1, "algo.clip_low", self.clip_low, "use a value in (0, 1)")
        _check(self.clip_high > 0, "algo.clip_high", self.clip_high, "use a positive value")
        _check(
            self.dual_clip is None or self.dual_clip > 1,
            "algo.dual_clip",
            self.dual_clip,
            "dual clip must be > 1 (typically 3), or unset it",
        )
        _check(self.kl_coef >= 0, "algo.kl_coef", self.kl_coef, "use >= 0 (0 disables the KL term)")
        _check(self.tis_cap is None or self.tis_cap >= 1, "algo.tis_cap", self.tis_cap, "use >= 1, or unset it")
        _check(self.lr > 0, "algo.lr", self.lr, "use a positive learning rate")
        _check(self.minibatches >= 1, "algo.minibatches", self.minibatches, "use >= 1")
        _check(self.warmup_steps >= 0, "algo.warmup_steps", self.warmup_steps, "use >= 0 (0 disables warm-up)")
        _check(self.micro_batch_tokens >= 0, "algo.micro_batch_tokens", self.micro_batch_tokens, "use >= 0")
        _check(self.epochs >= 1, "algo.epochs", self.epochs, "use >= 1")
        check_section("algo", self)  # every numeric key in its range (tirl.config_ranges.RANGES)


@dataclass
class RolloutConfig:
    """How rollouts are dispatched (see ``tirl.rollout``)."""

    strategy: Literal["pipeline", "async_batch", "sync_batch"] = "pipeline"
    init_workers: int = 4
    run_workers: int = 16
    eval_workers: int = 4
    run_queue_size: int = 32
    eval_queue_size: int = 32
    trace_interval_s: float = 0.25
    init_timeout_s: float = 60.0
    run_timeout_s: float = 600.0
    eval_timeout_s: float = 120.0
    retries: int = 1
    batch_size: int = 0  # sync_batch/async_batch: trajectories per batch (barrier between); 0 = run_workers
    max_staleness: int = 0  # asynchronous RL: train on rollouts at most this many policy versions old; 0 = on-policy

    def __post_init__(self) -> None:
        _check(self.batch_size >= 0, "rollout.batch_size", self.batch_size, "use >= 0 (0 = run_workers)")
        _check(
            self.max_staleness >= 0,
            "rollout.max_staleness",
            self.max_staleness,
            "use 0 (on-policy) or a small positive number of versions, e.g. 1",
        )
        for key in ("init_timeout_s", "run_timeout_s", "eval_timeout_s"):
            _check(getattr(self, key) > 0, f"rollout.{key}", getattr(self, key), "use a positive number of seconds")
        for key in ("init_workers", "run_workers", "eval_workers", "run_queue_size", "eval_queue_size"):
            value = getattr(self, key)
            _check(value >= 1, f"rollout.{key}", value, "use at least 1")
        _check(self.trace_interval_s > 0, "rollout.trace_interval_s", self.trace_interval_s, "use > 0")
        _check(self.retries >= 0, "rollout.retries", self.retries, "use >= 0")
        check_section("rollout", self)  # every numeric key in its range (tirl.config_ranges.RANGES)


@dataclass
class TrainerConfig:
    """The training loop."""

    steps: int = 25
    prompts_per_step: int = 8  # x algo.group_size 8: tir-chain 0.405 -> 1.000 in 25 steps; 16 doubled the step time
    seed: int = 0
    run_dir: str = "runs"
    run_name: str | None = None
    checkpoint_every: int = 5
    eval_before_after: bool = True
    eval_samples: int = 0  # > 0: also evaluate before/after with this many samples per task at the training temperature
    samples_per_step: int = 4
    backend: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    threads: int = 2
    wandb: Literal["off", "offline", "online"] = "off"  # a wandb sink beside TensorBoard (the wandb extra)
    wandb_project: str = "tirl"
    tolerate_failed_steps: int = 0  # steps whose every trajectory failed (set-up, sandbox, env) before the run stops
    kernels: Literal["native", "portable"] = "native"  # portable: CPU bytes that repeat (tirl.models.kernels)

    def __post_init__(self) -> None:
        _check(self.steps >= 1, "trainer.steps", self.steps, "use at least 1")
        _check(self.prompts_per_step >= 1, "trainer.prompts_per_step", self.prompts_per_step, "use at least 1")
        _check(self.checkpoint_every >= 1, "trainer.checkpoint_every", self.checkpoint_every, "use at least 1")
        check_section("trainer", self)  # every numeric key in its range (tolerate_failed_steps: 0 stops at the first)
        _check(self.eval_before_after or self.eval_samples == 0, "trainer.eval_samples", self.eval_samples,
               "it evaluates before and after training: set trainer.eval_before_after=true, or "
               "trainer.eval_samples=0")  # fmt: skip


@dataclass
class TirlConfig:
    """The whole configuration of a run."""

    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def __post_init__(self) -> None:  # generation.dtype needs an engine tirl runs: hf, or vllm agreeing with it
        m, dtype = self.model, self.generation.dtype
        engine = m.generator == "hf" or (m.generator == "vllm" and m.vllm_dtype in ("auto", dtype))
        fix = f"it disagrees with model.vllm_dtype={m.vllm_dtype}: set one of them, or both the same"
        if m.generator == "openai":
            fix = "a server samples in the dtype it was started with: leave generation.dtype=float32"
        _check(dtype == "float32" or engine, "generation.dtype", dtype, fix)


__all__ = [
    "AlgoConfig",
    "EnvConfig",
    "FilterConfig",
    "GenerationConfig",
    "ModelConfig",
    "RolloutConfig",
    "SandboxConfig",
    "TirlConfig",
    "TrainerConfig",
]
