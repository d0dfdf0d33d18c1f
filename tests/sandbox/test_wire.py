"""The warm pool's wire format (:mod:`tirl.sandbox._wire`): round trips, and malformed answers refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tirl.sandbox._wire import (
    ANSWER,
    OP_RUN,
    CappedBuffer,
    decode_answer,
    decode_request,
    encode_request,
    frame,
)


def encode_answer(
    nonce: bytes, exit_code: int, timed_out: bool, wall_s: float, out: CappedBuffer, err: CappedBuffer, note: bytes
) -> bytes:
    """The plain reference of an answer body (what ``tirl.sandbox._capture.answer_frame`` builds in place, less its
    frame length): header, then the kept pieces of ``out`` and ``err`` (CappedBuffers) and ``note``.
    """
    pieces = (out.head, bytes(out.tail), err.head, bytes(err.tail), note)
    sizes = [len(p) for p in pieces]
    head = ANSWER.pack(b"A", nonce, exit_code, timed_out, wall_s, out.total, err.total, *sizes)
    return head + b"".join(pieces)


@given(
    st.text(),
    st.sampled_from(["python", "bash"]),
    st.floats(0.01, 1e6),
    st.integers(1, 2**32 - 1),
    st.binary(min_size=8, max_size=8),
    st.one_of(st.none(), st.text(min_size=1, max_size=40)),
)
def test_a_request_decodes_to_what_was_encoded(
    code: str, lang: str, timeout_s: float, memory_mb: int, nonce: bytes, session: str | None
) -> None:
    body = encode_request(OP_RUN, code, lang, timeout_s, memory_mb, 64, 32, 8000, nonce, session)
    op, lang2, timeout2, memory2, nproc, fsize, keep, nonce2, session2, code2 = decode_request(body)
    assert (op, lang2, timeout2, memory2, nproc, fsize, keep, nonce2) == (
        OP_RUN,
        lang,
        timeout_s,
        memory_mb,
        64,
        32,
        8000,
        nonce,
    )
    assert session2 == session
    assert code2.decode("utf-8", "surrogatepass") == code


def _buffer(data: bytes, keep: int) -> CappedBuffer:
    buf = CappedBuffer(keep)
    buf.feed(data)
    return buf


@given(st.binary(max_size=300), st.binary(max_size=300), st.integers(1, 64), st.integers(-255, 255), st.booleans())
def test_an_answer_decodes_to_the_buffers_it_was_made_of(
    out: bytes, err: bytes, keep: int, status: int, timed_out: bool
) -> None:
    a, b = _buffer(out, keep), _buffer(err, keep)
    body = encode_answer(b"n" * 8, status, timed_out, 0.25, a, b, b"note")
    nonce, status2, timed_out2, wall, out2, err2, note = decode_answer(body, keep)
    assert (nonce, status2, timed_out2, wall, note) == (b"n" * 8, status, timed_out, 0.25, b"note")
    for mine, theirs in ((a, out2), (b, err2)):
        assert (theirs.head, bytes(theirs.tail), theirs.total) == (mine.head, bytes(mine.tail), mine.total)
        assert theirs.text(50) == mine.text(50)


def test_frame_puts_the_length_in_front() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"


def _answer(sizes: list[int], totals: tuple[int, int] = (0, 0), kind: bytes = b"A") -> bytes:
    head = ANSWER.pack(kind, b"n" * 8, 0, 0, 0.0, *totals, *sizes)
    return head + b"x" * sum(sizes)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"", "empty"),
        (b"R", "a ready frame where an answer belongs"),
        (_answer([0, 0, 0, 0, 0], kind=b"B"), "another kind"),
        (_answer([3, 0, 0, 0, 0], (3, 0))[:-1], "pieces longer than the body"),
        (_answer([3, 0, 0, 0, 0], (3, 0)) + b"extra", "bytes after the pieces"),
        (_answer([9, 0, 0, 0, 0], (9, 0)), "a piece longer than keep"),
        (_answer([2, 2, 0, 0, 0], (3, 0)), "a total below its pieces"),
    ],
)
def test_a_malformed_answer_is_refused(body: bytes, why: str) -> None:
    with pytest.raises(ValueError):
        decode_answer(body, 8)


@given(
    st.integers(1, 200),
    st.lists(st.binary(min_size=1, max_size=700), max_size=12),
    st.lists(st.binary(min_size=1, max_size=70), max_size=4),
    st.binary(max_size=30),
)
def test_the_server_s_capture_keeps_and_answers_what_a_capped_buffer_does(
    keep: int, out_chunks: list[bytes], err_chunks: list[bytes], note: bytes
) -> None:
    """:mod:`tirl.sandbox._capture` (the server's, which leaves no copies) against the plain CappedBuffer."""
    import os

    from tirl.sandbox._capture import Capture, answer_frame, wipe

    captures, refs = [], []
    for chunks in (out_chunks, err_chunks):
        capture, ref = Capture(keep), CappedBuffer(keep)
        for chunk in chunks:
            r, w = os.pipe()
            os.write(w, chunk)
            os.close(w)
            while capture.read(r):
                pass
            os.close(r)
            ref.feed(chunk)
        captures.append(capture)
        refs.append(ref)
    answer = answer_frame(b"n" * 8, -9, True, 1.5, captures[0], captures[1], note)
    assert bytes(answer) == frame(encode_answer(b"n" * 8, -9, True, 1.5, refs[0], refs[1], note))
    assert not any(captures[0].head) and not any(captures[1].tail) and not any(captures[0].scratch)  # wiped
    wipe(answer)
    assert not any(answer)
