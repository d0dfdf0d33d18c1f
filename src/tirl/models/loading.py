"""Load a policy (model + tokenizer + chat format) from a local Hugging Face directory.

The built-in warm-started checkpoint (:func:`builtin_model_path`) and a user's
``--model PATH`` go through the same :func:`load_policy`.

Checked before anything heavy loads, each a one-line :class:`~tirl.errors.InputError`
naming what is missing and the fix: a directory without ``config.json``,
without tokenizer files, whose tokenizer has no chat template, or (when
``need_tools``) whose template does not render tools, tool calls and tool
results. Before that, :func:`tirl.models.vet.vet_model_dir` treats the directory as hostile input
(file sizes, strict JSON, config.json sizes against the memory available, safetensors headers against
the config); the chat template is rendered in Jinja's sandbox with size and time limits
(:mod:`tirl.models.safe_template`); anything transformers or the tokenizers library raises on the
directory's files is one :class:`~tirl.errors.InputError`.

Not covered: remote hub ids (only local directories are loaded, nothing is
downloaded), quantised checkpoints, models that are not causal LMs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from tirl.errors import ConfigError, InputError, SetupError
from tirl.models.builtin import (  # noqa: F401  (re-exported: the shipped models' names and rebuild commands)
    BUILTIN_MODELS,
    BUILTIN_SFT_COMMAND,
    BUILTIN_TOOL_MODELS,
    CHAIN_SFT_COMMAND,
    QWEN2_CHAIN_DIR,
    QWEN2_CHAIN_SFT_COMMAND,
    QWEN2_CHAIN_STAGE1,
    builtin_entry,
    builtin_model_path,
)
from tirl.models.chat_format import ChatFormat, chat_format_for
from tirl.models.memory import adapter_base, is_adapter_dir, load_adapter_dir
from tirl.models.safe_template import TemplateLimitError
from tirl.models.template import template_supports_tools
from tirl.models.vet import check_entries, read_json_file, safetensors_header, vet_model_dir

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_TEMPLATE_FIX = (
    "add a chat template: save chat_template.jinja next to the tokenizer (e.g. the one `tirl model init "
    "--out DIR` writes: tirl's ChatML template with Hermes tool calls), or set tokenizer.chat_template and "
    "save_pretrained"
)


@dataclass(slots=True)
class Policy:
    """A loaded policy: the torch module, its tokenizer and how to render turns to ids."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    chat: ChatFormat
    path: Path
    device: torch.device


def _check_dir(path: Path) -> None:
    if not path.exists():
        raise InputError(str(path), None, "does not exist", "give --model (--init) a local Hugging Face model dir")
    if not path.is_dir():
        raise InputError(str(path), None, "is not a directory", "give the directory that holds config.json")
    from tirl.trainer.run_files import CHECKPOINTS, step_dirs

    if (path / CHECKPOINTS).is_dir() and (path / "metrics.jsonl").exists():  # its config.json is tirl's own
        steps = [d for _, d in step_dirs(path) if d.is_dir()]
        newest = f"{steps[-1]}/model" if steps else f"{path}/checkpoints/step-N/model"
        raise InputError(
            str(path), None, "is a tirl run directory, not a model", f"give a checkpoint's model: {newest}"
        )
    if path.name == CHECKPOINTS and not (path / "config.json").exists():  # RUN/checkpoints: "has no config.json"
        steps = [d for _, d in step_dirs(path.parent) if (d / "model" / "config.json").is_file()]
        if steps:
            raise InputError(str(path), None, "is a run's checkpoints directory, not a model",
                             f"give a checkpoint's model: {steps[-1] / 'model'}")  # fmt: skip
    if not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():  # checkpoints/step-N
        raise InputError(str(path), None, "is a tirl checkpoint, not a model", f"give its model: {path / 'model'}")
    if not (path / "config.json").is_file():
        raise InputError(
            str(path),
            None,
            "has no config.json, so it is not a Hugging Face model directory",
            "save the model with save_pretrained(PATH) or give the directory that holds config.json",
        )


def check_model_files(path: str | Path) -> None:
    """The file checks :func:`load_policy` starts with (a directory, ``config.json``, tokenizer files).

    Loads nothing: ``tirl train --nproc N`` runs them before it starts ranks that would each fail on them. A LoRA
    adapter directory passes (its base model is checked where it loads).
    """
    p = Path(path).expanduser()
    if is_adapter_dir(p):
        return
    _check_dir(p)
    _check_tokenizer_files(p)


def _check_tokenizer_files(path: Path) -> None:
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise InputError(
            str(path),
            None,
            f"has no tokenizer (none of {', '.join(TOKENIZER_FILES)})",
            "save it next to the model with tokenizer.save_pretrained(DIR), or copy the tokenizer files of the "
            "model it was trained from",
        )


def check_chat_template(path: Path, tokenizer: PreTrainedTokenizerBase, *, need_tools: bool) -> None:
    """Raise :class:`InputError` when the tokenizer has no chat template, or (``need_tools``) one without tools."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        problem = "has no chat template (no chat_template.jinja, none in tokenizer_config.json)"
        raise InputError(str(path), None, problem, _TEMPLATE_FIX)
    if need_tools:
        support = template_supports_tools(tokenizer)
        if not support.ok:
            raise InputError(
                str(path),
                None,
                f"its chat template has no tool support: it does not render {'; '.join(support.missing)}",
                _TEMPLATE_FIX.replace("add a chat template", "use a template with tool support"),
            )


def _load_adapter(path: Path, *, device: str, dtype: str, need_tools: bool, train: bool) -> Policy:
    """The base model with the adapter at ``path``: merged in (inference), or kept as a trainable peft model.

    The adapter directory is hostile input too: its entries, ``adapter_config.json`` (size, strict JSON) and
    safetensors headers are checked first, and anything peft raises on it is one :class:`InputError`.
    """
    check_entries(path)
    read_json_file(path / "adapter_config.json")
    if not (path / "adapter_model.safetensors").is_file():  # else peft looks for it on the Hugging Face Hub
        raise InputError(str(path), None, "has adapter_config.json but no adapter_model.safetensors",
                         "copy the whole adapter directory that training saved (checkpoints/step-N/model)")  # fmt: skip
    for weights in sorted(path.glob("*.safetensors")):
        safetensors_header(weights)
    base = load_policy(adapter_base(path), device=device, dtype=dtype, need_tools=need_tools)
    try:
        model = load_adapter_dir(base.model, path)
    except Exception as exc:  # shapes that do not fit the base model, a damaged file: the directory's fault
        problem = f"the LoRA adapter could not be loaded ({type(exc).__name__}: {str(exc)[:300]})"
        raise InputError(str(path), None, problem, "use the adapter saved with this base model") from None
    if not train:
        model = model.merge_and_unload()
    model.eval()
    return replace(base, model=model, path=path)


def _from_pretrained(p: Path, auto: Any, what: str, fix: str, **kwargs: Any) -> Any:
    """``auto.from_pretrained(p, **kwargs)``; a file it cannot read is an :class:`InputError` naming ``what``.

    Any ``Exception`` counts: the directory is hostile input, and the tokenizers library, safetensors and
    transformers each raise their own types (``Exception`` from Rust, ``SafetensorError``, ``RuntimeError``).
    """
    try:
        return auto.from_pretrained(str(p), trust_remote_code=False, **kwargs)  # never the directory's code
    except Exception as exc:
        raise InputError(
            str(p), None, f"{what} could not be loaded ({type(exc).__name__}: {str(exc)[:300]})", fix
        ) from None


def check_device(device: str, flag: str = "model.device") -> torch.device:
    """The torch device ``device`` names, or :class:`ConfigError` when this process's torch cannot use it.

    ``flag`` is what the user set (``model.device``, or ``tirl serve``'s ``--device``); the message names it.
    Covered: a name torch does not parse, ``cuda``/``cuda:N`` without a visible GPU (a CPU-only build, no
    driver) or past the GPU count, ``mps`` where it is absent. Not covered: a GPU without enough free memory.
    """

    def given(value: str) -> str:
        return f"{flag} {value}" if flag.startswith("--") else f"{flag}={value}"

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{given(repr(device))} is not a torch device: use cpu, cuda, cuda:N or auto") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(
                f"{given(device)}: this torch ({torch.__version__}) sees no GPU here — use {given('cpu')}, or run "
                "on a machine with a CUDA build of torch and a driver"
            )
        if dev.index is not None and dev.index >= count:
            raise ConfigError(f"{given(device)}: torch sees {count} GPU(s) here — use cuda:0 to cuda:{count - 1}")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{given(device)}: MPS is not available here — use {given('cpu')}")
    return dev


def load_policy(
    path: str | Path | None = None,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    threads: int | None = None,
    need_tools: bool = False,
    train_adapter: bool = False,
    env: str | None = None,
) -> Policy:
    """Load a causal LM, its tokenizer and chat format; ``path=None`` loads the built-in model.

    ``threads`` sets ``torch.set_num_threads`` (process-wide) when given. ``need_tools``: the episodes
    render tool definitions and parse tool calls, so the checkpoint's template must support them.
    A LoRA adapter directory loads over its base model, merged (``train_adapter=True``: kept trainable).
    ``env``: with ``path=None``, load that env's built-in model (:func:`builtin_model_path`; with
    ``need_tools``, the env's tool-calling one where it has one).
    """
    if threads is not None:
        torch.set_num_threads(max(1, threads))
    dev = check_device(device)  # before any file is read: a GPU-less torch fails here, not in model.to()
    if path is None:
        p = builtin_model_path(env, tools=need_tools)
        if not (p / "config.json").is_file():
            command = builtin_entry(env, tools=need_tools)[1]
            raise SetupError(f"the built-in model is missing at {p} — rebuild it with `{command}`")
    else:
        p = Path(path).expanduser()
        if is_adapter_dir(p):  # a LoRA checkpoint: adapter weights over the base model it names
            return _load_adapter(p, device=device, dtype=dtype, need_tools=need_tools, train=train_adapter)
        check_model_files(p)
        vet_model_dir(p, dtype=dtype if dtype in _DTYPES else "float32", device=device)  # hostile files, sizes
    if dtype not in _DTYPES:
        raise InputError("model.dtype", None, f"unknown dtype {dtype!r}", f"use one of {', '.join(_DTYPES)}")
    tokenizer: PreTrainedTokenizerBase = _from_pretrained(
        p, AutoTokenizer, "the tokenizer", "save it with tokenizer.save_pretrained(PATH) next to the model"
    )
    if path is not None or need_tools:
        try:
            check_chat_template(p, tokenizer, need_tools=need_tools)
        except TemplateLimitError as exc:
            raise InputError(str(p), None, exc.problem, exc.fix) from None
    model: PreTrainedModel = _from_pretrained(
        p,
        AutoModelForCausalLM,
        "the model",
        "check that it is a causal LM saved with save_pretrained",
        dtype=_DTYPES[dtype],
    )
    model.to(dev)  # type: ignore[arg-type]
    model.eval()
    try:
        chat = chat_format_for(tokenizer)
    except TemplateLimitError as exc:  # the template is the directory's code: name the directory
        raise InputError(str(p), None, exc.problem, exc.fix) from None
    except SetupError as exc:  # a template tirl cannot split into turns
        raise InputError(str(p), None, str(exc), "use a prefix-stable chat template that renders content") from None
    return Policy(model=model, tokenizer=tokenizer, chat=chat, path=p, device=dev)
