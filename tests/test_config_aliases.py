"""TRL's and verl's names for tirl keys, ``tirl config show`` and ``tirl config aliases``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from tests.cli_contract.cli_run import assert_refused, run_cli

from tirl.config import config_to_dict, load_config, resolve_config, tirl_keys
from tirl.config_aliases import TRL, VERL, alias_table
from tirl.errors import ConfigError


@pytest.mark.parametrize(
    ("given", "key", "value"),
    [
        ("num_generations=4", "algo.group_size", 4),
        ("algo.num_generations=4", "algo.group_size", 4),
        ("algo.beta=0.04", "algo.kl_coef", 0.04),
        ("epsilon_high=0.3", "algo.clip_high", 0.3),
        ("algo.learning_rate=1e-6", "algo.lr", 1e-6),
        ("loss_type=dapo", "algo.loss_agg", "token_mean"),
        ("loss_type=grpo", "algo.loss_agg", "seq_mean"),
        ("scale_rewards=none", "algo.std_normalize", False),
        ("actor_rollout_ref.rollout.n=4", "algo.group_size", 4),
        ("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "algo.loss_agg", "seq_mean"),
        ("actor_rollout_ref.actor.kl_loss_type=low_var_kl", "algo.kl_estimator", "k3"),
        ("actor_rollout_ref.actor.kl_loss_type=mse", "algo.kl_estimator", "k2"),
        ("actor_rollout_ref.actor.clip_ratio_c=3.5", "algo.dual_clip", 3.5),
        ("data.train_batch_size=4", "trainer.prompts_per_step", 4),
        ("trainer.total_training_steps=7", "trainer.steps", 7),
        ("algo.loss_agg=token-mean", "algo.loss_agg", "token_mean"),
        ("algo.kl_estimator=low_var_kl", "algo.kl_estimator", "k3"),
    ],
)
def test_a_foreign_name_sets_its_tirl_key_with_a_note(given: str, key: str, value: object) -> None:
    resolved = resolve_config(None, [given])
    section, name = key.split(".")
    assert getattr(getattr(resolved.config, section), name) == value
    alias = [n for n in resolved.notes if " is set but " not in n]  # not the note of a key left moot (kl_coef 0)
    assert len(alias) == 1 and key in alias[0]
    assert resolved.sources[key] == "--set"


def test_tirl_names_and_values_leave_no_note() -> None:
    resolved = resolve_config(
        None, ["algo.group_size=4", "algo.loss_agg=token_mean", "algo.kl_estimator=k3", "algo.kl_coef=0.01"]
    )
    assert resolved.notes == []


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ("actor_rollout_ref.actor.ppo_mini_batch_size=2", "algo.minibatches = trainer.prompts_per_step /"),
        ("loss_type=dr_grpo", "token_mean (TRL's dapo/bnpo)"),
        ("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum", "use one of them"),
        ("actor_rollout_ref.actor.kl_loss_type=abs", "k2 (verl's mse)"),
        ("importance_sampling_level=sequence", "not implemented"),
        ("algorithm.adv_estimator=gae", "critic-free"),
        ("scale_rewards=batch", "group's std"),
    ],
)
def test_a_name_that_means_something_else_says_how_to_convert(given: str, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(None, [given])
    assert needle in str(exc.value)


def test_a_toml_file_may_use_verl_sections(tmp_path: Path) -> None:
    f = tmp_path / "verl.toml"
    f.write_text('[actor_rollout_ref.rollout]\nn = 4\n[actor_rollout_ref.actor]\nloss_agg_mode = "token-mean"\n'
                 "[algo]\nlr = 0.001\n")  # fmt: skip
    resolved = resolve_config(f, ["trainer.steps=3"])
    cfg = resolved.config
    assert (cfg.algo.group_size, cfg.algo.loss_agg, cfg.algo.lr, cfg.trainer.steps) == (4, "token_mean", 1e-3, 3)
    assert resolved.sources == {"algo.group_size": "file", "algo.loss_agg": "file", "algo.lr": "file",
                                "trainer.steps": "--set"}  # fmt: skip
    assert len(resolved.notes) == 2


def test_a_later_set_wins_over_an_alias_for_the_same_key() -> None:
    assert load_config(None, ["num_generations=4", "algo.group_size=6"]).algo.group_size == 6
    assert load_config(None, ["algo.group_size=6", "num_generations=4"]).algo.group_size == 4


def test_every_alias_targets_a_real_key() -> None:
    keys = tirl_keys()
    for name, alias in [*TRL.items(), *VERL.items()]:
        assert alias.target is None or alias.target in keys, name
        assert alias.target is not None or alias.convert, name
    assert len(alias_table()) == len(TRL) + len(VERL)


def test_config_show_prints_toml_that_reads_back_with_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[filter]\nanswer_markers = ["####", "a,b"]\n')
    got = run_cli(capsys, "config", "show", "--config", f, "--set", "num_generations=4", "--set", "algo.dual_clip=none")
    assert got.code == 0, got.err
    assert "note: num_generations is TRL's name for algo.group_size" in got.err
    assert "group_size = 4  # --set" in got.out and 'answer_markers = ["####", "a,b"]  # file' in got.out
    assert "# dual_clip is unset  # --set" in got.out and "clip_high = 0.28  # default" in got.out
    text = tmp_path / "shown.toml"
    text.write_text(got.out)
    assert tomllib.loads(got.out)["algo"]["group_size"] == 4
    back = load_config(text, ["algo.dual_clip=none"])  # TOML has no null: unset keys are comments
    assert back == load_config(f, ["num_generations=4", "algo.dual_clip=none"])


def test_config_show_of_a_run_marks_saved_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config_to_dict(load_config(None, ["trainer.steps=3"]))))
    got = run_cli(capsys, "config", "show", "--resume", tmp_path, "--set", "trainer.steps=9")
    assert got.code == 0 and "steps = 9  # --set" in got.out and "seed = 0  # saved" in got.out
    assert_refused(run_cli(capsys, "config", "show", "--resume", tmp_path / "nope"), "config.json")
    assert_refused(run_cli(capsys, "config", "show", "--set", "loss_type=dr_grpo"), "dr_grpo")


def test_config_aliases_lists_every_name(capsys: pytest.CaptureFixture[str]) -> None:
    got = run_cli(capsys, "config", "aliases")
    assert got.code == 0
    for name in [*TRL, *VERL]:
        assert name in got.out


def _resolve_train(argv: list[str]) -> tuple[object, Path]:
    """``tirl train ARGV``'s config resolution (the real parser and resolve(); no model loads)."""
    import argparse

    from tirl.commands import train

    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    cfg, run_dir, _ = train.resolve(parser.parse_args(argv))
    return cfg, run_dir


def test_a_resumed_run_repeats_the_alias_notes_of_its_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: --resume read config.json (tirl's names only) and printed no note, new --set aliases included."""
    run = tmp_path / "run"
    cfg, _ = _resolve_train(["--run-dir", str(run), "--set", "num_generations=4", "--set", "algo.beta=0.02"])
    (run / "config.json").write_text(json.dumps(config_to_dict(cfg)), encoding="utf-8")  # as TrainingRun writes it
    first = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert len(first) == 2 and "num_generations is TRL's name for algo.group_size" in first[0]
    resumed, _ = _resolve_train(["--resume", str(run), "--set", "actor_rollout_ref.rollout.n=4"])
    err = capsys.readouterr().err.splitlines()
    assert [line.replace(" (saved with the run)", "") for line in err[:2]] == first
    assert all(line.endswith("(saved with the run)") for line in err[:2])
    assert err[2] == "note: actor_rollout_ref.rollout.n is verl's name for algo.group_size" and len(err) == 3
    assert resumed == cfg  # type: ignore[comparison-overlap]
    from tirl.cli import main

    assert main(["config", "show", "--resume", str(run)]) == 0  # the saved notes, and the new one kept
    notes = capsys.readouterr().err.splitlines()
    assert len(notes) == 3 and all(line.endswith("(saved with the run)") for line in notes)
