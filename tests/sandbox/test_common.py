"""Output capping and result building, against plain references."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tirl.errors import SetupError
from tirl.sandbox._common import CappedBuffer, build_result, cut_text, memory_exceeded
from tirl.sandbox.bwrap import _python_prefix


@given(st.lists(st.binary(max_size=50), max_size=30), st.integers(1, 40))
def test_capped_buffer_keeps_exactly_the_head_and_tail_of_the_stream(chunks: list[bytes], keep: int) -> None:
    buf = CappedBuffer(keep)
    for c in chunks:
        buf.feed(c)
    whole = b"".join(chunks)
    assert buf.total == len(whole)
    assert buf.head == whole[:keep]
    rest = whole[len(buf.head) :]
    assert bytes(buf.tail) == rest[-keep:]
    assert buf.dropped == (len(whole) > 2 * keep)


@given(st.text(max_size=300), st.integers(64, 200))
def test_cut_text_is_identity_when_short_and_head_marker_tail_when_long(text: str, cap: int) -> None:
    out, cut = cut_text(text, cap)
    if len(text) <= cap:
        assert (out, cut) == (text, False)
    else:
        half = cap // 2
        assert cut and out.startswith(text[:half]) and out.endswith(text[-half:])
        assert f"{len(text) - 2 * half} characters cut" in out


def test_invalid_utf8_becomes_replacement_characters() -> None:
    buf = CappedBuffer(100)
    buf.feed(b"a\xffb")
    text, truncated = buf.text(100)
    assert (text, truncated) == ("a\ufffdb", False)


def test_sigxcpu_counts_as_a_timeout_and_memoryerror_as_memory() -> None:
    empty = CappedBuffer(10)
    assert build_result(empty, empty, -24, timed_out=False, wall_s=1.0, max_chars=100).timed_out
    assert memory_exceeded(1, "Traceback...\nMemoryError\n")
    assert not memory_exceeded(0, "MemoryError")


def test_an_interpreter_prefix_that_would_expose_home_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "python"
    with pytest.raises(SetupError, match="not in a self-contained installation"):
        _python_prefix(str(fake))  # tmp_path has no lib/python3*: not an installation
    assert _python_prefix("/usr/bin/python3") is None
