"""skyrl-gym environments as tirl environments (``--env skyrl-gym`` or ``--env skyrl-gym:NAME``).

Tasks come from ``env.tasks_file`` in SkyRL's dataset format (JSONL or
parquet; read by :mod:`tirl.envs.tasks.files`)::

    {"prompt": [{"role": "user", "content": "..."}], "env_class": "gsm8k",
     "reward_spec": {"method": "rule", "ground_truth": "42"}, "extra_info": {...}, "data_source": "..."}

As in SkyRL's own dataset, every field except ``prompt`` and ``env_class`` is
handed to the environment as its ``extras``, with ``max_turns`` set to
``env.max_turns`` (SkyRL sets it from its generator's ``max_turns``).
``skyrl-gym:NAME`` uses environment ``NAME`` for every row and ignores
``env_class``. The held-out evaluation tasks are split from the file by the
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
  ``correct`` when a step scored 1.0 or more (skyrl-gym's full score).
* Termination is inferred, since skyrl-gym only says ``done``: done on a turn
  the rule calls an answer → ``answered``; done at or after ``max_turns`` →
  ``max_turns`` (truncated); done on another action → ``submitted``; not done
  after ``max_turns`` turns → ``max_turns``.
* A step that returns ``postprocessed_action`` is refused with
  :class:`~tirl.envs.base.EnvError` (the episode ends with ``error``): it
  rewrites the model's text, so the tokens trained on would not be the tokens
  sampled (token-in/token-out).

Not covered: skyrl-gym's ``get_metrics``/``aggregate_metrics`` (not logged),
tool groups that need network services (search, a SQL database) unless the
user provides them, per-env ``env_config`` beyond a plain mapping, and
multimodal prompts.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

from tirl.config import EnvConfig
from tirl.envs.base import EnvError, EpisodeOverError, EvalResult, StepResult, Task, check_evaluable, check_step
from tirl.errors import ConfigError, InputError, SetupError
from tirl.parsing import ACTION_RULES, DEFAULT_RULES, ActionKind, ParseRules, judge_message
from tirl.types import Message, Role, TerminationReason

__all__ = ["RULES_BY_CLASS", "SkyRLGymEnv", "action_rules", "forced_class", "task_source"]

#: The action rule of each known skyrl-gym env class (a name of :data:`tirl.parsing.ACTION_RULES`).
RULES_BY_CLASS: dict[str, str] = {
    "gsm8k": "gsm8k",
    "gsm8k_multi_turn": "gsm8k",
    "text2sql": "sql",
    "search": "search",
    "aime": "tir",
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


def _check_class(env_class: Any, where: tuple[str, int | None, str]) -> str:
    registry = _skyrl().registry
    if env_class is None:
        raise InputError(where[0], where[1], f"{where[2]}the row has no env_class field",
                         'add "env_class": NAME to each row (SkyRL\'s dataset format), or force one env for every '
                         "row with env.name=skyrl-gym:NAME")  # fmt: skip
    if not isinstance(env_class, str) or env_class not in registry:
        known = ", ".join(sorted(registry))
        raise InputError(where[0], where[1], f"{where[2]}env_class {env_class!r} is not a registered skyrl-gym env",
                         f"use one of {known}, or register yours with skyrl_gym.register")  # fmt: skip
    return env_class


def task_source(config: EnvConfig, n: int, seed: int) -> list[Task]:
    """The first ``n`` rows of ``env.tasks_file`` as tasks (``seed`` unused: a file has one order)."""
    from tirl.envs.tasks.files import TaskFileSpec, iter_records, read_task_rows

    forced = forced_class(config.name)
    if forced is not None and forced not in _skyrl().registry:  # the name, not the task file, is wrong
        known = ", ".join(sorted(_skyrl().registry))
        raise ConfigError(f"env.name={config.name}: {forced!r} is not a registered skyrl-gym env — use one of {known}")
    if not config.tasks_file:
        raise ConfigError(f"env.name={config.name} needs a task file in SkyRL's format — set env.tasks_file=PATH")
    path = Path(config.tasks_file)
    spec = TaskFileSpec(prompt_key=config.prompt_key, answer_key=config.answer_key)
    rows = read_task_rows(path, spec, n=n)  # validates prompt and ground truth, names file/row on errors
    parquet = path.suffix.lower() in (".parquet", ".pq")
    tasks: list[Task] = []
    for row, (number, record) in zip(rows, iter_records(path), strict=False):
        where = (str(path), None, f"row {number}: ") if parquet else (str(path), number, "")
        env_class = _check_class(forced or record.get("env_class"), where)
        extras = {k: v for k, v in record.items() if k not in (config.prompt_key, "env_class")}
        try:
            json.dumps(extras)
        except (TypeError, ValueError):
            raise InputError(where[0], where[1], f"{where[2]}the row's fields are not plain JSON values",
                             "write strings, numbers, lists and objects") from None  # fmt: skip
        task = row.to_task(_KIND)
        data = {**task.data, "env_class": env_class, "extras": extras}
        tasks.append(Task(id=task.id, prompt=task.prompt, answer=task.answer, kind=_KIND, data=data,
                          messages=task.messages))  # fmt: skip
    return tasks


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

    def __init__(
        self,
        *,
        variant: str | None = None,
        max_turns: int = 4,
        rules: ParseRules = DEFAULT_RULES,
        env_config: dict[str, Any] | None = None,
        **_: Any,  # sandbox, sandbox_config: skyrl-gym envs run their own tools
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.variant = variant
        self.max_turns = max_turns
        self.rules = rules
        self.env_config = dict(env_config or {})
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
        extras = copy.deepcopy(task.data.get("extras") or {})
        extras["max_turns"] = self.max_turns
        if task.answer is not None:
            extras.setdefault("reward_spec", {"method": "rule", "ground_truth": task.answer})
        self._task, self.env_class = task, env_class
        prompt = [m.to_dict() for m in task.messages] or [{"role": "user", "content": task.prompt}]
        self._env = await asyncio.to_thread(self._make, env_class, extras)
        chat, _ = await asyncio.to_thread(self._env.init, prompt)
        return [_message(item, env_class) for item in chat]

    def _end(self, reason: TerminationReason, obs: list[Message], reward: float, info: dict[str, Any]) -> StepResult:
        self._reason = reason
        info["reason"] = reason.value
        terminated = reason in (TerminationReason.ANSWERED, TerminationReason.SUBMITTED, TerminationReason.VOID)
        return StepResult(obs, reward=reward, terminated=terminated, truncated=not terminated, reason=reason, info=info)

    async def step(self, action: Message) -> StepResult:
        """Judge the turn by the run's rule; pass a non-void turn to skyrl-gym's ``step`` (in a thread)."""
        check_step(action, started=self._env is not None, ended=self._reason is not None, closed=self._closed)
        verdict = judge_message(action, self.rules)
        info: dict[str, Any] = {"turn": self.turns + 1, "action": verdict.kind.value, "env_class": self.env_class}
        if verdict.kind is ActionKind.VOID:
            return self._end(TerminationReason.VOID, [], 0.0, info)
        if verdict.answer is not None:
            self.answer = info["answer"] = verdict.answer
        out = await asyncio.to_thread(self._env.step, action.content or "")
        if out.get("postprocessed_action") is not None:
            raise EnvError(
                f"skyrl-gym env {self.env_class!r} returned postprocessed_action, which rewrites the model's output "
                "and breaks token-in/token-out — tirl refuses it; return the action unchanged (None)"
            )
        reward = float(out.get("reward") or 0.0)
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
        return EvalResult(reward=float(sum(rewards)), correct=any(r >= 1.0 for r in rewards), info=info)

    async def close(self) -> None:
        """Close the skyrl-gym env (in a thread); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._env is not None:
            await asyncio.to_thread(self._env.close)
