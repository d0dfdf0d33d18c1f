"""skyrl-gym environments as tirl environments (``--env skyrl-gym`` or ``--env skyrl-gym:NAME``).

Tasks come from ``env.tasks_file`` in SkyRL's dataset format (JSONL or
parquet; read by :mod:`tirl.envs.tasks.files`)::

    {"prompt": [{"role": "user", "content": "..."}], "env_class": "gsm8k",
     "reward_spec": {"method": "rule", "ground_truth": "42"}, "extra_info": {...}, "data_source": "..."}

As in SkyRL's own dataset, every field except ``prompt`` and ``env_class`` is
handed to the environment as its ``extras``, with ``max_turns`` set to
``env.max_turns`` (SkyRL sets it from its generator's ``max_turns``).
``skyrl-gym:NAME`` uses environment ``NAME`` for every row and ignores
``env_class``. A row whose ``env_class`` is ``swe-lite`` (tirl's own env class,
looked up before skyrl-gym's registry, which has no SWE env) is read by
:func:`tirl.integrations.skyrl_swe.swe_row_task` and its episode runs in
tirl's :class:`~tirl.envs.swe_lite.SweLiteEnv` on the run's sandbox (real
workspace, hidden tests judged by :mod:`tirl.envs.scorer`); such rows need
no skyrl-gym installed. The held-out evaluation tasks are split from the file by the
trainer (:class:`tirl.trainer.wiring.TaskSets`: the first ``env.eval_size``,
or the first half of a small file).

An episode (:class:`SkyRLGymEnv`):

* ``reset`` builds the skyrl-gym env (``skyrl_gym.make(env_class,
  env_config=..., extras=...)``) and calls its ``init(prompt)``; ``step``
  calls its ``step(text)``. Both are synchronous in skyrl-gym and run in a
  worker thread (``asyncio.to_thread``), never on the event loop.
* Each assistant turn is first judged by the run's action rule (the one the
  void filter uses; :data:`RULES_BY_CLASS` gives each known env class its
  rule, e.g. ``####`` answers for ``gsm8k``). A void turn ends the episode
  (``void``) and is not passed to the skyrl-gym env, like tirl's own envs.
* The per-step rewards are kept (``StepResult.reward`` and
  ``evaluate().info["step_rewards"]``, which the pipeline stores in the
  trajectory's ``info["eval"]``); the episode's reward is their sum, and it is
  ``correct`` when a step scored 1.0 or more (skyrl-gym's full score). A step
  reward of ``None`` is 0; one that is not a number (a string, even ``"1"``)
  raises :class:`~tirl.envs.base.EnvError` naming the env class (the episode
  ends ``error``); a NaN or infinite one scores the episode 0 with
  ``eval_failure`` ``nonfinite_reward`` naming the env class and the turn, and is
  ``null`` in ``step_rewards`` (:class:`~tirl.envs.base.EvalResult` says why).
* Termination is inferred, since skyrl-gym only says ``done``: done on a turn
  the rule calls an answer → ``answered``; done at or after ``max_turns`` →
  ``max_turns`` (truncated); done on another action → ``submitted``; not done
  after ``max_turns`` turns → ``max_turns``.
* Where skyrl-gym would run the model's code on the host (``searchcode``'s
  python tool, ``lcb``'s reward), the env instance is changed to run it in the
  run's sandbox (:mod:`tirl.integrations.skyrl_code`, applied in ``reset``); a
  sandbox failure during a step raises :class:`~tirl.envs.base.EnvError`. An
  env class tirl does not know is refused (by :func:`task_source`, naming the
  row, and again in ``reset``) unless ``env.skyrl_host_code=true``, which
  :func:`task_source` records in each task's ``data["host_code"]``.
* A step that returns ``postprocessed_action`` is refused with
  :class:`~tirl.envs.base.EnvError` (the episode ends with ``error``): it
  rewrites the model's text, so the tokens trained on would not be the tokens
  sampled (token-in/token-out).

A ``swe-lite`` row's episode is :class:`~tirl.envs.swe_lite.SweLiteEnv`'s
(the bullets above are skyrl-gym's): ``SkyRLGymEnv`` forwards ``reset``,
``step``, ``evaluate`` and ``close`` to it unchanged.

Not covered: skyrl-gym's ``get_metrics``/``aggregate_metrics`` (not logged),
tool groups that need network services (search, a SQL database) unless the
user provides them, per-env ``env_config`` beyond a plain mapping,
multimodal prompts, and what :mod:`tirl.integrations.skyrl_code` lists
(``text2sql``'s SQL runs on the host's sqlite file).
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

from tirl.config import EnvConfig
from tirl.envs.base import (
    Env,
    EnvError,
    EpisodeOverError,
    EvalResult,
    StepResult,
    Task,
    check_evaluable,
    check_step,
    checked_result,
    reward_number,
    trainable,
)
from tirl.envs.common import SandboxLease
from tirl.envs.tasks.files import TaskRow
from tirl.errors import ConfigError, InputError, SetupError
from tirl.integrations.skyrl_code import SandboxedCode, host_code_fix, host_code_problem, sandbox_env, warn_host_code
from tirl.parsing import ACTION_RULES, DEFAULT_RULES, ActionKind, ParseRules, judge_message
from tirl.types import Message, Role, TerminationReason

__all__ = ["RULES_BY_CLASS", "TIRL_CLASSES", "SkyRLGymEnv", "action_rules", "forced_class", "task_source"]

#: tirl's own env classes a SkyRL-style row may name (resolved before skyrl-gym's registry).
TIRL_CLASSES = ("swe-lite",)

#: The action rule of each known skyrl-gym env class (a name of :data:`tirl.parsing.ACTION_RULES`).
RULES_BY_CLASS: dict[str, str] = {
    "gsm8k": "gsm8k",
    "gsm8k_multi_turn": "gsm8k",
    "text2sql": "sql",
    "search": "search",
    "aime": "tir",
    "swe-lite": "tir",  # tirl's swe-lite: fenced bash/python blocks act, as with --env swe-lite
}
_ROLES = {"user": Role.USER, "tool": Role.TOOL, "system": Role.SYSTEM, "assistant": Role.ASSISTANT}
_KIND = "skyrl-gym"


def _skyrl() -> Any:
    try:
        import skyrl_gym
    except ImportError as exc:
        raise SetupError(f"skyrl-gym is not installed ({exc}) — run `make install` or pip install skyrl-gym") from None
    return skyrl_gym


def forced_class(name: str) -> str | None:
    """``NAME`` of ``skyrl-gym:NAME`` (``None`` for plain ``skyrl-gym``)."""
    family, sep, rest = name.partition(":")
    if family != _KIND:
        raise ConfigError(f"environment {name!r} is not a skyrl-gym name — use skyrl-gym or skyrl-gym:NAME")
    if sep and not rest.strip():
        raise ConfigError(f"environment {name!r} names no skyrl-gym env — write e.g. skyrl-gym:gsm8k")
    return rest.strip() or None


def _check_class(env_class: Any, where: tuple[str, int | None, str], host_code: bool) -> str:
    if env_class in TIRL_CLASSES:  # tirl's own: no skyrl-gym needed
        return str(env_class)
    if env_class is None:
        raise InputError(where[0], where[1], f"{where[2]}the row has no env_class field",
                         'add "env_class": NAME to each row (SkyRL\'s dataset format), or force one env for every '
                         "row with env.name=skyrl-gym:NAME")  # fmt: skip
    registry = _skyrl().registry
    if not isinstance(env_class, str) or env_class not in registry:
        known = ", ".join(sorted([*registry, *TIRL_CLASSES]))
        raise InputError(where[0], where[1], f"{where[2]}env_class {env_class!r} is not a registered skyrl-gym env",
                         f"use one of {known}, or register yours with skyrl_gym.register")  # fmt: skip
    problem = host_code_problem(env_class, registry[env_class].entry_point)
    if problem is not None and not host_code:
        raise InputError(where[0], where[1], where[2] + problem, host_code_fix())
    return env_class


def task_source(config: EnvConfig, n: int, seed: int) -> list[Task]:
    """The first ``n`` rows of ``env.tasks_file`` as tasks (``seed`` unused: a file has one order)."""
    from tirl.envs.tasks.files import TaskFileSpec, iter_records, read_task_row

    forced = forced_class(config.name)
    if forced is not None and forced not in TIRL_CLASSES:
        registry = _skyrl().registry
        if forced not in registry:  # the name is wrong
            known = ", ".join(sorted([*registry, *TIRL_CLASSES]))
            raise ConfigError(f"env.name={config.name}: {forced!r} is not a registered skyrl-gym env — "
                              f"use one of {known}")  # fmt: skip
        problem = host_code_problem(forced, registry[forced].entry_point)
        if problem is not None and not config.skyrl_host_code:
            raise ConfigError(f"env.name={config.name}: {problem} — {host_code_fix()}")
    if not config.tasks_file:
        raise ConfigError(f"env.name={config.name} needs a task file in SkyRL's format — set env.tasks_file=PATH")
    path = Path(config.tasks_file)
    spec = TaskFileSpec(prompt_key=config.prompt_key, answer_key=config.answer_key)
    parquet = path.suffix.lower() in (".parquet", ".pq")
    tasks: list[Task] = []
    first: dict[str, int] = {}
    for number, record in iter_records(path):
        if len(tasks) >= n:
            break
        where = (str(path), None, f"row {number}: ") if parquet else (str(path), number, "")
        if not isinstance(record, dict):
            raise InputError(where[0], where[1], f"{where[2]}expected an object, got {type(record).__name__}",
                             "write one object per row")  # fmt: skip
        env_class = _check_class(forced or record.get("env_class"), where, config.skyrl_host_code)
        if env_class not in TIRL_CLASSES and config.reward_mode != "all":
            raise InputError(where[0], where[1], f"{where[2]}env.reward_mode={config.reward_mode!r} applies to "
                             f"swe-lite rows, and env_class {env_class!r} has its own reward",
                             "leave env.reward_mode at 'all', or give only swe-lite rows")  # fmt: skip
        if env_class in TIRL_CLASSES:
            from tirl.integrations.skyrl_swe import swe_row_task

            task = swe_row_task(record, spec, path, number)
        else:
            task = _gym_task(read_task_row(record, spec, path, number), record, env_class, config, where)
        if task.id in first:
            raise InputError(where[0], where[1], f"{where[2]}duplicate id {task.id!r} (first on row {first[task.id]})",
                             "give each task its own id")  # fmt: skip
        first[task.id] = number
        tasks.append(task)
    _warn_host_code({str(t.data["env_class"]) for t in tasks if t.data.get("host_code")})
    if not tasks:
        raise InputError(str(path), None, "no tasks in the file",
                         'add rows like {"prompt": [{"role": "user", "content": "..."}], "env_class": "gsm8k", '
                         '"reward_spec": {"method": "rule", "ground_truth": "42"}}')  # fmt: skip
    return tasks


def _warn_host_code(classes: set[str]) -> None:
    """The loud note for each env class that runs on the host because the user set ``env.skyrl_host_code``."""
    registry = _skyrl().registry if classes else {}
    for env_class in sorted(classes):
        if host_code_problem(env_class, registry[env_class].entry_point) is not None:
            warn_host_code(env_class)


def _gym_task(row: TaskRow, record: dict[str, Any], env_class: str, config: EnvConfig,
              where: tuple[str, int | None, str]) -> Task:  # fmt: skip
    """The task of a row for a skyrl-gym env: every field but the prompt and env_class goes to its ``extras``."""
    extras = {k: v for k, v in record.items() if k not in (config.prompt_key, "env_class")}
    try:
        json.dumps(extras)
    except (TypeError, ValueError):
        raise InputError(where[0], where[1], f"{where[2]}the row's fields are not plain JSON values",
                         "write strings, numbers, lists and objects") from None  # fmt: skip
    task = row.to_task(_KIND)
    data = {**task.data, "env_class": env_class, "extras": extras, "host_code": config.skyrl_host_code}
    return Task(id=task.id, prompt=task.prompt, answer=task.answer, kind=_KIND, data=data, messages=task.messages)


def action_rules(config: EnvConfig) -> ParseRules | None:
    """The rule of the run's env classes (``filter.action_rule=auto``); ``None`` when none is known.

    Several classes with different rules in one file are an error: the filter
    judges every trajectory of a run by one rule.
    """
    forced = forced_class(config.name)
    classes: set[str] = set()
    if forced is not None:
        classes.add(forced)
    elif config.tasks_file and Path(config.tasks_file).is_file():
        from tirl.envs.tasks.files import iter_records

        classes = {str(r.get("env_class")) for _, r in iter_records(config.tasks_file) if isinstance(r, dict)}
    names = {RULES_BY_CLASS.get(c) for c in classes}
    if len(names) > 1:
        raise ConfigError(
            f"env.tasks_file {config.tasks_file} mixes env classes with different action rules ({sorted(classes)}) — "
            "split the file per rule, or set filter.action_rule to one rule for all"
        )
    name = next(iter(names), None)
    return ACTION_RULES[name] if name is not None else None


def _message(item: Any, env_class: str) -> Message:
    role = item.get("role") if isinstance(item, dict) else None
    content = item.get("content") if isinstance(item, dict) else None
    if role not in _ROLES or not (content is None or isinstance(content, str)):
        raise EnvError(f"skyrl-gym env {env_class!r} returned a malformed message {str(item)[:120]!r}")
    return Message(role=_ROLES[role], content=content)


class SkyRLGymEnv:
    """One episode of a skyrl-gym environment (see the module docstring)."""

    name = _KIND
    takes_rules = True  # make_env passes the run's action rule (the void filter's)
    takes_reward_mode = True  # make_env passes env.reward_mode (swe-lite rows; task_source refuses it for others)

    def __init__(
        self,
        *,
        variant: str | None = None,
        max_turns: int = 4,
        rules: ParseRules = DEFAULT_RULES,
        env_config: dict[str, Any] | None = None,
        sandbox: Any = None,  # where the model's code runs (skyrl-gym's python tool, lcb's tests; swe-lite rows)
        sandbox_config: Any = None,
        reward_mode: str = "all",  # swe-lite rows' reward (SweLiteEnv.reward_mode)
        **_: Any,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.variant = variant
        self.max_turns = max_turns
        self.rules = rules
        self.env_config = dict(env_config or {})
        self._sandbox = (sandbox, sandbox_config)
        self.reward_mode = reward_mode
        self._lease = SandboxLease(sandbox, sandbox_config)  # skyrl-gym's code execution, routed here
        self._code: SandboxedCode | None = None
        self._tirl: Env | None = None  # the tirl env of a row whose env_class is tirl's own (swe-lite)
        self.step_rewards: list[float] = []
        self.answer: str | None = None
        self.env_class: str | None = None
        self._env: Any = None
        self._task: Task | None = None
        self._reason: TerminationReason | None = None
        self._closed = False

    @property
    def turns(self) -> int:
        """Assistant turns taken so far."""
        if self._tirl is not None:
            return int(getattr(self._tirl, "turns", 0))
        return len(self.step_rewards) + (1 if self._reason is TerminationReason.VOID else 0)

    def _make(self, env_class: str, extras: dict[str, Any]) -> Any:
        from omegaconf import DictConfig

        return _skyrl().make(env_class, env_config=DictConfig(self.env_config), extras=extras)

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """Build the skyrl-gym env of ``task`` and return its ``init`` chat (``seed`` unused)."""
        if self._closed or self._task is not None:
            raise EpisodeOverError("an env serves one episode: create a new env per episode")
        env_class = self.variant or task.data.get("env_class")
        if not isinstance(env_class, str):
            raise EnvError(f"task {task.id!r} names no skyrl-gym env_class — use skyrl-gym:NAME or a SkyRL task file")
        if env_class in TIRL_CLASSES:
            return await self._reset_tirl(task, env_class, seed)
        extras = copy.deepcopy(task.data.get("extras") or {})
        extras["max_turns"] = self.max_turns
        if task.answer is not None:
            extras.setdefault("reward_spec", {"method": "rule", "ground_truth": task.answer})
        self._task, self.env_class = task, env_class
        prompt = [m.to_dict() for m in task.messages] or [{"role": "user", "content": task.prompt}]
        self._env = await asyncio.to_thread(self._make, env_class, extras)
        self._code = SandboxedCode(self._lease, asyncio.get_running_loop())
        sandbox_env(self._env, self._code, env_class=env_class, allow_host=task.data.get("host_code") is True)
        chat, _ = await asyncio.to_thread(self._env.init, prompt)
        return [_message(item, env_class) for item in chat]

    async def _reset_tirl(self, task: Task, env_class: str, seed: int | None) -> list[Message]:
        """Start the episode in tirl's own env (``swe-lite``: :class:`~tirl.envs.swe_lite.SweLiteEnv`)."""
        from tirl.envs.swe_lite import SweLiteEnv

        self._task, self.env_class = task, env_class
        sandbox, sandbox_config = self._sandbox
        self._tirl = SweLiteEnv(sandbox=sandbox, sandbox_config=sandbox_config, max_turns=self.max_turns,
                                rules=self.rules, reward_mode=self.reward_mode)  # fmt: skip
        return await self._tirl.reset(task, seed=seed)

    def _end(self, reason: TerminationReason, obs: list[Message], reward: float, info: dict[str, Any]) -> StepResult:
        self._reason = reason
        info["reason"] = reason.value
        terminated = reason in (TerminationReason.ANSWERED, TerminationReason.SUBMITTED, TerminationReason.VOID)
        return StepResult(obs, reward=reward, terminated=terminated, truncated=not terminated, reason=reason, info=info)

    async def step(self, action: Message) -> StepResult:
        """Judge the turn by the run's rule; pass a non-void turn to skyrl-gym's ``step`` (in a thread)."""
        if self._tirl is not None:
            return await self._tirl.step(action)
        check_step(action, started=self._env is not None, ended=self._reason is not None, closed=self._closed)
        verdict = judge_message(action, self.rules)
        info: dict[str, Any] = {"turn": self.turns + 1, "action": verdict.kind.value, "env_class": self.env_class}
        if verdict.kind is ActionKind.VOID:
            return self._end(TerminationReason.VOID, [], 0.0, info)
        if verdict.answer is not None:
            self.answer = info["answer"] = verdict.answer
        out = await asyncio.to_thread(self._env.step, action.content or "")
        if self._code is not None and self._code.infra_error is not None:
            raise EnvError(f"skyrl-gym env {self.env_class!r}: tirl's sandbox failed running the model's code: "
                           f"{self._code.infra_error}")  # fmt: skip
        if out.get("postprocessed_action") is not None:
            raise EnvError(
                f"skyrl-gym env {self.env_class!r} returned postprocessed_action, which rewrites the model's output "
                "and breaks token-in/token-out — tirl refuses it; return the action unchanged (None)"
            )
        raw = out.get("reward")
        reward = 0.0 if raw is None else reward_number(raw, self._step_source())  # not a number: EnvError
        self.step_rewards.append(reward)
        info["reward"] = reward
        obs = [_message(item, str(self.env_class)) for item in out.get("observations") or []]
        if out.get("done"):
            if verdict.kind is ActionKind.ANSWER:
                return self._end(TerminationReason.ANSWERED, obs, reward, info)
            if self.turns >= self.max_turns:
                return self._end(TerminationReason.MAX_TURNS, obs, reward, info)
            return self._end(TerminationReason.SUBMITTED, obs, reward, info)
        if self.turns >= self.max_turns:
            return self._end(TerminationReason.MAX_TURNS, obs, reward, info)
        return StepResult(obs, reward=reward, info=info)

    async def evaluate(self) -> EvalResult:
        """The sum of the step rewards; ``correct`` when a step scored >= 1.0; the per-turn rewards in ``info``."""
        if self._tirl is not None:
            result = await self._tirl.evaluate()
            result.info.setdefault("env_class", self.env_class)
            return result
        task = check_evaluable(self._task, self._closed)
        rewards = list(self.step_rewards)
        info = {
            "env_class": self.env_class,
            "step_rewards": rewards,
            "answer": self.answer,
            "expected": task.answer,
            "reason": None if self._reason is None else self._reason.value,
            "turns": self.turns,
        }
        bad = [i + 1 for i, r in enumerate(rewards) if not trainable(r)]
        source = self._step_source() + (f" in turn {', '.join(map(str, bad))}" if bad else "")
        result = EvalResult(reward=float(sum(rewards)), correct=any(r >= 1.0 for r in rewards), info=info)
        return checked_result(result, source)

    def _step_source(self) -> str:
        """The function a step reward comes from, as an error names it."""
        return f"skyrl-gym env {self.env_class!r} step()"

    async def close(self) -> None:
        """Close the skyrl-gym env (in a thread); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._tirl is not None:
            await self._tirl.close()
        try:
            if self._env is not None:
                await asyncio.to_thread(self._env.close)
        finally:
            await self._lease.close()
