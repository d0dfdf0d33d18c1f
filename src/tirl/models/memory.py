"""Memory for large models: bf16 autocast, gradient checkpointing, LoRA (peft) with adapter-only saves.

Three independent options (config keys in ``[algo]``; all off by default):

* ``autocast = "bf16"`` — the trainer's forward passes run under
  ``torch.autocast(dtype=bfloat16)``: matmuls and activations in bf16, the
  weights, gradients and Adam state stay float32 (master weights), and the
  log-probs are computed from the logits cast back to float32. No loss
  scaling is needed for bf16 (its exponent range is float32's). This is the
  only mixed precision for training: bf16/fp16 *trainable* parameters
  (``model.dtype = "bfloat16"``) are refused by :func:`check_master_weights`
  and :func:`check_training_precision`, naming this key.
* ``gradient_checkpointing = true`` — each decoder layer keeps only its input
  and recomputes its activations in the backward pass
  (:func:`enable_checkpointing`; non-reentrant ``torch.utils.checkpoint``).
  Hugging Face checkpoints a layer only in training mode, while tirl scores
  and updates in eval mode (no dropout: the importance ratio must be exactly
  1 before the first step), so :func:`update_mode` puts the model in eval
  mode and sets ``training`` on the checkpointed layers alone (their
  children, e.g. attention dropout, stay in eval mode).
* ``lora_rank = r > 0`` — :func:`apply_lora` wraps the model with a peft
  LoRA adapter on the attention and MLP projections; only the adapter is
  trained (the optimiser holds state for it alone), a checkpoint's
  ``save_pretrained`` writes the adapter only (``adapter_config.json`` +
  ``adapter_model.safetensors``, a few MB), :func:`load_adapter_dir` loads
  such a directory over its base model, and :func:`export_merged` writes a
  standalone model with the adapter merged in (``tirl model merge``).

:func:`release_free_memory` returns the C heap's free pages to the OS
between the rollout and the update (glibc only; elsewhere a no-op).

Not covered: fp16 (needs loss scaling), 8/4-bit quantised bases (QLoRA),
LoRA on the embeddings, FSDP/ZeRO sharding, offloading. Under ``autocast``
the sampler (float32) and the trainer (bf16) compute slightly different
log-probs of the same ids; the ratio and TIS see that gap.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import ctypes.util
import functools
import json
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tirl.errors import ConfigError, InputError, SetupError
from tirl.models.precision import MASTER_WEIGHTS_FIX

DEFAULT_LORA_TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True, slots=True)
class LoraSpec:
    """A LoRA adapter: rank, scale (``alpha / rank``) and the module names it wraps."""

    rank: int = 16
    alpha: float = 32.0
    targets: tuple[str, ...] = DEFAULT_LORA_TARGETS


def _peft() -> Any:
    # peft still calls transformers' deprecated is_gradient_checkpointing; the warning is not the user's business
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)
    try:
        import peft
    except ImportError:
        raise SetupError(
            "LoRA needs the peft package: run `make install` (it installs the 'lora' extra) or "
            "`pip install 'tirl[lora]'`"
        ) from None
    return peft


def enable_checkpointing(model: Any) -> None:
    """Turn on per-layer activation (gradient) checkpointing, non-reentrant."""
    kwargs = {"use_reentrant": False}
    base = model.get_base_model() if is_lora(model) else model
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.x name
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if is_lora(model):  # the frozen embeddings give no grad-requiring input to the first checkpointed layer
        base.enable_input_require_grads()


def checkpointed_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The layers that checkpoint their forward pass (empty when checkpointing is off)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]


def update_mode(model: torch.nn.Module) -> None:
    """Eval mode everywhere except the ``training`` flag of checkpointed layers (so they recompute)."""
    model.eval()
    for layer in checkpointed_layers(model):
        layer.training = True  # only this module: its children (dropout, attention) stay in eval mode


@functools.cache
def _libc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc; None on other C libraries: musl, macOS, Windows)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def release_free_memory() -> bool:
    """Hand the C heap's free pages back to the OS (glibc ``malloc_trim(0)``); False where unavailable.

    PyTorch's CPU tensors live on the C heap. glibc keeps the pages of freed
    tensors below its (dynamic, up to 32 MB) mmap threshold, so without this
    the process's resident memory after an update still holds the update's
    activations while the next rollout allocates its own on top. The trainer
    calls this between the rollout and the update and after the update; it
    frees nothing that is in use (the next allocation faults fresh pages in).
    """
    trim = _libc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@contextlib.contextmanager
def autocast(device: torch.device | str, mode: str) -> Iterator[None]:
    """``torch.autocast`` to bfloat16 when ``mode == "bf16"``; nothing when ``"off"``."""
    if mode == "off":
        yield
        return
    if mode != "bf16":
        raise ValueError(f"autocast mode {mode!r}: use 'off' or 'bf16'")
    dev = torch.device(device)
    with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
        yield


def is_lora(model: Any) -> bool:
    """True for a peft-wrapped model."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def apply_lora(model: Any, spec: LoraSpec) -> Any:
    """Wrap ``model`` with a fresh LoRA adapter (base weights frozen; LoRA B starts at 0: same outputs)."""
    peft = _peft()
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in spec.targets if t in names]
    if not targets:
        raise SetupError(
            f"LoRA targets {list(spec.targets)} match no module of {type(model).__name__}; "
            "set algo.lora_targets to its projection names"
        )
    config = peft.LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=0.0, target_modules=targets)
    return peft.get_peft_model(model, config)


def check_master_weights(model: torch.nn.Module) -> None:
    """Refuse trainable parameters below float32: AdamW's updates would round away in bf16/fp16.

    tirl has no separate master copy of low-precision parameters: a bf16 weight that AdamW moves by
    ``lr = 1e-5`` stays where it was (bf16 keeps 8 significant bits), so only a fraction of the weights
    would ever change. Mixed precision is ``algo.autocast=bf16`` over float32 parameters. Frozen
    low-precision parameters (a bf16 base under a LoRA adapter, whose adapter peft keeps in float32)
    are allowed.
    """
    low = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.requires_grad and
                  p.dtype in (torch.bfloat16, torch.float16)})  # fmt: skip
    if low:
        raise ConfigError(
            f"config model.dtype={low[0]} is invalid for training: {low[0]} parameters have no float32 master "
            f"weights, so AdamW's small updates round away — {MASTER_WEIGHTS_FIX}"
        )


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the optimiser updates (all of them, or only the adapter's under LoRA)."""
    return [p for p in model.parameters() if p.requires_grad]


def is_adapter_dir(path: Path) -> bool:
    """A directory saved from a peft model (adapter only, no ``config.json`` of a full model)."""
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def adapter_base(path: Path) -> Path:
    """The base model directory an adapter directory was trained on (``base_model_name_or_path``)."""
    try:
        base = json.loads((path / ADAPTER_CONFIG).read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError) as exc:
        raise InputError(str(path / ADAPTER_CONFIG), None, f"cannot be read ({exc})", "re-save the adapter") from None
    if not isinstance(base, str) or not (Path(base) / "config.json").is_file():
        raise InputError(
            str(path / ADAPTER_CONFIG),
            None,
            f"names the base model {base!r}, which is not a local model directory",
            "set base_model_name_or_path to the directory of the model the adapter was trained on",
        )
    return Path(base)


def load_adapter_dir(base_model: Any, path: Path) -> Any:
    """``base_model`` with the adapter saved at ``path`` loaded over it (trainable, for resuming)."""
    return _peft().PeftModel.from_pretrained(base_model, str(path), is_trainable=True)


def merged_copy(model: Any) -> Any:
    """A plain model with the adapter folded into the weights (``model`` itself is left untouched)."""
    if not is_lora(model):
        return model
    return copy.deepcopy(model).merge_and_unload()


def export_merged(model: Any, tokenizer: Any, out: str | Path) -> Path:
    """Save a standalone model (adapter merged) and its tokenizer: loadable without peft."""
    path = Path(out)
    merged = merged_copy(model)
    merged.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def count(params: Sequence[torch.nn.Parameter]) -> int:
    """Number of elements in ``params``."""
    return sum(p.numel() for p in params)


def apply_memory_options(model: Any, algo: Any) -> Any:
    """``model`` prepared for training with ``algo``'s options (an :class:`~tirl.config.AlgoConfig`).

    ``algo.lora_rank > 0`` wraps it with a fresh adapter unless it already is a peft model (a resumed
    adapter checkpoint); ``algo.gradient_checkpointing`` turns checkpointing on. ``algo.autocast`` is
    applied by the updater, not here.
    """
    if algo.lora_rank > 0 and not is_lora(model):
        spec = LoraSpec(rank=algo.lora_rank, alpha=algo.lora_alpha, targets=tuple(algo.lora_targets))
        model = apply_lora(model, spec)
    if algo.gradient_checkpointing:
        enable_checkpointing(model)
    return model
