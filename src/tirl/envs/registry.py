"""Environments by name: ``register_env``, ``make_env``, ``env_factory``, ``load_tasks``.

A registered *maker* is any callable that takes keyword arguments and
returns an :class:`~tirl.envs.base.Env` (usually the env class itself). It
may be given as an import string ``"pkg.mod:Name"``, imported on first use,
so registering costs nothing. A name that is not registered but looks like
an import string is imported directly, so ``make_env("mypkg.envs:MyEnv")``
works without registering.

The built-ins are ``tir-math``, ``swe-lite`` and ``tir-chain`` (chained computations,
run by the tir-math env). Each may also register a
*task source* (``tasks=``): ``source(env_config, n, seed) -> list[Task]``,
which :func:`load_tasks` uses (a task file when ``env.tasks_file`` is set —
for tir-math also verl/SkyRL parquet or JSONL — else the generator).

>>> sorted(list_envs())[:3]
['swe-lite', 'tir-chain', 'tir-math']
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tirl.config import EnvConfig
from tirl.envs.base import Env, Task
from tirl.envs.ood import wrap_ood
from tirl.errors import ConfigError, show_value
from tirl.parsing import ParseRules

EnvMaker = Callable[..., Env]
TaskSource = Callable[[EnvConfig, int, int], list[Task]]
RulesSource = Callable[[EnvConfig], ParseRules | None]  # the env's own action rule for a config (None: none)


@dataclass(slots=True)
class EnvSpec:
    """A registered environment: its maker and optional task source (objects or import strings)."""

    name: str
    maker: EnvMaker | str
    tasks: TaskSource | str | None = None
    rules: ParseRules | RulesSource | str | None = None  # its own action rule (filter.action_rule=auto)


_REGISTRY: dict[str, EnvSpec] = {}


def import_object(target: str, what: str) -> Any:
    """The object an import string ``'package.module:Name'`` names (``what`` words the error)."""
    module_name, sep, attr = target.partition(":")
    shown, module_shown = show_value(target), show_value(module_name)  # a 5000-character name is not echoed whole
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what} {shown} is not an import string — write it as 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        fix = "check the name"
        if missing and module_name.split(".")[0] == missing.split(".")[0]:  # the user's own module is not found
            fix += (
                ", and put the directory that holds it on PYTHONPATH (PYTHONPATH=DIR tirl ...; the `tirl` command "
                "does not search the current directory)"
            )
        why = exc if len(str(exc)) <= 200 else type(exc).__name__  # "No module named" repeats a long name
        raise ConfigError(f"{what} {shown}: cannot import module {module_shown} ({why}) — {fix}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(
                f"{what} {shown}: module {module_shown} has no {show_value(attr)} — check the name"
            ) from None
    if not callable(obj):
        raise ConfigError(f"{what} {shown} is not callable")
    return obj


def register_env(
    name: str,
    maker: EnvMaker | str,
    *,
    tasks: TaskSource | str | None = None,
    rules: ParseRules | RulesSource | str | None = None,
    override: bool = False,
) -> None:
    """Register ``maker`` (a callable or ``"pkg.mod:Name"``) under ``name``.

    ``rules``: the environment's own action rule (a :class:`~tirl.parsing.ParseRules`,
    or ``config -> ParseRules | None``), which ``filter.action_rule=auto`` uses.
    Raises ``ValueError`` if the name is taken, unless ``override``.
    """
    if not name or not name.strip():
        raise ValueError("an environment name must be non-empty")
    if name in _REGISTRY and not override:
        raise ValueError(f"environment {name!r} is already registered — pass override=True to replace it")
    if isinstance(maker, str) and ":" not in maker:
        raise ValueError(f"import string {maker!r} must look like 'package.module:Name'")
    _REGISTRY[name] = EnvSpec(name=name, maker=maker, tasks=tasks, rules=rules)


def unregister_env(name: str) -> None:
    """Remove ``name`` (no-op if absent)."""
    _REGISTRY.pop(name, None)


def list_envs() -> list[str]:
    """The registered names."""
    return list(_REGISTRY)


def get_spec(name: str) -> EnvSpec:
    """The spec of ``name``; an unregistered ``"pkg.mod:Name"`` is accepted as an ad-hoc spec."""
    spec = _REGISTRY.get(name)
    if spec is not None:
        return spec
    family, sep, variant = name.partition(":")
    if sep and family in _FAMILIES:  # skyrl-gym:gsm8k, verifiers:pkg.mod:load — one env of a family
        maker, tasks, rules = _FAMILIES[family]
        made = functools.partial(import_object(maker, "environment"), variant=variant)
        return EnvSpec(name=name, maker=made, tasks=tasks, rules=rules)
    if ":" in name:
        return EnvSpec(name=name, maker=name)
    known = ", ".join(sorted(_REGISTRY)) or "none"
    raise ConfigError(
        f"unknown environment {show_value(name)} (registered: {known}) — use one of them, "
        "register it with tirl.envs.register_env, or give an import string 'package.module:Factory'"
    )


def _maker(spec: EnvSpec) -> EnvMaker:
    if isinstance(spec.maker, str):
        spec.maker = import_object(spec.maker, "environment")
    return spec.maker  # type: ignore[return-value]


def _target(maker: EnvMaker) -> Any:
    """What ``maker`` builds: the class or function itself, under a ``functools.partial`` (a family's variant)."""
    return maker.func if isinstance(maker, functools.partial) else maker


def make_env(name: str, *, config: EnvConfig | None = None, rules: ParseRules | None = None, **kwargs: Any) -> Env:
    """Create one env instance: ``maker(**kwargs)``; ``config`` supplies ``max_turns`` unless given.

    Typical keyword arguments of the built-ins: ``sandbox`` (a shared
    :class:`~tirl.sandbox.base.Sandbox`), ``sandbox_config``, ``max_turns``.
    ``rules`` (the ``[filter]`` section's action rule) is passed to envs built
    on :class:`~tirl.envs.tool_env.ToolEnv` and to env classes with
    ``takes_rules = True`` (the adapters of :mod:`tirl.integrations`), so the
    env runs exactly what the void filter calls an action; another maker does not get it. With
    ``config.ood_rate > 0`` the env comes wrapped in :class:`~tirl.envs.ood.OodToolOutput`. Classes with
    ``takes_offer_tools = True`` (verifiers) get ``offer_tools=config.offer_tools`` unless registered with one.
    Classes with ``takes_reward_mode = True`` (swe-lite and the skyrl-gym adapter) get ``config.reward_mode``;
    for any other env a ``reward_mode`` other than ``"all"`` is a :class:`~tirl.errors.ConfigError`
    (:func:`check_reward_mode`).
    """
    spec = get_spec(name)
    if config is not None:
        kwargs.setdefault("max_turns", config.max_turns)
    maker = _maker(spec)
    target = _target(maker)
    if config is not None:
        _check_reward_mode(name, config, target)
        if getattr(target, "takes_reward_mode", False):
            kwargs.setdefault("reward_mode", config.reward_mode)  # swe-lite: env.reward_mode
    from tirl.envs.tool_env import ToolEnv  # here: it imports the sandbox, which `tirl filter` never needs

    takes_rules = isinstance(target, type) and (issubclass(target, ToolEnv) or getattr(target, "takes_rules", False))
    if rules is not None and takes_rules:
        kwargs.setdefault("rules", rules)
    fixed = maker.keywords if isinstance(maker, functools.partial) else {}
    if config is not None and getattr(target, "takes_offer_tools", False) and "offer_tools" not in fixed:
        kwargs.setdefault("offer_tools", config.offer_tools)  # verifiers: env.offer_tools (a registered partial wins)
    env = maker(**kwargs)
    if not isinstance(env, Env):
        raise ConfigError(
            f"environment {name!r}: the factory returned {type(env).__name__}, which lacks the Env methods "
            "(name, async reset/step/evaluate/close)"
        )
    if config is not None and config.ood_rate > 0:  # env.ood_rate: out-of-distribution tool output, every env
        return wrap_ood(env, rate=config.ood_rate, seed=config.seed)
    return env


def check_reward_mode(name: str, config: EnvConfig) -> None:
    """Refuse ``config.reward_mode`` other than ``"all"`` for an env whose maker does not take it.

    The default ``"all"`` is every env's, and imports nothing; another mode imports the maker to ask it.
    """
    if config.reward_mode != "all":
        _check_reward_mode(name, config, _target(_maker(get_spec(name))))


def _check_reward_mode(name: str, config: EnvConfig, target: Any) -> None:
    if config.reward_mode != "all" and not getattr(target, "takes_reward_mode", False):
        raise ConfigError(
            f"env.reward_mode={config.reward_mode!r} applies to swe-lite's test-judged reward, and env {name!r} "
            "has its own reward — leave env.reward_mode at 'all' (or use env.name=swe-lite)"
        )


def env_factory(
    name: str, *, config: EnvConfig | None = None, rules: ParseRules | None = None, **kwargs: Any
) -> Callable[[Task], Env]:
    """An ``EnvFactory`` for the rollout (``task -> fresh env``), checked once up front; see :func:`make_env`."""
    spec = get_spec(name)
    _maker(spec)  # import errors surface now, not in the middle of a rollout
    if config is not None:
        check_reward_mode(name, config)

    def factory(task: Task) -> Env:
        return make_env(name, config=config, rules=rules, **kwargs)

    return factory


def env_rules(config: EnvConfig) -> ParseRules | None:
    """The action rule ``config.name`` declares for itself (``None``: none; the ``[filter]`` fields apply)."""
    spec = get_spec(config.name)
    if spec.rules is None or isinstance(spec.rules, ParseRules):
        return spec.rules
    if isinstance(spec.rules, str):
        spec.rules = import_object(spec.rules, "action rule source")
    source: RulesSource = spec.rules  # type: ignore[assignment]
    return source(config)


def load_tasks(config: EnvConfig, n: int | None = None, *, seed: int | None = None) -> list[Task]:
    """The tasks of ``config.name``: from ``config.tasks_file`` when set, else the env's generator.

    ``n`` defaults to ``config.eval_size``; ``seed`` to ``config.seed``.
    """
    spec = get_spec(config.name)
    if spec.tasks is None:
        raise ConfigError(f"environment {show_value(config.name)} registers no task source — pass tasks explicitly")
    if isinstance(spec.tasks, str):
        spec.tasks = import_object(spec.tasks, "task source")
    source: TaskSource = spec.tasks  # type: ignore[assignment]
    return source(config, config.eval_size if n is None else n, config.seed if seed is None else seed)


#: ``FAMILY:NAME`` names (one env of an adapter family): maker, task source and rule source of the family.
_FAMILIES: dict[str, tuple[str, str, str]] = {
    "skyrl-gym": (
        "tirl.integrations.skyrl_gym:SkyRLGymEnv",
        "tirl.integrations.skyrl_gym:task_source",
        "tirl.integrations.skyrl_gym:action_rules",
    ),
    "verifiers": (
        "tirl.integrations.verifiers_env:VerifiersEnv",
        "tirl.integrations.verifiers_env:task_source",
        "tirl.integrations.verifiers_env:action_rules",
    ),
}

register_env("tir-math", "tirl.envs.tir_math:TirMathEnv", tasks="tirl.envs.tir_math:task_source")
register_env("swe-lite", "tirl.envs.swe_lite:SweLiteEnv", tasks="tirl.envs.swe_lite:task_source")
register_env("tir-chain", "tirl.envs.tir_math:TirMathEnv", tasks="tirl.envs.tasks.chain_gen:task_source")
_SKYRL = _FAMILIES["skyrl-gym"]
register_env("skyrl-gym", _SKYRL[0], tasks=_SKYRL[1], rules=_SKYRL[2])  # the env_class of each task row
