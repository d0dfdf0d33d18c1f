"""The fast path of :func:`tirl.jsonl.parse_json` (no string walk when no lone surrogate can exist) refuses
exactly what the full walk refuses: depth beyond MAX_DEPTH, and lone surrogates from escapes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.jsonl import MAX_DEPTH, JSONProblem, _check_tree, parse_json

leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
values = st.recursive(
    leaves,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
    max_leaves=40,
)


def _outcome(fn, *args):
    try:
        fn(*args)
    except JSONProblem as exc:
        return str(exc)
    return "ok"


@settings(max_examples=200, deadline=None)
@given(value=values, wrap=st.integers(0, 70))
def test_fast_depth_walk_agrees_with_the_full_walk(value, wrap: int) -> None:
    for _ in range(wrap):
        value = [value] if wrap % 2 else {"k": value}
    assert _outcome(_check_tree, value, False) == _outcome(_check_tree, value, True)


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\uD83D", "x\\udc00y"])
def test_lone_surrogate_escapes_are_refused_on_str_and_bytes(escape: str) -> None:
    text = json.dumps({"messages": [{"content": "caf\u00e9 " + "A"}]}).replace("A", escape)
    for data in (text, text.encode()):
        with pytest.raises(JSONProblem, match="surrogate"):
            parse_json(data)


def test_a_valid_pair_and_plain_unicode_pass() -> None:
    assert parse_json('"\\ud83d\\ude00 caf\u00e9"') == "\U0001f600 caf\u00e9"
    assert isinstance(parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH), list)
    with pytest.raises(JSONProblem, match="deeper"):
        parse_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
