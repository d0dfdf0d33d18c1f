"""A config number is the one written, or refused naming the key and the fix: the same from ``--set`` and TOML.

``generation.temperature=1e-400`` parsed to 0.0 and silently sampled greedily; ``1e999`` (inf) was refused only
as "not finite". A TOML ``steps = 1.0`` was the integer 1 where ``--set trainer.steps=1.0`` was refused. Each case
runs through ``tirl config show`` (exit 2, one ``error:`` line) from the command line and from a file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import assert_refused, run_cli

from tirl.config import load_config


def _toml(tmp_path: Path, key: str, value: str) -> Path:
    section, _, name = key.rpartition(".")
    path = tmp_path / "c.toml"
    path.write_text(f"[{section}]\n{name} = {value}\n", encoding="utf-8")
    return path


def _both(capsys, tmp_path: Path, key: str, value: str, *needles: str) -> None:
    """``--set KEY=VALUE`` and a TOML file holding ``KEY = VALUE`` are each refused, the line holding ``needles``."""
    assert_refused(run_cli(capsys, "config", "show", "--set", f"{key}={value}"), f"config {key}='{value}'", *needles)
    assert_refused(run_cli(capsys, "config", "show", "--config", _toml(tmp_path, key, value)), f"config {key}={value}",
                   *needles)  # fmt: skip


@pytest.mark.parametrize("key", ["generation.temperature", "algo.lr", "algo.dual_clip"])  # dual_clip: float | None
@pytest.mark.parametrize("value", ["1e-400", "-2.5e-999", "0.0000001e-330"])
def test_a_float_that_underflows_to_zero_is_refused(capsys, tmp_path, key, value):
    _both(capsys, tmp_path, key, value, "underflows to 0.0", "write 0 if you mean zero")


@pytest.mark.parametrize("value", ["1e999", "-1_0e400"])
def test_a_float_that_overflows_to_infinity_is_refused(capsys, tmp_path, value):
    _both(capsys, tmp_path, "algo.clip_high", value, "overflows to infinity", "write a finite number")


@pytest.mark.parametrize("value", ["0.0", "0e-400", "-0.0", "1e-310"])  # zero written as zero; a subnormal is not 0
def test_zero_and_tiny_floats_written_as_such_are_kept(tmp_path, value):
    cfg = load_config(None, [f"algo.kl_coef={value}"])
    assert cfg.algo.kl_coef == float(value)
    assert load_config(_toml(tmp_path, "algo.kl_coef", value)).algo.kl_coef == float(value)


def test_a_float_option_that_underflows_is_refused(capsys):
    """``tirl sft --lr 1e-400`` trained at lr 0 (every ``type=float`` option goes through ``finite_float``)."""
    assert_refused(run_cli(capsys, "sft", "--lr", "1e-400"), "--lr", "'1e-400' underflows to 0.0")


@pytest.mark.parametrize(("value", "fix"), [("1.0", "use an integer: write 1, not 1.0"), ("2.5", "use an integer")])
def test_a_float_for_an_integer_key_is_refused_from_the_command_line_and_from_a_file(capsys, tmp_path, value, fix):
    _both(capsys, tmp_path, "trainer.steps", value, fix)


def test_an_integer_key_still_takes_integers(tmp_path):
    assert load_config(_toml(tmp_path, "trainer.steps", "3")).trainer.steps == 3
    assert load_config(None, ["trainer.steps=3"]).trainer.steps == 3


@pytest.mark.parametrize(
    "argv",
    [
        ["--set", "algo.clip_high.x=0.3"],
        ["--set", "algo.clip_high=0.2", "--set", "algo.clip_high.x=0.3"],
        ["--config", "TABLE"],
    ],
)
def test_a_key_below_a_value_says_the_value_is_not_a_section(capsys, tmp_path, argv):
    """It said ``config algo.clip_high={'x': '0.3'} is invalid: use a number``."""
    table = tmp_path / "t.toml"
    table.write_text("[algo.clip_high]\nx = 0.3\n", encoding="utf-8")
    out = run_cli(capsys, "config", "show", *[table if a == "TABLE" else a for a in argv])
    assert_refused(out, "algo.clip_high.x", "algo.clip_high is a value, not a section",
                   "--set algo.clip_high=0.3", "clip_high = ... under [algo]")  # fmt: skip


def test_a_value_given_for_a_section_before_a_key_in_it_names_the_section(capsys):
    """``--set algo=3 --set algo.clip_high=0.3`` said ``'algo' is a value, not a section``: the value is the error."""
    out = run_cli(capsys, "config", "show", "--set", "algo=3", "--set", "algo.clip_high=0.3")
    assert_refused(out, "config section [algo] must be a table of keys, not '3'")


def test_toml_float_keeps_the_text_only_of_a_float_that_does_not_fit() -> None:
    from tirl.config_values import FloatText, toml_float

    assert type(toml_float("0.5")) is float and toml_float("1_000.5") == 1000.5
    small = toml_float("1e-400")
    assert isinstance(small, FloatText) and small == 0.0 and repr(small) == "1e-400"


@pytest.mark.parametrize(
    ("key", "value", "kind", "fix"),
    [
        ("trainer.steps", '"5"', "an integer", "write steps = 5, without quotes"),
        ("algo.lr", '"1e-4"', "a number", "write lr = 1e-4, without quotes"),
        ("algo.lr", "'.5'", "a number", "write lr = 0.5, without quotes"),  # TOML has no .5: the float's spelling
        ("filter.boxed", '"true"', "true or false", "write boxed = true, without quotes"),
        ("model.vllm_max_model_len", '"4096"', "an integer", "write vllm_max_model_len = 4096, without quotes"),
        ("trainer.steps", '"abc"', "an integer", "write steps as an integer, without quotes"),
    ],
)
def test_a_toml_string_for_a_number_or_boolean_key_is_refused_naming_file_line_and_fix(
    capsys, tmp_path, key, value, kind, fix
):
    """``steps = "5"`` was read as 5 (the ``--set`` text rule): in TOML the quotes are the template's mistake."""
    section, _, name = key.rpartition(".")
    path = tmp_path / "run.toml"
    path.write_text(f"# a template\n[{section}]\n{name} = {value}\n", encoding="utf-8")
    for command in (["config", "show"], ["train", "--run-dir", tmp_path / "run", "--no-progress"]):
        out = run_cli(capsys, *command, "--config", path)
        assert_refused(out, f"config file {path}:3: {key} = ", f"is a string, but {key} takes {kind}", fix)
    assert not (tmp_path / "run").exists()


def test_a_toml_string_under_a_trl_name_names_the_key_as_written(capsys, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[algo]\nlr = 0.001\n\nmax_steps = "7"\n', encoding="utf-8")  # a TRL name under [algo]
    out = run_cli(capsys, "config", "show", "--config", path)
    assert_refused(out, f"config file {path}:4: algo.max_steps = \"7\" is a string, but trainer.steps takes an "
                   "integer — write max_steps = 7, without quotes")  # fmt: skip


def test_set_still_parses_text_and_a_toml_file_keeps_its_text_shorthands(tmp_path):
    """``--set`` values are text; in a file ``"none"`` unsets an optional key (TOML has no null), a TRL value
    spelling (``scale_rewards = "none"``) still translates, and a string key takes any string."""
    cfg = load_config(None, ["trainer.steps=5", "algo.lr=1e-4", "filter.boxed=false"])
    assert (cfg.trainer.steps, cfg.algo.lr, cfg.filter.boxed) == (5, 1e-4, False)
    path = tmp_path / "c.toml"
    path.write_text('[algo]\ndual_clip = "none"\nscale_rewards = "none"\n[trainer]\nrun_name = "5"\n'
                    '[filter]\nanswer_markers = "####,ANS"\n', encoding="utf-8")  # fmt: skip
    cfg = load_config(path)
    assert (cfg.algo.dual_clip, cfg.algo.std_normalize, cfg.trainer.run_name) == (None, False, "5")
    assert cfg.filter.answer_markers == ["####", "ANS"]


def test_a_string_for_an_integer_in_a_saved_config_is_refused(capsys, tmp_path):
    """tirl writes typed JSON; ``"steps": "5"`` in a run's config.json was read as 5 on ``--resume``."""
    from tirl.config import config_to_dict

    saved = config_to_dict(load_config(None))
    saved["trainer"]["steps"] = "5"
    (tmp_path / "config.json").write_text(json.dumps(saved), encoding="utf-8")
    out = run_cli(capsys, "config", "show", "--resume", tmp_path)
    assert_refused(out, 'saved config trainer.steps = "5" is a string, but tirl writes an integer there',
                   "write 5 without quotes, or restore the config.json tirl wrote")  # fmt: skip


def test_toml_line_names_a_line_only_when_one_line_sets_the_value() -> None:
    from tirl.config_values import toml_line

    text = '[env]\nseed = "1"\n[trainer]\nseed = 2\nsteps="5"\ntrainer.x = {  steps = "5" }\n'
    assert toml_line(text, "seed", "1") == 2
    assert toml_line(text, "steps", "5") is None  # two lines: no guess
    assert toml_line(text, "steps", "6") is None
