"""Wire a run from a :class:`~tirl.config.TirlConfig`: policy, generator, sandbox, env, runners, strategies, tasks.

Everything here is assembled from the other packages' public entry points
(``load_policy``, ``HFGenerator``, ``create_sandbox``, ``env_factory``,
``AgentLoop``, ``make_strategy``, ``load_tasks``); the trainer itself only
sees the resulting :class:`~tirl.rollout.base.RolloutStrategy`. There are two
strategies: the training one (sampling, with the pipeline trace) and the
evaluation one (greedy, one episode per task, at least
:data:`~tirl.rollout.evaluation.EVAL_CONCURRENCY` episodes in flight, no
trace) — one rollout path for both. Their env factories differ in the
out-of-distribution tool output: training's has ``env.ood_rate``, evaluation's
``env.eval_ood_rate`` (0 by default: the policy is measured on the clean env;
:func:`tirl.envs.ood.ood_factory` adds each one's, for both backends), and in the reward: evaluation's envs are
built with ``env.reward_mode="all"`` (:data:`EVALUATION_ENV`: a task is solved when every hidden test passes)
whatever training's reward is. The recipe that uses these parts is :mod:`tirl.trainer.run`.

Task sets: the evaluation (held-out) set is ``env.eval_size`` tasks generated
from the evaluation seed (``tirl.envs.seeds.EVAL_SEED_OFFSET + env.seed``), leaving out every
prompt of the built-in checkpoint's SFT demonstrations
(:func:`tirl.sft.demonstration_prompts`); the validation set, for tuning, is
as many tasks from ``VALIDATION_SEED_OFFSET + env.seed``, leaving out those
and the held-out prompts. Training tasks of step ``s`` come from seed
``env.seed * 1_000_003 + s``, and any training task whose prompt is in the
held-out or validation set is replaced, so the sets are disjoint by
construction, not only by seed. With ``env.tasks_file`` the first
``eval_size`` tasks are the evaluation set and training samples the rest; a
file with fewer than ``2 * eval_size`` tasks is halved (first half held out).

Weights after each update: ``generator=openai`` pushes them to the server
(``POST /v1/load_weights``, which ``tirl serve`` has; a server without it,
e.g. ``vllm serve``, keeps its weights, its policy lags and the TIS weights
correct the log-prob gap); ``generator=vllm`` loads them into the in-process
engine. ``generation.dtype`` (bfloat16, float16) makes the generator sample in that dtype while the
trainer stays float32: a refreshed low-precision copy for ``hf``, the engine's dtype for ``vllm``
(agreeing with ``model.vllm_dtype``, checked by the config). ``trainer.backend=ray`` puts the envs and
their sandboxes on Ray actors (:mod:`tirl.distributed.ray_backend`).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field, replace
from typing import Any

from tirl.config import TirlConfig
from tirl.envs.base import Task
from tirl.envs.seeds import eval_seed, validation_seed
from tirl.errors import ConfigError, SetupError
from tirl.filters import rules_from_config
from tirl.inference.base import AdapterSyncing, BusyMetered, Generator, SamplingParams, Versioned, WeightSyncing
from tirl.parsing import ParseRules
from tirl.rollout.base import EnvFactory, RolloutStrategy
from tirl.rollout.evaluation import eval_rollout_config

log = logging.getLogger(__name__)


def train_seed(env_seed: int, step: int) -> int:
    """The task-generation seed of training step ``step``."""
    return env_seed * 1_000_003 + step


def _draw_excluding(env: Any, n: int, seed: int, excluded: frozenset[str] | set[str]) -> list[Task]:
    """``n`` generated tasks of ``seed`` whose prompts are not in ``excluded`` (the generator's order kept)."""
    from tirl.envs.registry import load_tasks

    extra = 0
    while True:
        drawn = [t for t in load_tasks(env, n + extra, seed=seed) if t.prompt not in excluded]
        if len(drawn) >= n or extra > 4 * n + 64:
            return drawn[:n]
        extra += max(16, n - len(drawn))


@dataclass
class TaskSets:
    """Training tasks per step and the fixed held-out evaluation set (disjoint prompts)."""

    cfg: TirlConfig
    eval_tasks: list[Task] = field(default_factory=list)
    validation_tasks: list[Task] = field(default_factory=list)  # for tuning; empty with a task file or a small space
    _pool: list[Task] | None = None

    def __post_init__(self) -> None:
        from tirl.envs.registry import load_tasks

        env = self.cfg.env
        if env.tasks_file:
            everything = load_tasks(env, 1 << 30)
            k = min(env.eval_size, len(everything) // 2)  # a small file is halved: training never sees eval tasks
            if k < 1:
                raise ConfigError(f"env.tasks_file {env.tasks_file} holds {len(everything)} task — add tasks: "
                                  "at least one is held out for evaluation and one trains")  # fmt: skip
            if k < env.eval_size:
                log.warning("task file %s: %d tasks, first %d held out", env.tasks_file, len(everything), k)
            self.eval_tasks, self._pool = everything[:k], everything[k:]
        else:
            from tirl.sft import demonstration_prompts

            sft = demonstration_prompts(env.name, env.difficulty)  # the built-in checkpoint was fine-tuned on these
            self.eval_tasks = _draw_excluding(env, env.eval_size, eval_seed(env.seed), sft)
            held = sft | {t.prompt for t in self.eval_tasks}
            self.validation_tasks = _draw_excluding(env, env.eval_size, validation_seed(env.seed), held)
            distinct = list({t.prompt: t for t in self.eval_tasks}.values())
            exhausted = len(self.eval_tasks) < env.eval_size  # a finite dataset (a verifiers env's) ran out
            if exhausted or len(distinct) < 0.9 * len(self.eval_tasks):
                # A small task space (swe-lite has 33 planted bugs, the verifiers example 8 rows): the source
                # repeats itself or runs out, and an evaluation set of env.eval_size draws would hold every
                # task. Split the distinct tasks instead.
                k = max(1, len(distinct) // 2)
                self.eval_tasks, self._pool, self.validation_tasks = distinct[:k], distinct[k:], []
                log.warning(
                    "env %s has only %d distinct tasks: %d held out for evaluation, %d for training",
                    env.name,
                    len(distinct),
                    k,
                    len(distinct) - k,
                )
        self._eval_prompts = {t.prompt for t in self.eval_tasks} | {t.prompt for t in self.validation_tasks}
        self.split(env.eval_split)  # an empty validation split is a configuration error, found before any work

    def split(self, name: str, *, option: str = "env.eval_split") -> list[Task]:
        """The evaluation tasks of split ``name`` (``heldout`` or ``validation``).

        An empty split raises :class:`ConfigError` naming ``option`` (the config key, or ``tirl eval``'s ``--split``).
        """
        if name == "heldout":
            return self.eval_tasks
        if not self.validation_tasks:
            raise ConfigError(f"{option}={name} is empty for env {self.cfg.env.name} with this task source "
                              "(a task file or a small task space has no validation split): "
                              f"use {option}=heldout")  # fmt: skip
        return self.validation_tasks

    def train(self, step: int, n: int) -> list[Task]:
        """``n`` training tasks for ``step`` (deterministic; none of them in the evaluation set)."""
        from tirl.envs.registry import load_tasks

        seed = train_seed(self.cfg.env.seed, step)
        if self._pool is not None:
            return _epoch_draw(self._pool, self.cfg.env.seed, step, n)
        out: list[Task] = []
        extra = 0
        while len(out) < n and extra < 64:
            batch = load_tasks(self.cfg.env, n + extra, seed=seed)
            out = [t for t in batch if t.prompt not in self._eval_prompts][:n]
            extra += 8
        if len(out) < n:
            raise ConfigError("could not draw training tasks disjoint from the evaluation set — lower env.eval_size")
        return [
            Task(id=f"s{step}-{i}-{t.id}", prompt=t.prompt, answer=t.answer, kind=t.kind, data=t.data)
            for i, t in enumerate(out)
        ]


def _epoch_draw(pool: list[Task], env_seed: int, step: int, n: int) -> list[Task]:
    """``n`` tasks of ``pool`` for ``step``: per epoch one seeded shuffle of the pool, cut into steps of ``n``.

    A step never repeats a task while ``n <= len(pool)``, and a task is seen at most once per epoch (the
    ``len(pool) % n`` left over at an epoch's end wait for a later shuffle). A larger ``n`` takes whole shuffles.
    The draw depends only on ``(env_seed, step)``, so a resumed run draws the same tasks.
    """

    def shuffled(epoch: int) -> list[Task]:
        order = list(pool)
        random.Random(f"tirl-epoch-{env_seed}-{epoch}").shuffle(order)
        return order

    if n > len(pool):
        rounds = -(-n // len(pool))
        return [t for r in range(rounds) for t in shuffled(step * rounds + r)][:n]
    per_epoch = len(pool) // n
    epoch, slot = divmod(step, per_epoch)
    return shuffled(epoch)[slot * n : slot * n + n]


@dataclass
class RunParts:
    """The assembled components of a run; :meth:`close` releases them."""

    policy: Any  # tirl.models.loading.Policy
    generator: Generator
    sandbox: Any
    env_factory: EnvFactory  # training's envs (env.ood_rate)
    eval_env_factory: EnvFactory  # evaluation's envs (env.eval_ood_rate): every evaluation strategy uses these
    runner: Any  # AgentLoop (sampling)
    eval_runner: Any  # AgentLoop (greedy)
    strategy: RolloutStrategy
    eval_strategy: RolloutStrategy

    def set_policy_version(self, version: int) -> None:
        """Tell the generator which policy version its samples now come from (and sync its weights if it can)."""
        gen = self.generator
        from tirl.models.memory import is_lora, merged_copy

        if isinstance(gen, AdapterSyncing) and is_lora(self.policy.model):  # vLLM: the adapter alone
            gen.sync_adapter(self.policy.model, version)
        elif isinstance(gen, WeightSyncing):  # HTTP and vLLM generators: load the trainer's weights
            # a LoRA policy is sent with its adapter merged in
            gen.sync_weights(merged_copy(self.policy.model), self.policy.tokenizer, version)
        elif isinstance(gen, Versioned) and getattr(gen, "model", None) not in (None, self.policy.model):
            from tirl.inference.snapshot import sync_snapshot  # a snapshot or a generation.dtype copy

            sync_snapshot(gen, self.policy.model, version)
        elif isinstance(gen, Versioned):  # in-process generators share the trainer's model
            gen.policy_version = version

    async def close(self) -> None:
        """Close the strategies, generator and sandbox (each even if another fails)."""
        try:
            try:
                await self.strategy.close()
            finally:
                await self.eval_strategy.close()
        finally:
            try:
                await self.generator.close()
            finally:
                if self.sandbox is not None:
                    await self.sandbox.close()


def _hf_model(cfg: TirlConfig, model: Any) -> Any:
    """What the ``hf`` generator samples from: the trainer's own module, or a copy the trainer refreshes.

    A copy when generation overlaps the update (``rollout.max_staleness > 0``: a snapshot) or when
    ``generation.dtype`` is not float32 (a bf16/fp16 copy: the generator/trainer mismatch of vLLM vs FSDP).
    """
    import torch

    from tirl.inference.snapshot import generator_copy

    dtype = cfg.generation.dtype
    if cfg.rollout.max_staleness == 0 and dtype == "float32":
        return model
    return generator_copy(model, None if dtype == "float32" else getattr(torch, dtype))


def engine_dtype(cfg: TirlConfig) -> str:
    """The dtype the vLLM engine computes in: ``generation.dtype`` when not float32, else ``model.vllm_dtype``.

    (``model.vllm_dtype=auto`` is ``model.dtype``; the config refuses a ``generation.dtype`` it disagrees with.)
    """
    return cfg.model.generator_dtype if cfg.generation.dtype == "float32" else cfg.generation.dtype


def _generator(cfg: TirlConfig, policy: Any) -> Generator:
    m = cfg.model
    if m.generator == "hf":
        from tirl.inference.hf import HFGenerator

        return HFGenerator(
            _hf_model(cfg, policy.model),
            policy.tokenizer,
            eos_ids=policy.chat.eos_ids,
            seed=cfg.trainer.seed,
            max_context=cfg.generation.max_total_tokens,
            prefix_cache_mb=cfg.generation.prefix_cache_mb,
            continuous=cfg.generation.continuous_batching,
        )
    if m.generator == "openai":
        return _openai_generator(cfg, policy)
    if m.generator == "vllm":  # in-process vLLM on a GPU (the vllm extra)
        from tirl.inference.vllm import VLLMGenerator

        return VLLMGenerator(  # its own process; a LoRA checkpoint's engine loads the base (engine_model_dir)
            policy.path, eos_ids=policy.chat.eos_ids, seed=cfg.trainer.seed, dtype=engine_dtype(cfg),
            gpu_memory_utilization=m.vllm_gpu_memory_utilization, lora_rank=cfg.algo.lora_rank,
            max_model_len=m.vllm_max_model_len or cfg.generation.max_total_tokens,
        )  # fmt: skip
    raise ConfigError(f"config model.generator={m.generator!r} is not supported by `tirl train` — use hf or openai")


def _openai_generator(cfg: TirlConfig, policy: Any) -> Generator:
    """The OpenAI-compatible HTTP generator (token ids in/out via the completions endpoint)."""
    import importlib

    try:
        mod = importlib.import_module("tirl.inference.openai_http")
    except ImportError as exc:
        raise SetupError(f"generator=openai is not available in this build ({exc})") from None
    m = cfg.model
    gen: Generator = mod.OpenAIGenerator(
        base_url=m.base_url, model=m.model_id, api_key_env=m.api_key_env, eos_ids=policy.chat.eos_ids
    )
    return gen


def _runner(cfg: TirlConfig, generator: Generator, chat: Any, *, temperature: float, top_p: float) -> Any:
    from tirl.models.toolcalls import tools_for_env
    from tirl.rollout.agent_loop import AgentLoop

    g = cfg.generation
    return AgentLoop(
        generator=generator,
        chat=chat,
        params=SamplingParams(max_new_tokens=g.max_new_tokens, temperature=temperature, top_p=top_p),
        max_turns=cfg.env.max_turns,
        max_total_tokens=g.max_total_tokens,
        rules=rules_from_config(cfg.filter, cfg.env),
        tools=tools_for_env(cfg.env.name) if cfg.env.tools else (),  # the env's tools, offered as functions
        # per-turn sampling seeds from (trainer.seed, trajectory id, turn): a resumed step samples what the
        # uninterrupted run would have (the generator's own RNG restarts at trainer.seed on resume)
        seed=cfg.trainer.seed,
    )


#: the env settings every evaluation's envs are built with, whatever training's are: a task is solved when every
#: hidden test passes (``env.reward_mode=fraction`` is a training signal; accuracy stays all-pass)
EVALUATION_ENV: dict[str, Any] = {"reward_mode": "all"}


def _env_factories(cfg: TirlConfig, rules: ParseRules | None) -> tuple[Any, EnvFactory, EnvFactory]:
    """The sandbox (or Ray env pool) and the env factories of training and of evaluation (module docstring).

    Both backends build clean envs (``env.ood_rate`` 0: a Ray host does not know which purpose an env is for);
    the noise of each purpose is added here, by :func:`tirl.envs.ood.ood_factory`, at its own rate. Evaluation's
    envs get :data:`EVALUATION_ENV` (a Ray host is told per env); with the defaults both purposes share one factory.
    """
    from tirl.envs.ood import ood_factory
    from tirl.envs.registry import env_factory
    from tirl.sandbox import create_sandbox

    clean = replace(cfg.env, ood_rate=0.0)
    judged = {k: v for k, v in EVALUATION_ENV.items() if getattr(clean, k) != v}  # what evaluation's envs change
    holder: Any
    if cfg.trainer.backend == "ray":  # envs and their sandboxes on Ray actors; scheduling stays here
        from tirl.distributed.ray_backend import EnvRecipe, RayEnvPool

        recipe = EnvRecipe(cfg.env.name, clean, cfg.sandbox, kwargs={"rules": rules})  # make_env(rules=...)
        holder = RayEnvPool(recipe, address=cfg.trainer.ray_address)  # RunParts.close(): envs, sandboxes, actors
        make: EnvFactory = holder.make_env
        make_eval = holder.factory(**judged) if judged else make
    else:
        holder = create_sandbox(cfg.sandbox)
        make = env_factory(cfg.env.name, config=clean, sandbox=holder, rules=rules)
        make_eval = (
            env_factory(cfg.env.name, config=replace(clean, **judged), sandbox=holder, rules=rules) if judged else make
        )
    seed = cfg.env.seed
    return (
        holder,
        ood_factory(make, rate=cfg.env.ood_rate, seed=seed),
        ood_factory(make_eval, rate=cfg.env.eval_ood_rate, seed=seed),
    )


def build_parts(cfg: TirlConfig, *, model_path: str | None, trace_path: str | None) -> RunParts:
    """Load the policy from ``model_path`` (None: ``cfg.model.path`` or the built-in) and wire the rollout."""
    from tirl.rollout.strategies import make_strategy
    from tirl.trainer.learner import load_training_policy

    policy = load_training_policy(cfg, model_path, cfg.model.device)  # LoRA, gradient checkpointing applied
    generator = _generator(cfg, policy)
    rules = rules_from_config(cfg.filter, cfg.env)  # the env's own action rule (filter.action_rule=auto)
    sandbox, factory, eval_factory = _env_factories(cfg, rules)
    g = cfg.generation
    runner = _runner(cfg, generator, policy.chat, temperature=g.temperature, top_p=g.top_p)
    eval_runner = _runner(cfg, generator, policy.chat, temperature=0.0, top_p=1.0)
    busy = generator if isinstance(generator, BusyMetered) else None
    strategy = make_strategy(cfg.rollout, factory, runner, trace_path=trace_path, generator_busy=busy)
    eval_strategy = make_strategy(eval_rollout_config(cfg.rollout), eval_factory, eval_runner)
    return RunParts(
        policy=policy,
        generator=generator,
        sandbox=sandbox,
        env_factory=factory,
        eval_env_factory=eval_factory,
        runner=runner,
        eval_runner=eval_runner,
        strategy=strategy,
        eval_strategy=eval_strategy,
    )
