"""Error lines stay short and name what the user can type; summaries go where the rest of the output goes.

Echoed values are cut (:func:`tirl.errors.show_value`): a 5000-character env name or key gave a 5,200-character
line. Typo hints name the full dotted key; a section given a value says how to set a key inside it; `tirl model
check` names its own usage; `tirl tasks export` prints its summary on stdout with the rest; `tirl sft --help`
names each option's default.
"""

from __future__ import annotations

import re

import pytest
from cli_run import assert_refused, run_cli

LONG = "x" * 5000


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["config", "show", "--set", f"env.name={LONG}"], "unknown environment 'xxx"),
        (["train", "--env", f"tirl.envs:{LONG}", "--no-progress"], "registers no task source"),
        (["config", "show", "--set", f"trainer.{LONG}=1"], "unknown config key 'trainer.xxx"),
        (["config", "show", "--set", f"{LONG}=1"], "unknown config key 'xxx"),
        (["config", "show", "--set", LONG], "is not key=value"),
        (["config", "show", "--set", f"algo={LONG}"], "must be a table of keys"),
        (["train", "--env", LONG, "--no-progress"], "unknown environment 'xxx"),
        (["train", "--set", f"env.name={LONG}", "--no-progress"], "unknown environment 'xxx"),
    ],
)
def test_a_long_value_is_not_echoed_whole(capsys, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)  # a run directory, if one were made, lands here
    out = run_cli(capsys, *argv)
    assert_refused(out, needle, "...(50")  # "...(5002 characters)": the length, not the value
    assert len(out.err) < 400, len(out.err)
    assert list(tmp_path.iterdir()) == []


def test_import_errors_do_not_echo_a_long_module_name(capsys):
    from tirl.envs.registry import import_object
    from tirl.errors import ConfigError

    for target in (f"{LONG}:f", f"tirl.envs:{LONG}", f"{LONG}"):
        with pytest.raises(ConfigError) as got:
            import_object(target, "environment")
        assert len(str(got.value)) < 400, str(got.value)[:200]


@pytest.mark.parametrize(
    ("key", "said"),
    [("trainer.stepz", "'trainer.stepz' — did you mean 'trainer.steps'?"),
     ("algo.clip_hi", "'algo.clip_hi' — did you mean 'algo.clip_high'?"),
     ("trainr.steps", "'trainr' — did you mean 'trainer'?")],
)  # fmt: skip
def test_a_typo_hint_names_the_full_key(capsys, key, said):
    """It said "did you mean 'steps'", which `--set steps=...` does not accept."""
    assert_refused(run_cli(capsys, "config", "show", "--set", f"{key}=1"), f"unknown config key {said}")


def test_a_value_for_a_section_says_how_to_set_a_key(capsys):
    out = run_cli(capsys, "config", "show", "--set", "algo=0.3")
    assert_refused(out, "config section [algo] must be a table of keys, not '0.3' — set a key inside it: --set algo.")


def test_model_check_of_a_missing_directory_names_its_own_usage(capsys, tmp_path):
    """The fix said "give --model (--init)", options `tirl model check` does not have."""
    missing = tmp_path / "nonexist"
    out = run_cli(capsys, "model", "check", missing)
    assert_refused(out, f"{missing}: does not exist — give `tirl model check DIR` a local Hugging Face model")
    assert "--model" not in out.err and "--init" not in out.err


def test_tasks_export_prints_its_summary_on_stdout(capsys, tmp_path):
    """The first line ("wrote N swe-lite tasks to ...") went to stderr, the two lines after it to stdout."""
    out = run_cli(capsys, "tasks", "export", "--n", "1", "--set", "env.difficulty=1", "--out", tmp_path / "t")
    assert out.code == 0 and out.err == "", out.err
    lines = out.out.splitlines()
    assert lines[0] == f"wrote 1 swe-lite tasks to {tmp_path / 't'}/" and len(lines) == 3
    assert "SkyRL-style rows" in lines[1] and "swe-lite JSONL" in lines[2]


def test_sft_help_names_its_defaults(capsys) -> None:
    """The README says `tirl sft --help` shows SFTConfig's defaults; it showed none. 0 is a default too."""
    from tirl.sft_config import SFTConfig

    out = run_cli(capsys, "sft", "--help")
    assert out.code == 0
    text = " ".join(out.out.split())  # argparse wraps lines
    d = SFTConfig()
    for flag, value in [("--steps", d.steps), ("--lr", d.lr), ("--seed", d.seed), ("--env", d.env)]:
        assert re.search(rf"{flag} \S+ .*?\(default {re.escape(str(value))}\)", text), (flag, value)
    assert "(default None)" not in text and "(default False)" not in text


def test_eval_help_says_a_run_directory_brings_its_own_task_count(capsys) -> None:
    """`tirl eval --model RUN` evaluates the run's env.eval_size tasks (a note says so); --help said 200."""
    text = " ".join(run_cli(capsys, "eval", "--help").out.split())
    assert "--n N number of tasks (env.eval_size: 200, or a run directory's own)" in text
    assert "(default 200)" not in text


@pytest.mark.parametrize(
    ("toml", "said"),
    [("[algo]\nclip_hgh = 0.3\n", "unknown config key 'algo.clip_hgh' — did you mean 'algo.clip_high'?"),
     ("steps = 3\n", "unknown config key 'steps' — did you mean 'trainer.steps'? (steps = ... under [trainer])"),
     ("[Trainer]\nsteps = 3\n", "unknown config key 'Trainer' — did you mean 'trainer'?")],
)  # fmt: skip
def test_an_unknown_key_in_a_config_file_names_the_file(capsys, tmp_path, toml, said):
    """It read as a --set typo ("unknown config key 'steps' — valid keys: algo, env, ..."), with no word of the
    file, and a key written above every table was not matched to the section that holds it."""
    path = tmp_path / "run.toml"
    path.write_text(toml, encoding="utf-8")
    assert_refused(run_cli(capsys, "config", "show", "--config", path, "--set", "algo.lr=1e-4"),
                   f"error: config file {path}: {said}")  # fmt: skip
    path.write_text("[algo]\nlr = 1e-4\n", encoding="utf-8")  # a --set typo beside a good file is the --set's
    assert_refused(run_cli(capsys, "config", "show", "--config", path, "--set", "steps=3"),
                   "error: unknown config key 'steps' — did you mean 'trainer.steps'?")  # fmt: skip


def test_sft_of_one_step_says_so_in_the_singular(capsys, tmp_path):
    """It printed "saved OUT after 1 steps"."""
    out = tmp_path / "m"
    got = run_cli(capsys, "sft", "--env", "tir-chain", "--out", out, "--steps", "1", "--train-tasks", "2",
                  "--eval-tasks", "1", "--eval-every", "1", "--batch-size", "2", "--copy-steps", "0")  # fmt: skip
    assert got.code == 0, got.err
    assert f"saved {out} after 1 step (" in got.out + got.err


@pytest.mark.parametrize(
    ("toml", "said"),
    [("[algo]\nlr = -1\n", "algo.lr=-1.0 is invalid: use a positive learning rate"),
     ("[trainer]\nsteps = 0\n", "trainer.steps=0 is invalid: use at least 1")],
)  # fmt: skip
def test_a_value_out_of_range_in_a_config_file_names_the_file(capsys, tmp_path, toml, said):
    """It said "config algo.lr=-1.0 is invalid", as for a --set, with no word of the file beside the --set."""
    path = tmp_path / "run.toml"
    path.write_text(toml, encoding="utf-8")
    got = run_cli(capsys, "config", "show", "--config", path, "--set", "algo.clip_high=0.3")
    assert_refused(got, f"error: config file {path}: {said}")
    assert_refused(run_cli(capsys, "config", "show", "--set", "algo.lr=-1"), "error: config algo.lr=-1.0 is invalid")
