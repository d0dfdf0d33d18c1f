"""``tirl.jsonl.json_value`` against plain references: JSON data is unchanged, numpy/torch values become the
plain values ``tolist()`` gives, anything else is refused naming where it sits."""

from __future__ import annotations

import json
import math
import numbers
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tirl.jsonl import NotJSON, json_value

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON)
def test_plain_json_data_is_returned_as_json_reads_it_back(value: object) -> None:
    assert json_value(value) == json.loads(json.dumps(value))


def _reference(value: object) -> object:
    """The plain loop: numpy/torch through tolist(), tuples as lists, non-finite floats as None."""
    if isinstance(value, np.generic | np.ndarray | torch.Tensor):
        value = value.tolist()
    if isinstance(value, Fraction | Decimal):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k if isinstance(k, str) else json.dumps(k): _reference(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_reference(v) for v in value]
    return value


def test_numpy_torch_tuples_and_non_finite_floats_match_the_reference() -> None:
    value = {
        "f32": np.float32(0.25), "i64": np.int64(7), "b": np.bool_(True), "arr": np.arange(3).reshape(1, 3),
        "t": torch.tensor([1.5, float("nan")]), "tup": (1, (2, float("inf"))), 3: "int key", None: "none key",
        "deep": [{"x": np.float64(-math.inf)}], "q": Fraction(1, 4), "d": Decimal("2.5"),
    }  # fmt: skip
    got = json_value(value)
    assert got == _reference(value)
    assert json.loads(json.dumps(got, allow_nan=False)) == got  # strict JSON round trip


@pytest.mark.parametrize(
    ("value", "path", "what"),
    [
        ({"s": {1, 2}}, ".s", "a set"),
        ({"a": [1, {"b": b"x"}]}, ".a[1].b", "a bytes"),
        ({"o": object()}, ".o", "an object"),
        ({(1, 2): 3}, ".(1, 2)", "under a tuple key"),
        ({"r": range(3)}, ".r", "a range"),
    ],
)
def test_what_json_cannot_hold_is_refused_naming_where(value: object, path: str, what: str) -> None:
    with pytest.raises(NotJSON) as caught:
        json_value(value)
    assert (caught.value.path, caught.value.what) == (path, what)


def _refuse(*_: object) -> float:
    raise RuntimeError("no")


# A user's Real whose float() fails (its other methods are never called here).
_BrokenReal = type(
    "_BrokenReal",
    (numbers.Real,),
    {**dict.fromkeys(numbers.Real.__abstractmethods__, lambda *_: NotImplemented), "__float__": _refuse},
)


def test_numbers_float_refuses_are_stored_as_the_float_they_stand_for_or_named() -> None:
    """``float()`` raised on these: a traceback from the trainer's trajectory log (``Decimal("sNaN")`` above all)."""
    value = {"s": Decimal("sNaN"), "big": Fraction(10**400), "neg": -Fraction(10**400, 3)}
    assert json_value(value) == {"s": None, "big": None, "neg": None}
    for key, what in (("s", "NaN"), ("big", "Infinity"), ("neg", "-Infinity")):
        with pytest.raises(NotJSON) as caught:
            json_value({key: value[key]}, strict=True)
        assert (caught.value.path, caught.value.what) == (f".{key}", what)
    with pytest.raises(NotJSON) as caught:
        json_value({"r": _BrokenReal()})
    assert caught.value.path == ".r" and caught.value.what == "a _BrokenReal that float() refuses (RuntimeError)"
