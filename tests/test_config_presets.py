"""Per-env defaults (:mod:`tirl.config_presets`): under the file and ``--set``, shown by ``tirl config show``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from tests.cli_contract.cli_run import assert_refused, run_cli

from tirl.config import TirlConfig, config_to_dict, load_config, resolve_config, tirl_keys
from tirl.config_presets import ENV_PRESETS


def _value(cfg: TirlConfig, key: str) -> object:
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def test_swe_lite_gets_its_job_from_the_env_name_alone() -> None:
    resolved = resolve_config(None, ["env.name=swe-lite"])
    cfg = resolved.config
    assert (cfg.env.difficulty, cfg.env.max_turns) == (2, 10)  # the curriculum, not the 33 hand-planted bugs
    assert (cfg.generation.max_new_tokens, cfg.generation.max_total_tokens) == (384, 6144)
    for key, value in ENV_PRESETS["swe-lite"].items():
        assert _value(cfg, key) == value and resolved.sources[key] == "env swe-lite", key
    assert resolved.sources["env.name"] == "--set"


def test_other_envs_keep_the_dataclass_defaults() -> None:
    for env in ("tir-chain", "tir-math"):
        resolved = resolve_config(None, [f"env.name={env}"])
        assert not [s for s in resolved.sources.values() if s.startswith("env ")]
        assert resolved.config.env.difficulty == 1 and resolved.config.env.max_turns == 6
    assert resolve_config().config == TirlConfig()  # no env named: tir-chain, no preset


def test_file_and_set_win_over_the_preset(tmp_path: Path) -> None:
    f = tmp_path / "swe.toml"
    f.write_text('[env]\nname = "swe-lite"\nmax_turns = 8\n')
    resolved = resolve_config(f, ["env.difficulty=1"])
    assert resolved.config.env.max_turns == 8 and resolved.sources["env.max_turns"] == "file"
    assert resolved.config.env.difficulty == 1 and resolved.sources["env.difficulty"] == "--set"
    assert resolved.config.generation.max_new_tokens == 384  # the rest of the preset still applies


def test_a_saved_config_keeps_its_own_values() -> None:
    saved = config_to_dict(load_config(None, ["env.name=swe-lite", "env.difficulty=1", "env.max_turns=4"]))
    resolved = resolve_config(None, ["trainer.steps=3"], base=saved)
    assert (resolved.config.env.difficulty, resolved.config.env.max_turns) == (1, 4)
    assert resolved.sources["env.difficulty"] == "saved"


def test_every_preset_key_is_a_real_key_and_validates() -> None:
    keys = tirl_keys()
    for env, preset in ENV_PRESETS.items():
        assert set(preset) <= keys, env
        assert load_config(None, [f"env.name={env}"]).env.name == env  # every value passes its section's checks


def test_config_show_env_prints_each_preset_value_with_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_cli(capsys, "config", "show", "--env", "swe-lite")
    assert got.code == 0, got.err
    assert 'name = "swe-lite"  # --set' in got.out
    assert "difficulty = 2  # env swe-lite" in got.out and "max_turns = 10  # env swe-lite" in got.out
    assert "clip_high = 0.28  # default" in got.out
    shown = tmp_path / "shown.toml"
    shown.write_text(got.out)
    assert tomllib.loads(got.out)["env"]["difficulty"] == 2
    assert load_config(shown) == load_config(None, ["env.name=swe-lite"])
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config_to_dict(load_config(None, ["env.name=swe-lite"]))))
    resumed = run_cli(capsys, "config", "show", "--resume", run)
    assert resumed.code == 0 and "difficulty = 2  # saved" in resumed.out


def test_tirl_sft_demonstrates_swe_lite_with_the_turns_and_caps_tirl_train_uses() -> None:
    import argparse

    from tirl.commands.sft import _config, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    sft = _config(parser.parse_args(["--out", "unused", "--env", "swe-lite"]))
    train = load_config(None, ["env.name=swe-lite"])
    assert (sft.max_turns, sft.max_new_tokens, sft.max_total_tokens) == (
        train.env.max_turns, train.generation.max_new_tokens, train.generation.max_total_tokens,
    )  # fmt: skip


def test_train_warns_when_the_episode_cap_exceeds_the_models_positions(tmp_path: Path) -> None:
    from tirl.models.builtin import builtin_model_path
    from tirl.trainer.preflight import context_warning

    tiny_tir = f"model.path={builtin_model_path()}"
    warning = context_warning(load_config(None, ["env.name=swe-lite", tiny_tir]))  # tiny-tir: 1,024 positions
    assert warning is not None and "max_total_tokens=6144" in warning and "1024 positions" in warning
    assert context_warning(load_config(None, ["env.name=swe-lite"])) is None  # tiny-swe: 6,144 positions
    assert context_warning(load_config(None, [])) is None  # tir-chain: 512 tokens in tiny-chain's 1,024
    fits = load_config(None, ["env.name=swe-lite", tiny_tir, "generation.max_total_tokens=1024"])
    assert context_warning(fits) is None
    assert context_warning(load_config(None, ["env.name=swe-lite", f"model.path={tmp_path}"])) is None  # unreadable


def test_config_show_refuses_an_unknown_env_as_train_does(capsys: pytest.CaptureFixture[str]) -> None:
    """``tirl config show --env typo`` used to print a config that ``tirl train`` would then refuse."""
    assert_refused(run_cli(capsys, "config", "show", "--env", "swe-lit"), "unknown environment 'swe-lit'", "swe-lite")
    assert_refused(run_cli(capsys, "config", "show", "--set", "env.name=nope"), "unknown environment 'nope'")
    for name in ("pkg.mod:Factory", "skyrl-gym:gsm8k"):  # import strings and family variants: nothing imported
        shown = run_cli(capsys, "config", "show", "--env", name)
        assert shown.code == 0 and f'name = "{name}"  # --set' in shown.out
