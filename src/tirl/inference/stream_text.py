"""A sample's text cut into one piece per sampled token, for a streamed answer, in linear decode work.

:class:`TextStream` decodes a growing token sequence a few tokens at a time: each :meth:`~TextStream.push`
decodes a window of at most ``2 * HOLD_TOKENS`` ids (the tokens of the last piece, as context, and the
tokens not yet sent) and returns the new text. A piece whose decode ends in U+FFFD (the bytes of a
character that a later byte token may complete) or that changes text already sent (a tokenizer merge or
clean-up across the boundary) is held back, for up to ``HOLD_TOKENS`` tokens: a UTF-8 character is at most
4 bytes and a byte-level token holds at least one. The window starts one piece back so that a decoder that
strips a leading space from the first token of a sequence (SentencePiece's ``▁``) strips it from the
context, not from the new piece.

:func:`token_pieces` is what ``tirl serve`` streams: the text of each token, cut from the answer's final
text at the lengths :class:`TextStream` gives, so the pieces join to exactly the non-streamed text (stop
strings cut included) whatever the tokenizer. Before session 46 each chunk decoded the whole text so far:
1,000 tokens cost 500,500 decoded ids (0.1-0.4 s before the first chunk), 2,000 cost 2,001,000.

Covered: byte-level BPE (held-back partial characters, invalid bytes that stay U+FFFD), character
and SentencePiece-style tokenizers, special tokens, a trailing EOS dropped by the decode function. Not
covered: a decoder whose text for a token depends on tokens more than ``HOLD_TOKENS`` back. One is common:
``tokenizers``' ByteFallback (Llama 2, Mistral) turns a whole run of ``<0xNN>`` tokens into U+FFFD when one
byte of the run is invalid, so text already sent (``日``) can turn into U+FFFD later; :class:`TextStream`
alone then differs from the whole decode, and :func:`token_pieces`, which cuts the final text, still joins
exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

HOLD_TOKENS = 4  # the longest UTF-8 character, in bytes: a byte-level token holds at least one
REPLACEMENT = "\ufffd"  # what a decoder gives for bytes that are not (yet) a whole character

Decode = Callable[[list[int]], str]


class TextStream:
    """The text of a growing token sequence, one :meth:`push` per token; ``decode`` is the tokenizer's."""

    def __init__(self, decode: Decode) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._start = 0  # the first id of the window: the tokens of the last piece sent, as context
        self._taken = 0  # the ids that the text sent so far was decoded from
        self._done = ""  # the window's text that has been sent: decode(ids[start:taken]), less a held U+FFFD

    def push(self, token_id: int) -> str:
        """The text ``token_id`` adds: ``""`` while it is held back (see the module doc)."""
        self._ids.append(token_id)
        window = self._decode(self._ids[self._start :])
        unsure = window.endswith(REPLACEMENT) or not window.startswith(self._done)
        if unsure and len(self._ids) - self._taken < HOLD_TOKENS:
            return ""
        return self._send(window, hold_last=window.endswith(REPLACEMENT))

    def flush(self) -> str:
        """The text still held back at the end of the sequence."""
        return self._send(self._decode(self._ids[self._start :]), hold_last=False)

    def _send(self, window: str, *, hold_last: bool) -> str:
        """Send the window's new text (less a last U+FFFD that a later byte may still complete)."""
        end = len(window) - 1 if hold_last else len(window)
        piece = window[len(self._done) : end]
        self._start, self._taken = self._taken, len(self._ids)
        context = self._decode(self._ids[self._start :])
        self._done = context[:-1] if hold_last and context.endswith(REPLACEMENT) else context
        return piece


def token_pieces(token_ids: Sequence[int], text: str, decode: Decode) -> list[str]:
    """One piece of ``text`` per token id, joining to exactly ``text``.

    ``text`` is the answer's final text: ``decode(token_ids)``, possibly cut before a stop string. Each
    token's piece is the text :class:`TextStream` gives for it, cut from ``text`` (a piece past the end of
    ``text`` is ``""``; text the stream never reached goes to the last piece).
    """
    stream = TextStream(decode)
    pieces: list[str] = []
    reached = sent = 0
    for tid in token_ids:
        reached += len(stream.push(tid))
        upto = min(reached, len(text))
        pieces.append(text[sent:upto])
        sent = max(sent, upto)
    if pieces and sent < len(text):
        pieces[-1] += text[sent:]
    return pieces
