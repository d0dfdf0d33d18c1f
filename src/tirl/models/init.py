r"""``tirl model init``: a small random-weight Qwen2 or Llama model with a real BPE tokenizer and chat template.

What it writes (the standard Hugging Face layout, loadable by ``AutoConfig``,
``AutoTokenizer`` and ``AutoModelForCausalLM`` with nothing downloaded):

* ``config.json`` / ``model.safetensors`` / ``generation_config.json`` — a
  ``Qwen2ForCausalLM`` or ``LlamaForCausalLM`` with random weights
  (``torch.manual_seed(seed)``, so the same flags give the same weights);
* ``tokenizer.json`` / ``tokenizer_config.json`` / ``chat_template.jinja`` —
  a byte-level BPE tokenizer trained here with ``tokenizers`` on a built-in
  corpus (:func:`builtin_corpus`: generated English, arithmetic, Python and
  tool-call text; deterministic; ``corpus="tasks"``: tirl's task generators and
  expert episodes, :mod:`tirl.models.corpus`; ``split_digits``: Qwen2's
  pre-tokenizer, one token per digit), with the ChatML specials ``<|endoftext|>``,
  ``<|im_start|>``, ``<|im_end|>`` and the tool markers as added tokens, and
  tirl's chat template (:mod:`tirl.models.template`).

Sizes: with no flags the model is tiny (2 layers, width 64, 1024 tokens:
about 0.2M parameters) so that a training step on a CPU takes well under a
second; ``layers``/``hidden``/``vocab`` make it larger (e.g. 8 layers, width
768, 8192 tokens: about 63M parameters). When the corpus yields fewer tokens
than ``vocab``, the embedding still has ``vocab`` rows (as real checkpoints
pad theirs).

Not covered: pretrained weights (the model is random: it emits noise until
trained), architectures other than Qwen2 and Llama, tokenizers trained on
user data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch, tokenizers and transformers load in the builders: `tirl model --help` stays fast
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

from tirl.errors import ConfigError, OutputError
from tirl.fileio import check_output_dir, staged_dir
from tirl.models.corpus import CORPORA, corpus_lines
from tirl.models.template import ADDED_TOKENS, CHAT_TEMPLATE, EOS, EOT, SPECIAL_TOKENS

ARCHS = ("qwen2", "llama")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a model made by :func:`init_model`; ``heads`` 0 means derived from ``hidden``."""

    arch: str = "qwen2"
    layers: int = 2
    hidden: int = 64
    vocab: int = 1024
    heads: int = 0
    max_positions: int = 2048
    seed: int = 0
    corpus: str = "builtin"  # the tokenizer's training text: builtin | tasks (tirl.models.corpus)
    split_digits: bool = False  # pre-tokenize as Qwen2 does: every digit its own token (no merged numbers)

    def check(self) -> None:
        """Raise :class:`ConfigError` naming the flag that is out of range."""
        if self.arch not in ARCHS:
            raise ConfigError(f"--arch {self.arch!r} is not supported: use one of {', '.join(ARCHS)}")
        if self.corpus not in CORPORA:
            raise ConfigError(f"--corpus {self.corpus!r} is not supported: use one of {', '.join(CORPORA)}")
        if not 1 <= self.layers <= 128:
            raise ConfigError(f"--layers {self.layers} is out of range: use 1 to 128")
        if not 16 <= self.hidden <= 16384:
            raise ConfigError(f"--hidden {self.hidden} is out of range: use 16 to 16384")
        min_vocab = 256 + len(SPECIAL_TOKENS) + len(ADDED_TOKENS)
        if not min_vocab <= self.vocab <= 262144:
            raise ConfigError(f"--vocab {self.vocab} is out of range: use {min_vocab} (the byte alphabet) to 262144")
        if self.heads < 0 or self.heads > self.hidden:
            raise ConfigError(
                f"--heads {self.heads} is out of range: use 1 to --hidden, or 0 to derive it from --hidden"
            )
        if self.hidden % self.n_heads:
            raise ConfigError(f"--hidden {self.hidden} is not divisible by --heads {self.n_heads}: choose them so")
        self.check_memory(4)

    def check_memory(self, bytes_per_param: int) -> None:
        """Refuse a model whose parameters do not fit in the memory available now, at ``bytes_per_param``.

        4: float32 weights; 16: with AdamW's gradients and moments. Building one took the machine's memory
        (``--layers 128 --hidden 16384``: 400 billion parameters) or ended in torch's allocation traceback.
        """
        from tirl.models.vet import available_bytes

        params = self.layers * (4 * self.hidden**2 + 3 * self.hidden * self.intermediate) + 2 * self.vocab * self.hidden
        need, free = params * bytes_per_param, available_bytes("cpu")
        if need > free:
            raise ConfigError(
                f"--layers {self.layers} --hidden {self.hidden}: about {params / 1e9:.2f} billion parameters need "
                f"{need / 2**30:.1f} GiB, and {free / 2**30:.1f} GiB of memory are free — choose a smaller model"
            )

    @property
    def n_heads(self) -> int:
        """Attention heads: ``heads`` when given, else ``hidden`` / 64 (``hidden`` / 16 for widths under 256)."""
        if self.heads > 0:
            return self.heads
        return max(1, self.hidden // (64 if self.hidden >= 256 else 16))

    @property
    def kv_heads(self) -> int:
        """Key/value heads: half the attention heads when that divides evenly (grouped-query attention)."""
        h = self.n_heads
        return h // 2 if h % 2 == 0 else h

    @property
    def intermediate(self) -> int:
        """MLP width: about 8/3 of ``hidden``, rounded up to a multiple of 32."""
        return -(-self.hidden * 8 // 3 // 32) * 32


# Qwen2's pre-tokenizer pattern: contractions, letter runs, ONE digit, punctuation runs, newlines, spaces.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)


def build_tokenizer(
    vocab: int = 1024, *, max_length: int = 2048, seed: int = 0, corpus: str = "builtin", split_digits: bool = False
) -> PreTrainedTokenizerFast:
    """Train the byte-level BPE tokenizer on the named corpus (same ids on every call).

    ``split_digits``: Qwen2's pre-tokenizer (NFC, :data:`QWEN2_SPLIT`, byte level), so no merge spans two
    digits; else GPT-2's byte-level regex (digit runs may merge).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    if split_digits:
        core.normalizer = normalizers.NFC()
        core.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab - len(ADDED_TOKENS),
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(corpus_lines(corpus, seed=seed), trainer=trainer)
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=EOT,
        pad_token=EOS,
        clean_up_tokenization_spaces=False,
        model_max_length=max_length,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def spec_tokenizer(spec: ModelSpec) -> PreTrainedTokenizerFast:
    """:func:`build_tokenizer` with ``spec``'s vocabulary, length, seed, corpus and digit split."""
    return build_tokenizer(
        spec.vocab, max_length=spec.max_positions, seed=spec.seed, corpus=spec.corpus, split_digits=spec.split_digits
    )


def build_model(spec: ModelSpec, tokenizer: PreTrainedTokenizerFast) -> PreTrainedModel:
    """A randomly initialised causal LM of ``spec`` over ``tokenizer`` (seeded)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    spec.check()
    eot = tokenizer.convert_tokens_to_ids(EOT)
    pad = tokenizer.convert_tokens_to_ids(EOS)
    kwargs = {
        "vocab_size": max(spec.vocab, len(tokenizer)),
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.kv_heads,
        "max_position_embeddings": spec.max_positions,
        "tie_word_embeddings": True,
        "eos_token_id": eot,
        "pad_token_id": pad,
        "bos_token_id": None,
    }
    torch.manual_seed(spec.seed)
    arch: tuple[type[PreTrainedModel], type] = (
        (Qwen2ForCausalLM, Qwen2Config) if spec.arch == "qwen2" else (LlamaForCausalLM, LlamaConfig)
    )
    model = arch[0](arch[1](**kwargs))
    model.generation_config.eos_token_id = [eot, pad]
    model.generation_config.pad_token_id = pad
    return model


def check_out(out: Path) -> None:
    """Refuse an output directory that exists and is not empty, or whose parent is missing."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputError(str(out), None, "exists and is not an empty directory", "choose a new --out or remove it")
    if not out.parent.exists():
        raise OutputError(str(out), None, f"its parent {out.parent} does not exist", "create the parent directory")
    check_output_dir(out, staged=True)  # a read-only parent: now, not after the model is built (or merged)


def init_model(spec: ModelSpec, out: str | Path) -> Path:
    """Build the tokenizer and the model and save both to ``out`` (written whole or not at all)."""
    spec.check()
    path = Path(out).expanduser()
    check_out(path)
    tokenizer = spec_tokenizer(spec)
    model = build_model(spec, tokenizer)
    with staged_dir(path, replace=False, fix="give --out a path in a writable directory") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return path
