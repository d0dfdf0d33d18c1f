r"""Checks of a run's config that need no model weights: run before anything heavy loads.

``tirl train`` and ``tirl eval`` call :func:`preflight` right after the
config is resolved, so a set-up mistake is one ``error:`` line in about a
second instead of a run that loads the model, starts the sandbox and then
fails every episode. It checks:

* the environment name (:func:`tirl.envs.registry.get_spec`: a typo'd name is
  an error naming the registered ones) — this part imports no torch — and that
  ``env.reward_mode`` other than ``all`` names an env with a test-judged reward (swe-lite);
* tools the environment offers the model (``env.tools`` for tirl's own envs;
  a verifiers ``ToolEnv``'s tools unless ``env.offer_tools=false``) against
  the model's chat format: the built-in tiny models' format renders no tool
  definitions, and a model directory's template must render tools, tool calls
  and tool results. A mismatch is a :class:`~tirl.errors.ConfigError` naming
  the env, the model and the ``--set`` that fixes it. Only the tokenizer is
  read, never the weights.

:func:`check_saved_trust` refuses a run directory's ``config.json`` (``--resume``, ``tirl eval --model RUN``)
that chooses code to import or where a credential goes, unless the command line repeats the key.

:func:`answer_format_warning` compares the answer format the task file's
prompts ask for (``####`` after the answer, ``\boxed{}``, ``<answer>``) with
the run's action rule and names the rule to use; :func:`greedy_warning` says what training at
``generation.temperature=0`` does (it is allowed: exact-resume tests train greedily), and
:func:`start_warnings` is every warning ``tirl train`` prints at its start; :func:`run_label` names runs
and evaluation lines after the task file when there is one. :func:`anchor_paths` makes a new run's local
paths absolute, so its saved config resumes from any working directory.

Not covered: tools a custom (import-string) env renders itself, remote
(``--generator openai``) servers' own templates, and prompts that state an
answer format in words only ("give the number at the end").
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from tirl.config import ModelConfig, ResolvedConfig, TirlConfig
from tirl.errors import ConfigError, InputError, show_value
from tirl.parsing import ANSWER_FORMATS

#: How many task-file rows :func:`answer_format_warning` reads.
SAMPLE_ROWS = 64


def trusted_keys(cfg: TirlConfig) -> dict[str, str]:
    """The keys of ``cfg`` that name code to import or where a credential is sent, with their values.

    ``env.name`` when it is an import string or a verifiers env (``pkg.mod:Factory``, ``verifiers:...``:
    the module is imported and called; a registered name or ``skyrl-gym:ID`` is not), and with
    ``generator=openai`` the server (``model.base_url``) and the variable whose value goes to it as the
    key (``model.api_key_env``, when not the default); ``trainer.ray_address`` with ``backend=ray``.
    """
    from tirl.envs.registry import list_envs

    out: dict[str, str] = {}
    name = cfg.env.name
    if ":" in name and name not in list_envs() and not name.startswith("skyrl-gym:"):
        out["env.name"] = name
    if cfg.model.generator == "openai":
        if cfg.model.base_url:
            out["model.base_url"] = cfg.model.base_url
        if cfg.model.api_key_env != ModelConfig.api_key_env:
            out["model.api_key_env"] = cfg.model.api_key_env
    if cfg.trainer.backend == "ray" and cfg.trainer.ray_address:
        out["trainer.ray_address"] = cfg.trainer.ray_address
    return out


def check_saved_trust(resolved: ResolvedConfig, saved: Path) -> None:
    """Refuse :func:`trusted_keys` whose value came from the run directory's ``saved`` config, not the command line.

    Whoever can write a run directory can edit its ``config.json``: ``env.name=verifiers:pkg.mod:load`` imported
    ``pkg.mod`` on ``tirl train --resume`` (any module on ``sys.path``), and ``model.api_key_env`` with
    ``model.base_url`` sent any environment variable of the user to any server. Such a key is taken only
    when the command line gives it (``--set KEY=VALUE``, the same value is fine). :class:`InputError`.
    """
    taken = {k: v for k, v in trusted_keys(resolved.config).items() if resolved.sources.get(k) == "saved"}
    if not taken:
        return
    named = ", ".join(f"{k}={show_value(v)}" for k, v in taken.items())
    sets = " ".join(f"--set {shlex.quote(f'{k}={v}')}" for k, v in taken.items())
    raise InputError(
        str(saved),
        None,
        f"chooses code to import or where a credential goes ({named}); a run directory's config is not trusted "
        "with that",
        f"if the run is yours and the value is right, give it on the command line: {sets}",
    )


def run_label(cfg: TirlConfig) -> str:
    """What the run trains on: the task file's name (``gsm8k-train``) when there is one, else the env's name."""
    if cfg.env.tasks_file:
        return Path(cfg.env.tasks_file).name.split(".")[0] or cfg.env.name
    return cfg.env.name


def offered_tools(cfg: TirlConfig) -> tuple[str, ...]:
    """The names of the functions the run's episodes describe to the model (empty: none)."""
    if cfg.env.tools:
        from tirl.models.toolcalls import tools_for_env

        return tuple(t["function"]["name"] for t in tools_for_env(cfg.env.name))
    family, _, variant = cfg.env.name.partition(":")
    if family == "verifiers" and cfg.env.offer_tools:
        from tirl.integrations.verifiers_env import load_vf_env

        defs = getattr(load_vf_env(variant), "tool_defs", None) or []
        return tuple(str(d.name) for d in defs)
    return ()


def _tool_fix(cfg: TirlConfig) -> str:
    if cfg.env.tools:
        return "or --set env.tools=false (the env's fenced-code actions need no tool template)"
    return "or --set env.offer_tools=false (the model is not told the env's tools; it calls them by name)"


def model_tool_problem(path: str | None, env: str | None = None) -> str | None:
    """Why the model at ``path`` (None: ``env``'s built-in one) cannot render tool definitions; None when it can."""
    if path is None:
        from tirl.models.builtin import BUILTIN_TOOL_MODELS

        if env in BUILTIN_TOOL_MODELS:
            return None  # the env's tool-calling warm start (qwen2-chain: a Hermes tool template)
        return "the built-in model's chat format has no tool support (its prompts carry no tool definitions)"
    p = Path(path).expanduser()
    if not (p / "config.json").is_file() and not (p / "tokenizer_config.json").is_file():
        return None  # not a model directory: load_policy says so with its own fix
    from transformers import AutoTokenizer

    from tirl.models.chat_format import SimpleChatFormat, chat_format_for
    from tirl.models.memory import adapter_base, is_adapter_dir
    from tirl.models.template import template_supports_tools

    if is_adapter_dir(p):
        p = Path(adapter_base(p))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(p), trust_remote_code=False)
    except (OSError, ValueError):
        return None  # load_policy reports an unreadable tokenizer with its fix
    if isinstance(chat_format_for(tokenizer), SimpleChatFormat):
        return f"{p} uses tirl's built-in chat format, which has no tool support"
    if not getattr(tokenizer, "chat_template", None):
        return None  # load_policy reports a missing template with its fix
    support = template_supports_tools(tokenizer)
    if support.ok:
        return None
    return f"the chat template of {p} has no tool support: it does not render {'; '.join(support.missing)}"


def check_tools(cfg: TirlConfig, model_path: str | None = None) -> None:
    """Raise :class:`ConfigError` when the env offers tools that the model's chat format cannot describe."""
    tools = offered_tools(cfg)
    if not tools:
        return
    problem = model_tool_problem(model_path if model_path is not None else cfg.model.path, cfg.env.name)
    if problem is None:
        return
    raise ConfigError(
        f"env {cfg.env.name} offers the model {len(tools)} tool(s) ({', '.join(tools[:5])}), but {problem} — "
        "give a model whose template renders tools (--model DIR; `tirl model init --out DIR` makes one), "
        + _tool_fix(cfg)
    )


def preflight(cfg: TirlConfig, *, model_path: str | None = None) -> None:
    """Every check above that can fail (an unknown env, tools the model cannot render), and the device.

    The device is checked when the model loads in this process (``trainer.backend=local``); Ray's workers
    check their own (:func:`tirl.models.loading.check_device`, in ``load_policy``).
    """
    from tirl.envs.registry import check_reward_mode, get_spec

    get_spec(cfg.env.name)
    check_reward_mode(cfg.env.name, cfg.env)  # env.reward_mode=fraction on an env with its own reward
    check_tools(cfg, model_path)
    if cfg.trainer.backend == "local" and cfg.model.device != "cpu":
        from tirl.models.loading import check_device

        check_device(cfg.model.device)


def anchor_paths(cfg: TirlConfig) -> TirlConfig:
    """``model.path`` and ``env.tasks_file`` made absolute when they are relative and exist from here.

    A run's ``config.json`` is what ``--resume`` (and every ``--nproc`` rank) rebuilds the run from; a relative
    path in it would name another file, or none, from another working directory. A value that names no local
    path (a hub id, a typo that :func:`preflight` or the loader reports) is kept as given.
    """

    def anchored(value: str | None) -> str | None:
        if value is None or Path(value).is_absolute() or not Path(value).exists():
            return value
        return str(Path(value).absolute())

    model = dataclasses.replace(cfg.model, path=anchored(cfg.model.path))
    env = dataclasses.replace(cfg.env, tasks_file=anchored(cfg.env.tasks_file))
    return dataclasses.replace(cfg, model=model, env=env)


def answer_format_warning(cfg: TirlConfig) -> str | None:
    """A warning when the task file's prompts ask for an answer format the action rule does not count."""
    if not cfg.env.tasks_file or not Path(cfg.env.tasks_file).is_file():
        return None
    from tirl.envs.tasks.files import TaskFileSpec, read_task_rows
    from tirl.errors import TirlError
    from tirl.filters.void_turn import rules_from_config

    try:
        spec = TaskFileSpec(prompt_key=cfg.env.prompt_key, answer_key=cfg.env.answer_key)
        rows = read_task_rows(cfg.env.tasks_file, spec, n=SAMPLE_ROWS)
        rules = rules_from_config(cfg.filter, cfg.env)
    except TirlError:
        return None  # the run itself reports a bad file or rule with its fix
    texts = [" ".join(m.content or "" for m in r.messages) for r in rows]
    for fmt in ANSWER_FORMATS:
        asking = sum(1 for t in texts if fmt.pattern.search(t))
        if asking * 2 < len(texts) or fmt.counted_by(rules):
            continue
        return (
            f"{asking} of the first {len(texts)} prompts of {cfg.env.tasks_file} ask for answers as {fmt.name}, "
            f"but the action rule (filter.action_rule={cfg.filter.action_rule}) does not count that as an answer, "
            f"so those turns are void — use --set filter.action_rule={fmt.rule}"
        )
    return None


def context_warning(cfg: TirlConfig) -> str | None:
    """A warning when ``generation.max_total_tokens`` exceeds the model's positions (the generator stops there).

    Reads the model directory's ``config.json`` (``model.path``, else the env's built-in model); a directory
    it cannot read gives no warning (loading the model reports it with its fix).
    """
    import json

    from tirl.models.builtin import builtin_model_path

    path = Path(cfg.model.path).expanduser() if cfg.model.path else builtin_model_path(cfg.env.name, cfg.env.tools)
    try:
        positions = json.loads((path / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    cap = cfg.generation.max_total_tokens
    if not isinstance(positions, int) or positions >= cap:
        return None
    return (
        f"generation.max_total_tokens={cap} exceeds the {positions} positions of the model at {path}: the "
        f"generator ends every episode at {positions} tokens (overlong) — give a model with more positions, "
        f"or --set generation.max_total_tokens={positions}"
    )


def greedy_warning(cfg: TirlConfig) -> str | None:
    """A warning when training samples greedily (``generation.temperature=0``): a group holds one episode repeated.

    Not refused: a deterministic run is what an exact-resume test needs. Not covered: a temperature so low
    (``1e-6``) that sampling is greedy in all but name.
    """
    if cfg.generation.temperature > 0:
        return None
    return (
        f"generation.temperature=0 samples greedily: the {cfg.algo.group_size} samples of a task are one episode "
        f"repeated, so every {cfg.algo.advantage} advantage is 0 and nothing is learned, and the importance "
        "ratios are of softmax(logits), not of the argmax that chose the tokens — use --set "
        "generation.temperature=1.0 (0 suits only a deterministic test run)"
    )


def start_warnings(cfg: TirlConfig) -> list[str]:
    """The ``warning:`` lines ``tirl train`` prints before it loads anything: each check above that has one."""
    return [w for w in (answer_format_warning(cfg), context_warning(cfg), greedy_warning(cfg)) if w]
