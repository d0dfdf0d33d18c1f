"""The character-level tokenizer of the built-in tiny model.

Every printable ASCII character (and newline, tab) is its own token, so every
digit is one token and copying numbers is learnable by a ~1M-parameter model.
Roles and the end of a turn are special tokens. The tokenizer is built with
the ``tokenizers`` library and wrapped in a ``PreTrainedTokenizerFast`` with a
chat template, so it is saved and loaded in the standard Hugging Face format
(``save_pretrained`` / ``AutoTokenizer.from_pretrained``) like any user's.

Not covered: characters outside printable ASCII map to ``<|unk|>`` (the
built-in tasks are ASCII; a decoded ``<|unk|>`` is lossy).
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD = "<|pad|>"
UNK = "<|unk|>"
END = "<|end|>"  # closes every turn; the end-of-sequence token of an assistant turn
ROLE_TOKENS: dict[str, str] = {
    "system": "<|system|>",
    "user": "<|user|>",
    "assistant": "<|assistant|>",
    "tool": "<|tool|>",
}
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, END, *ROLE_TOKENS.values())

# <|role|>content<|end|> per message; the generation prompt is the assistant role token.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}{{ message['content'] if message['content'] is not none else '' }}"
    "{{ '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def char_vocab() -> list[str]:
    """The ordinary (non-special) tokens: printable ASCII, without form feed and vertical tab."""
    return [c for c in string.printable if c not in "\x0b\x0c\r"]


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Build the character-level tokenizer (deterministic: same ids on every call).

    >>> tok = build_char_tokenizer()
    >>> tok.decode(tok.encode("12+3"))
    '12+3'
    >>> len(tok.encode("12+3"))
    4
    """
    vocab: dict[str, int] = {}
    for piece in (*SPECIAL_TOKENS, *char_vocab()):
        vocab[piece] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Every character is isolated ("[\s\S]" also matches the newline).
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=END,
        additional_special_tokens=list(ROLE_TOKENS.values()),
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok
