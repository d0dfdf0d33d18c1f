""":mod:`tirl.inference.stream_text` against real tokenizers: pieces join to the whole decode, in linear work.

Three real ``tokenizers`` tokenizers, no mock: the shipped byte-level BPE (``assets/qwen2-chain``), the
built-in character tokenizer, and a SentencePiece-style one built here (``▁`` for spaces, byte fallback,
the leading space stripped by its decoder). The decode work is counted by wrapping the real ``decode``.
Not covered: tokenizers whose decoders look further back than ``HOLD_TOKENS`` tokens (none of these do).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, normalizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

import tirl
from tirl.inference.stream_text import HOLD_TOKENS, TextStream, token_pieces
from tirl.models.tokenizer import build_char_tokenizer

MULTIBYTE = "naïve café — 日本語 🎉 ok"  # 2-, 3- and 4-byte characters


@cache
def byte_bpe() -> PreTrainedTokenizerFast:
    return AutoTokenizer.from_pretrained(Path(tirl.__file__).parent / "assets" / "qwen2-chain")  # type: ignore[no-any-return]


@cache
def sentencepiece_like() -> PreTrainedTokenizerFast:
    """Llama-style: ``▁`` marks spaces, bytes fall back to ``<0xNN>``, the decoder strips the leading space."""
    vocab = {"<unk>": 0, "</s>": 1} | {f"<0x{b:02X}>": 2 + b for b in range(256)}
    for piece in "▁abcdefghijklmnopqrstuvwxyz":
        vocab[piece] = len(vocab)
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "c"), ("a", "f")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>"))
    core.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    core.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    core.add_special_tokens(["</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="</s>")


TOKENIZERS: dict[str, Callable[[], PreTrainedTokenizerFast]] = {
    "byte-bpe": byte_bpe,
    "char": build_char_tokenizer,
    "sentencepiece-like": sentencepiece_like,
}


def streamed(ids: list[int], decode: Callable[[list[int]], str]) -> list[str]:
    stream = TextStream(decode)
    return [stream.push(t) for t in ids] + [stream.flush()]


def _decoder(tok: PreTrainedTokenizerFast, skip_special: bool) -> Callable[[list[int]], str]:
    def decode(x: list[int]) -> str:
        return str(tok.decode(x, skip_special_tokens=skip_special))

    return decode


def _any_ids(tok: PreTrainedTokenizerFast, data: st.DataObject) -> list[int]:
    """Up to 40 ids, biased to bytes and short pieces (where characters split), special tokens included."""
    vocab = len(tok)
    short = [i for i in range(vocab) if len(tok.convert_ids_to_tokens(i)) <= 6]
    return data.draw(st.lists(st.sampled_from(short) | st.integers(0, vocab - 1), max_size=40))


@pytest.mark.parametrize("name", ["byte-bpe", "char"])
@pytest.mark.parametrize("skip_special", [False, True])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_stream_joins_to_the_whole_decode(name: str, skip_special: bool, data: st.DataObject) -> None:
    tok = TOKENIZERS[name]()
    ids, decode = _any_ids(tok, data), _decoder(tok, skip_special)
    assert "".join(streamed(ids, decode)) == decode(ids)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=30))
def test_stream_joins_to_the_whole_decode_of_text_with_byte_fallback(text: str) -> None:
    """The SentencePiece-style tokenizer on ids of real text: its byte runs are whole characters."""
    tok = sentencepiece_like()
    ids = tok.encode(text, add_special_tokens=False)
    assert "".join(streamed(ids, tok.decode)) == tok.decode(ids)


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_token_pieces_join_to_the_answer_text(name: str, data: st.DataObject) -> None:
    """Whatever the ids, and cut anywhere (a stop string): one piece per token, joining to the text exactly."""
    tok = TOKENIZERS[name]()
    ids, decode = _any_ids(tok, data), _decoder(tok, False)
    whole = decode(ids)
    cut = data.draw(st.integers(0, len(whole)))
    pieces = token_pieces(ids, whole[:cut], decode)
    assert len(pieces) == len(ids) and "".join(pieces) == whole[:cut]


def test_byte_fallback_rewrites_sent_text_and_token_pieces_still_join() -> None:
    """ByteFallback (Llama 2, Mistral) turns a whole run of byte tokens into U+FFFD once one byte is invalid:
    ``日`` already sent becomes three U+FFFD. :class:`TextStream` alone cannot know; the server's pieces are cut
    from the final text, so they join exactly (the module doc's "not covered")."""
    tok = sentencepiece_like()
    ids = [*tok.encode("日", add_special_tokens=False), tok.convert_tokens_to_ids("<0x80>")]
    whole = tok.decode(ids)
    assert whole == "\ufffd" * 4
    assert "".join(streamed(ids, tok.decode)) != whole
    assert "".join(token_pieces(ids, whole, tok.decode)) == whole


@pytest.mark.parametrize("name", ["byte-bpe", "sentencepiece-like"])
def test_a_split_character_is_held_back_until_it_is_whole(name: str) -> None:
    tok = TOKENIZERS[name]()
    ids = tok.encode(MULTIBYTE, add_special_tokens=False)
    assert len(ids) > len(MULTIBYTE), "the characters should be split over byte tokens"
    pieces = streamed(ids, tok.decode)
    assert "".join(pieces) == MULTIBYTE
    assert all("\ufffd" not in p for p in pieces), pieces  # never half a character, then its rest
    assert pieces.index("🎉") - pieces.index("語") >= 4  # the emoji's 4 byte tokens: 3 held, then the character


@pytest.mark.parametrize("kind", ["text", "invalid bytes"])
def test_decode_work_is_linear_in_the_tokens(kind: str) -> None:
    """At most ``3 * HOLD_TOKENS`` ids decoded per token; decoding each prefix (the old way) is quadratic."""
    tok = byte_bpe()
    if kind == "text":
        ids = tok.encode(MULTIBYTE * 200, add_special_tokens=False)
    else:  # lone continuation bytes: every decode ends in U+FFFD, the case that could hold back for ever
        ids = [tok.encode("é", add_special_tokens=False)[-1]] * 2000
    decoded = [0]

    def decode(x: list[int]) -> str:
        decoded[0] += len(x)
        return str(tok.decode(x))

    whole = tok.decode(ids)
    pieces = token_pieces(ids, whole, decode)
    assert "".join(pieces) == whole
    assert decoded[0] <= 3 * HOLD_TOKENS * len(ids), f"{decoded[0]} ids decoded for {len(ids)} tokens"
