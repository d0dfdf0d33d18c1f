"""The saved config comes back exactly: ``config_from_dict(config_to_dict(c)) == c`` for configs over every key.

Resume and every ``--nproc`` rank rebuild the run's config from ``config.json``; the old way (flattening it into
``key=value`` overrides) split list items at commas and turned the string ``"none"`` into ``None``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tirl.config import TirlConfig, config_from_dict, config_to_dict, load_config, resolve_config
from tirl.errors import ConfigError

# text that the command-line shorthands would change: commas, null words, booleans, brackets
AWKWARD = ["none", "None", "null", "a,b", "####", ",", "true", "0", "[x]", " pad ", "é,ü", ""]


def _value(tp: Any, default: Any) -> st.SearchStrategy[Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return st.one_of(st.none(), *(_value(a, default) for a in inner))
    if origin is list:
        return st.lists(_value(args[0], None), max_size=4)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.one_of(st.integers(0, 64), st.just(default if isinstance(default, int) else 1))
    if tp is float:
        fallback = default if isinstance(default, float) else 1.0
        return st.one_of(st.floats(0.0, 16.0, allow_nan=False), st.just(fallback))
    if tp is str:
        same = default if isinstance(default, str) else "x"
        return st.one_of(st.sampled_from(AWKWARD), st.text(max_size=8), st.just(same))
    raise AssertionError(f"no strategy for {tp}")


def _fields() -> list[tuple[str, str, Any, Any]]:
    out = []
    for section in dataclasses.fields(TirlConfig):
        cls = typing.get_type_hints(TirlConfig)[section.name]
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out.append((section.name, f.name, hints[f.name], default))
    return out


FIELDS = _fields()


@st.composite
def configs(draw: st.DrawFn) -> TirlConfig:
    """A valid config that differs from the defaults in a few keys of any section and type."""
    chosen = draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=6, unique_by=lambda f: (f[0], f[1])))
    data: dict[str, dict[str, Any]] = {}
    for section, name, tp, default in chosen:
        data.setdefault(section, {})[name] = draw(_value(tp, default))
    try:
        return config_from_dict(data)
    except ConfigError:
        assume(False)
        raise


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(configs())
def test_round_trip_is_exact_through_json(cfg: TirlConfig) -> None:
    saved = json.loads(json.dumps(config_to_dict(cfg)))  # what config.json and every rank hold
    assert config_from_dict(saved) == cfg


def test_every_key_is_drawn() -> None:
    """The strategy covers every key of every section (a new key without a strategy fails here)."""
    for section, name, tp, default in FIELDS:
        assert _value(tp, default) is not None, f"{section}.{name}"
    assert len(FIELDS) >= 60


def test_the_two_losses_of_the_old_flattening_are_gone() -> None:
    cfg = load_config(None, ['filter.answer_markers=["####", "a,b"]', "trainer.run_name=x"])
    cfg.trainer.run_name = "none"  # a run really named "none"
    back = config_from_dict(json.loads(json.dumps(config_to_dict(cfg))))
    assert back.filter.answer_markers == ["####", "a,b"]
    assert back.trainer.run_name == "none"
    assert back == cfg


def test_overrides_apply_on_top_of_the_saved_config() -> None:
    saved = config_to_dict(load_config(None, ['filter.answer_markers=["a,b"]', "trainer.steps=5"]))
    cfg = config_from_dict(saved, ["trainer.steps=9", "algo.dual_clip=none"])
    assert (cfg.trainer.steps, cfg.algo.dual_clip, cfg.filter.answer_markers) == (9, None, ["a,b"])


def test_missing_keys_take_defaults_and_wrong_types_name_the_key() -> None:
    assert config_from_dict({"algo": {"lr": 0.001}}).trainer == TirlConfig().trainer
    with pytest.raises(ConfigError, match=r"filter\.answer_markers"):
        config_from_dict({"filter": {"answer_markers": "####,a"}})  # a string where the JSON had a list
    with pytest.raises(ConfigError, match=r"unknown config key 'algo\.nosuch'"):
        config_from_dict({"algo": {"nosuch": 1}})
    with pytest.raises(ConfigError, match="must be a table"):
        config_from_dict({"algo": 3})


def test_resume_rebuilds_the_saved_config_exactly(tmp_path: Path) -> None:
    from tirl.commands.train import resolve

    cfg = load_config(None, ['filter.answer_markers=["####", "a,b"]', "filter.action_rule=fields"])
    cfg.trainer.run_name = "none"
    (tmp_path / "config.json").write_text(json.dumps(config_to_dict(cfg)))
    args = argparse.Namespace(
        overrides=["trainer.steps=30"], model=None, env=None, steps=None, generator=None, base_url=None,
        backend=None, ray_address=None, resume=str(tmp_path), config=None, run_dir=None,
    )  # fmt: skip
    got, run_dir, created = resolve(args)
    assert run_dir == tmp_path and created is None
    assert got.filter.answer_markers == ["####", "a,b"] and got.trainer.run_name == "none"
    assert got.trainer.steps == 30
    got.trainer.steps = cfg.trainer.steps
    assert got == cfg


def test_a_rank_rebuilds_the_saved_config_exactly(tmp_path: Path) -> None:
    """The follower's own parser (``--config`` JSON text or a file) gives rank 0's config back."""
    from tirl.distributed.follower import read_rank_config

    cfg = load_config(None, ['filter.answer_markers=["####", "a,b"]'])
    cfg.trainer.run_name = "none"
    text = json.dumps(config_to_dict(cfg))
    assert read_rank_config(text) == cfg
    f = tmp_path / "c.json"
    f.write_text(text)
    assert read_rank_config(str(f)) == cfg


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(configs())
def test_a_runs_config_json_given_to_config_is_that_config(cfg: TirlConfig) -> None:
    """`tirl train --config RUN/config.json` re-runs a run's config (it said "not valid TOML ... fix that line")."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config_to_dict(cfg), indent=1) + "\n")
        assert load_config(path) == cfg
        resolved = resolve_config(path, ["trainer.steps=7"])
    assert (
        resolved.config.trainer.steps == 7
        and dataclasses.replace(resolved.config.trainer, steps=cfg.trainer.steps) == cfg.trainer
    )
    assert resolved.sources["algo.lr"] == "file" and resolved.sources["trainer.steps"] == "--set"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"trainer": ', "starts like JSON (a run's config.json) but cannot be read: not valid JSON"),
        ('{"a": 1, "a": 2}', "the key 'a' appears twice"),
        ('{"algo": {"lr": NaN}}', "cannot be read"),
        ('{"trainer": {"steps": "5"}}', 'trainer.steps = "5" is a string'),
        ('{"trainer": {"stepz": 5}}', "did you mean 'trainer.steps'"),
    ],
)
def test_a_bad_json_config_is_one_config_error(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "c.json").write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_config(tmp_path / "c.json")


def test_config_show_reads_a_runs_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tirl.cli import main

    saved = tmp_path / "config.json"
    saved.write_text(json.dumps(config_to_dict(load_config(None, ["env.name=swe-lite", "algo.lr=0.0003"]))))
    assert main(["config", "show", "--config", str(saved), "--set", "trainer.steps=4"]) == 0
    out = capsys.readouterr().out
    assert 'name = "swe-lite"  # file' in out and "lr = 0.0003  # file" in out and "steps = 4  # --set" in out
