"""Every numeric config key has a range (``tirl.config_ranges.RANGES``) checked where the config is parsed.

Covered: the table names exactly the numeric keys of every section; values drawn inside each range are
accepted through the command-line text path and the saved-config path; values drawn outside are refused
with one ConfigError naming the key, the value and the range; the red team's values (``trainer.threads``
100000 and -4, ``sandbox.pool_size=100000``, ``rollout.run_workers=1000000``) are refused by ``tirl train``
with one ``error:`` line and exit 2 before anything starts; docs/configuration.md quotes the table.
Not covered: products of keys (only their factors are bounded).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.config import TirlConfig, config_from_dict, load_config
from tirl.config_ranges import RANGES, Range, ranges_markdown
from tirl.errors import ConfigError

README = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"  # the reference page that quotes it

# keys whose in-range value also needs a partner moved out of the way of a cross-key rule
PARTNERS = {
    "generation.max_new_tokens": ("generation.max_total_tokens", 1_048_576),
    "generation.max_total_tokens": ("generation.max_new_tokens", 1),
    "env.chain_min": ("env.chain_max", 12),  # the rule chain_max >= chain_min, out of the way of the range
    "env.chain_max": ("env.chain_min", 1),
}


def _numeric_keys() -> dict[str, type]:
    out: dict[str, type] = {}
    for section in dataclasses.fields(TirlConfig):
        cls = typing.get_type_hints(TirlConfig)[section.name]
        for name, tp in typing.get_type_hints(cls).items():
            args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
            kinds = [a for a in args if a in (int, float)]
            if kinds:
                out[f"{section.name}.{name}"] = kinds[0]
    return out


NUMERIC = _numeric_keys()


def _inside(key: str) -> st.SearchStrategy[float]:
    r = RANGES[key]
    if NUMERIC[key] is int:
        return st.integers(math.ceil(r.lo) + r.lo_open, math.floor(r.hi) - r.hi_open)
    return st.floats(r.lo, r.hi, exclude_min=r.lo_open, exclude_max=r.hi_open, allow_nan=False)


def _outside(key: str) -> st.SearchStrategy[float]:
    r = RANGES[key]
    if NUMERIC[key] is int:
        below = st.integers(-(2**63), math.ceil(r.lo) - 1 + r.lo_open)
        return below | st.integers(math.floor(r.hi) + 1 - r.hi_open, 2**63 - 1)
    below = st.floats(-1e308, r.lo, exclude_max=not r.lo_open)
    return below | st.floats(r.hi, 1e308, exclude_min=not r.hi_open)


def _load(key: str, value: float) -> TirlConfig:
    pairs = [f"{key}={value!r}"]
    if key in PARTNERS:
        partner, fixed = PARTNERS[key]
        pairs.append(f"{partner}={fixed}")
    return load_config(None, pairs)


def test_the_table_bounds_exactly_the_numeric_keys() -> None:
    assert set(RANGES) == set(NUMERIC), set(RANGES) ^ set(NUMERIC)
    for key, bound in RANGES.items():
        default = getattr(getattr(TirlConfig(), key.split(".")[0]), key.split(".")[1])
        assert default is None or bound.contains(default), f"{key}: default {default} outside {bound.text()}"


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_inside_accepted_outside_refused_with_the_key(data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(RANGES)))
    good = data.draw(_inside(key), label="inside")
    section, name = key.split(".")
    assert getattr(getattr(_load(key, good), section), name) == good
    saved: dict[str, dict[str, Any]] = {section: {name: good}}
    if key in PARTNERS:
        partner, fixed = PARTNERS[key]
        saved[section][partner.split(".")[1]] = fixed  # both partners sit in the same section
    assert getattr(getattr(config_from_dict(saved), section), name) == good
    bad = data.draw(_outside(key), label="outside")
    with pytest.raises(ConfigError) as exc:
        _load(key, bad)
    message = str(exc.value)
    assert f"config {key}=" in message, message
    if "use a value in" in message:  # a section's own rule may speak first (group_size=1: "need >= 2")
        assert RANGES[key].text() in message, message


def test_range_text_and_contains() -> None:
    assert Range(0, 1, lo_open=True).text() == "(0, 1]"
    assert Range(1, 8).text() == "1..8" and Range(1, 8).contains(8) and not Range(1, 8).contains(8.5)
    assert not Range(0, 1).contains(math.nan)


@pytest.mark.parametrize(
    "pair",
    ["trainer.threads=100000", "trainer.threads=-4", "sandbox.pool_size=100000", "rollout.run_workers=1000000"],
)
def test_the_red_team_values_are_one_error_line(pair: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tirl.cli import main

    assert main(["train", "--set", pair]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    key, value = pair.split("=")
    assert len(err) == 1 and err[0].startswith(f"error: config {key}={value} is invalid: use a value in"), err


def test_machine_derived_bounds_follow_the_cores() -> None:
    import os

    cores = os.cpu_count() or 1
    assert RANGES["trainer.threads"].hi == 4 * cores
    assert RANGES["sandbox.pool_size"].hi == max(4, 8 * cores)
    load_config(None, [f"trainer.threads={4 * cores}"])
    with pytest.raises(ConfigError, match=r"trainer\.threads=.* 1\.\.\d+ \(4 x the CPU cores; this machine"):
        load_config(None, [f"trainer.threads={4 * cores + 1}"])


def test_readme_quotes_the_table() -> None:
    assert ranges_markdown() in README.read_text(encoding="utf-8")
