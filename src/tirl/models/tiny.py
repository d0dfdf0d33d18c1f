"""The built-in tiny policy: a small Llama-style causal LM over the character tokenizer.

About 0.8M parameters (4 layers, width 128), small enough that RL on two CPU
cores is fast, big enough to learn to copy numbers into a code block, read
the tool output and box it. It is saved with ``save_pretrained`` so that it
loads through exactly the path a user's checkpoint takes
(:func:`tirl.models.loading.load_policy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and transformers load when a model is built, not for TinyModelSpec (`tirl sft --help`)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase


@dataclass(frozen=True, slots=True)
class TinyModelSpec:
    """Shape of the built-in model."""

    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 4
    intermediate_size: int = 384
    max_positions: int = 1024


def tiny_config(vocab_size: int, tokenizer: PreTrainedTokenizerBase, spec: TinyModelSpec) -> LlamaConfig:
    """A ``LlamaConfig`` for the built-in model."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def build_tiny_model(
    spec: TinyModelSpec | None = None, *, seed: int = 0
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """A freshly initialised tiny model and its tokenizer (deterministic for a seed)."""
    import torch
    from transformers import LlamaForCausalLM

    from tirl.models.tokenizer import build_char_tokenizer

    spec = spec or TinyModelSpec()
    tokenizer = build_char_tokenizer()
    config = tiny_config(len(tokenizer), tokenizer, spec)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def save_policy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, out: str | Path) -> Path:
    """Save a model and tokenizer in the standard Hugging Face layout (safetensors)."""
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)  # type: ignore[operator]
    tokenizer.save_pretrained(path)
    return path


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())
