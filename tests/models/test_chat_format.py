"""Chat formats: piecewise ids equal the template rendering of the whole conversation."""

from __future__ import annotations

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tirl.errors import SetupError
from tirl.models.chat_format import SimpleChatFormat, TemplateChatFormat, chat_format_for
from tirl.models.tokenizer import build_char_tokenizer, char_vocab
from tirl.types import Message, Role

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SYSTEM = Message(role=Role.SYSTEM, content="Use python.")
USER = Message(role=Role.USER, content="Compute 12+30.")
TURN1 = "```python\nprint(12+30)\n```"
TOOL = Message(role=Role.TOOL, content="```output\n42\n```")
TURN2 = "\\boxed{42}"


def chatml_tokenizer(template: str | None = CHATML) -> PreTrainedTokenizerFast:
    """A character-level tokenizer with ChatML specials (tokenisation is compositional, so renders compare)."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate([*specials, *char_vocab()])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.chat_template = template
    return tok


def _dicts(msgs: list[Message]) -> list[dict[str, str]]:
    return [{"role": m.role.value, "content": m.content or ""} for m in msgs]


@pytest.mark.parametrize("make", ["simple", "template-builtin", "chatml"])
def test_concatenated_pieces_equal_the_full_rendering(make: str) -> None:
    if make == "chatml":
        tok = chatml_tokenizer()
        fmt = TemplateChatFormat(tok)
    else:
        tok = build_char_tokenizer()
        fmt = SimpleChatFormat(tok) if make == "simple" else TemplateChatFormat(tok)
    ids = fmt.prompt_ids([SYSTEM, USER])
    turn1 = fmt.assistant_ids(TURN1)
    assert turn1[-1] in fmt.eos_ids  # the model samples the turn close's first id
    ids += turn1
    ids += fmt.observation_ids([TOOL], turn1)
    ids += fmt.assistant_ids(TURN2)
    full = [
        SYSTEM,
        USER,
        Message(role=Role.ASSISTANT, content=TURN1),
        TOOL,
        Message(role=Role.ASSISTANT, content=TURN2),
    ]
    expected_text = tok.apply_chat_template(_dicts(full), tokenize=False, add_generation_prompt=False)
    expected = tok.encode(expected_text, add_special_tokens=False)
    # The rendering ends with the full turn close; the sampled piece ends at its first id.
    assert ids == expected[: len(ids)]
    assert fmt.assistant_text(turn1) == TURN1


def test_turn_not_closed_by_eos_gets_the_whole_close_forced() -> None:
    tok = chatml_tokenizer()
    fmt = TemplateChatFormat(tok)
    sampled = tok.encode(TURN1, add_special_tokens=False)  # stopped by a stop string: no <|im_end|>
    obs = fmt.observation_ids([TOOL], sampled)
    assert tok.decode(obs).startswith("<|im_end|>\n<|im_start|>tool\n")
    closed = [*sampled, tok.convert_tokens_to_ids("<|im_end|>")]
    assert tok.decode(fmt.observation_ids([TOOL], closed)).startswith("\n<|im_start|>tool\n")
    simple = SimpleChatFormat(build_char_tokenizer())
    assert simple.observation_ids([TOOL], [5, 6])[0] == simple.end_id
    assert simple.observation_ids([TOOL], [5, simple.end_id])[0] == simple.role_ids[Role.TOOL]


def test_eos_ids_include_the_template_turn_close() -> None:
    tok = chatml_tokenizer()
    fmt = TemplateChatFormat(tok)
    assert fmt.eos_ids == frozenset({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})


def test_template_rejecting_tool_role_renders_tool_as_user() -> None:
    strict = (
        "{% for m in messages %}{% if m['role'] not in ['user', 'assistant', 'system'] %}"
        "{{ raise_exception('bad role') }}{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fmt = TemplateChatFormat(chatml_tokenizer(strict))
    text = fmt.tokenizer.decode(fmt.observation_ids([TOOL], []))
    assert "<|im_start|>user\n```output" in text


def test_template_that_rewrites_history_is_refused() -> None:
    unstable = "{% for m in messages %}[{{ messages|length }}]{{ m['content'] }}<|im_end|>{% endfor %}"
    with pytest.raises(SetupError, match="prefix-stable"):
        TemplateChatFormat(chatml_tokenizer(unstable))


def test_chat_format_for_picks_the_builtin_or_the_template() -> None:
    assert isinstance(chat_format_for(build_char_tokenizer()), SimpleChatFormat)
    assert isinstance(chat_format_for(chatml_tokenizer()), TemplateChatFormat)
    fallback = chat_format_for(chatml_tokenizer(None))
    assert isinstance(fallback, TemplateChatFormat)
    assert fallback.tokenizer.decode(fallback.prompt_ids([USER])).endswith("### assistant\n")
