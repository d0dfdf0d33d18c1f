"""Mistakes a new user makes that used to pass without a word: a flag and ``--set`` naming the same key (the flag
won silently), ``--run-dir`` beside ``--resume`` (ignored), an output path ending in ``/`` (written as a file of
that name). Each is now one ``error:`` line, exit 2, before anything loads or is written.

Not covered here: the eval record's model name and Ctrl-C (they load a model: tests/trainer/test_train_cli.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli_contract.cli_run import TRAJ, assert_refused, run_cli, write_jsonl

from tirl.config import TirlConfig, config_to_dict
from tirl.errors import OutputError
from tirl.fileio import check_output


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["train", "--steps", "1", "--set", "trainer.steps=3"], ["--steps 1", "trainer.steps=3", "give it once"]),
        (["train", "--steps", "1", "--set", "max_steps=3"], ["--set max_steps=3", "both set trainer.steps"]),
        (["train", "--env", "tir-math", "--set", "env.name=tir-chain"], ["--env tir-math", "env.name"]),
        (["train", "--model", "/m", "--set", "model.path=/n"], ["--model /m", "model.path=/n"]),
        (["eval", "--n", "3", "--set", "env.eval_size=2"], ["--n 3", "env.eval_size"]),
        (["eval", "--seed", "1", "--set", "env.seed=2"], ["--seed 1", "env.seed"]),
        (["eval", "--model", "/m", "--set", "model.path=/n"], ["--model /m", "model.path"]),
        (["config", "show", "--env", "tir-math", "--set", "env.name=tir-chain"], ["--env tir-math", "env.name"]),
    ],
)
def test_a_flag_and_a_set_of_the_same_key_are_refused(capsys, tmp_path, monkeypatch, argv, needles) -> None:
    monkeypatch.chdir(tmp_path)  # a train that got through would write runs/ here
    if argv[0] == "train" and "--model" not in argv:  # one that got through stops at its model, not after a job
        argv = [*argv, "--set", f"model.path={tmp_path / 'missing'}"]
    assert_refused(run_cli(capsys, *argv), *needles)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "command",
    [["train"], ["eval"], ["config", "show"], ["ablate", "--out", "abl"], ["tasks", "export", "--out", "tasks"]],
)
def test_a_key_set_twice_is_refused(capsys, tmp_path, monkeypatch, command) -> None:
    """``--set env.seed=1 --set env.seed=2`` took 2 without a word (the last one won)."""
    monkeypatch.chdir(tmp_path)
    argv = [*command, "--set", "env.seed=1", "--set", "env.seed = 2"]
    if command[0] == "train":  # one that got through stops at its model, not after a job
        argv += ["--set", f"model.path={tmp_path / 'missing'}"]
    assert_refused(run_cli(capsys, *argv), "--set env.seed=1", "--set env.seed = 2", "both set env.seed")
    assert list(tmp_path.iterdir()) == []


def test_a_key_set_twice_under_an_alias_is_refused(capsys) -> None:
    out = run_cli(capsys, "config", "show", "--set", "trainer.steps=3", "--set", "max_steps=4")
    assert_refused(out, "--set trainer.steps=3", "--set max_steps=4", "both set trainer.steps")


def test_a_flag_and_a_set_of_other_keys_combine(capsys) -> None:
    out = run_cli(capsys, "config", "show", "--env", "tir-math", "--set", "trainer.steps=3")
    assert out.code == 0, out.err
    assert 'name = "tir-math"  # --set' in out.out and "steps = 3  # --set" in out.out


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--set", "model.path={missing}"],
        ["eval", "--model", "{missing}"],
        ["config", "show"],
        ["tasks", "export", "--n", "1", "--out", "{tmp}/tasks"],
        ["ablate", "--dry-run", "--out", "{tmp}/ablate"],
    ],
)
def test_one_key_set_twice_to_two_values_is_refused(capsys, tmp_path, monkeypatch, argv) -> None:
    """``--set K=3 --set K=5``: the last won without a word, on every command that takes ``--set``.

    A TRL alias and its tirl key are one key; the same value twice passes (``config show`` shows it once). The
    train and eval here name a missing model, so one that got through stops there (nothing is trained).
    """
    monkeypatch.chdir(tmp_path)
    names = {"missing": str(tmp_path / "missing"), "tmp": str(tmp_path)}
    base = [a.format(**names) for a in argv]
    twice = ["--set", "env.eval_size=3", "--set", "env.eval_size=5"]
    assert_refused(run_cli(capsys, *base, *twice), "--set env.eval_size=3 and --set env.eval_size=5", "give it once")
    alias = ["--set", "num_generations=4", "--set", "algo.group_size=8"]
    assert_refused(run_cli(capsys, *base, *alias), "--set num_generations=4 and --set algo.group_size=8")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no runs/, no tasks, no ablation directory
    same = run_cli(capsys, "config", "show", "--set", "env.eval_size=3", "--set", "env.eval_size=3")
    assert same.code == 0 and "eval_size = 3  # --set" in same.out, same.err


def test_run_dir_beside_resume_is_refused(capsys, tmp_path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config_to_dict(TirlConfig())))
    other = tmp_path / "other"
    assert_refused(run_cli(capsys, "train", "--resume", run, "--run-dir", other), "--run-dir", f"continues in {run}")
    assert not other.exists() and sorted(p.name for p in run.iterdir()) == ["config.json"]


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["filter", "{traj}", "--verdicts", "{out}"], "--verdicts"),
        (["filter", "{traj}", "--verdicts", "{v}", "--kept", "{out}"], "--kept"),
        (["report", "{tmp}", "--out", "{out}"], "--out"),
        (["diagnose", "pipeline", "{tmp}", "--bundle", "{out}"], "--bundle"),
        (["review", "{traj}", "--base-url", "http://127.0.0.1:9", "--model", "m", "--out", "{out}"], "--out"),
    ],
)
def test_an_output_file_ending_in_a_slash_is_refused(capsys, tmp_path, argv, option) -> None:
    traj = write_jsonl(tmp_path / "t.jsonl", [TRAJ])
    out = f"{tmp_path}/reports/"
    names = {"traj": str(traj), "out": out, "v": str(tmp_path / "v.jsonl"), "tmp": str(tmp_path)}
    got = run_cli(capsys, *(a.format(**names) for a in argv))
    assert_refused(got, option, "ends with '/'", "give a file path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]  # no file named "reports", no verdicts


def test_check_output_refuses_a_path_ending_in_a_slash(tmp_path: Path) -> None:
    """The writer's own check, for callers that pass a string (``tirl sft --demos-out``)."""
    with pytest.raises(OutputError, match="ends with '/'"):
        check_output(f"{tmp_path}/demos/")
    assert check_output(f"{tmp_path}/demos") == tmp_path / "demos"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (["--set", "env.eval_size=4"], "env.eval_size=4"),
        (["--env", "tir-math"], 'env.name="tir-math"'),
        (["--set", "env.seed=3"], "env.seed=3"),
    ],
)
def test_resume_that_changes_the_evaluation_set_is_refused(capsys, tmp_path, change, key) -> None:
    """``--resume RUN --set env.eval_size=4`` on a run evaluated on 2 tasks compared 2 tasks before with 4 after.

    The model path is missing, so a resume that got through stops at the model (no training on the old code).
    """
    run = tmp_path / "run"
    run.mkdir()
    saved = config_to_dict(TirlConfig())
    saved["env"]["eval_size"] = 2
    saved["model"]["path"] = str(tmp_path / "missing")
    (run / "config.json").write_text(json.dumps(saved))
    (run / "eval_before.json").write_text('{"accuracy": 0.5, "n": 2}')
    got = run_cli(capsys, "train", "--resume", run, *change)
    assert_refused(got, key, f"changes the evaluation set of {run}", "trainer.eval_before_after=false")
    off = run_cli(capsys, "train", "--resume", run, *change, "--set", "trainer.eval_before_after=false")
    (run / "eval_before.json").unlink()
    unevaluated = run_cli(capsys, "train", "--resume", run, *change)
    for through in (off, unevaluated):  # no evaluation after, or none before: the change is the user's to make
        assert through.code == 2 and "missing: does not exist" in through.err.splitlines()[-1], through


@pytest.mark.parametrize("flag", [["--model"], ["--set", "model.path="]])
def test_resume_with_another_starting_model_is_refused(capsys, tmp_path, flag) -> None:
    """``--resume RUN --model M`` trained on from the checkpoint's weights, wrote ``model.path=M`` into the run's
    config.json and took M as the KL reference (``algo.kl_coef > 0``): a record of a model the run never used."""
    run, orig, other = tmp_path / "run", tmp_path / "orig", tmp_path / "other"
    for d in (run, orig, other):
        d.mkdir()
    saved = config_to_dict(TirlConfig())
    saved["model"]["path"] = str(orig)
    (run / "config.json").write_text(json.dumps(saved))
    before = (run / "config.json").read_text()

    def given(path: Path) -> list[str]:
        return [*flag, str(path)] if len(flag) == 1 else [flag[0], flag[1] + str(path)]

    got = run_cli(capsys, "train", "--resume", run, *given(other))
    assert_refused(got, f"{flag[-1].rstrip('=')}", f"{run} started from {orig}", "leave it out")
    assert (run / "config.json").read_text() == before
    builtin = {**saved, "model": {**saved["model"], "path": None}}
    (run / "config.json").write_text(json.dumps(builtin))
    assert_refused(run_cli(capsys, "train", "--resume", run, *given(other)), f"{run} started from the built-in model")
    (run / "config.json").write_text(before)
    for through in (orig, tmp_path / "run" / ".." / "orig"):  # the same model, spelled either way: no refusal
        assert "started from" not in run_cli(capsys, "train", "--resume", run, *given(through)).err
    orig.rmdir()  # the model moved: --model names where it is now (the saved path is the KL reference)
    assert "started from" not in run_cli(capsys, "train", "--resume", run, *given(other)).err


@pytest.mark.parametrize("name", ["../escape", "a/b", ".", "..", ".hidden"])
def test_a_run_name_that_is_not_one_directory_name_is_refused(capsys, tmp_path, monkeypatch, name) -> None:
    """``trainer.run_name=../escape`` wrote the run outside trainer.run_dir, ``a/b`` nested it, ``.`` (the root
    itself, which exists) made the hidden ``runs/.-2``. The model path stops a run that got through."""
    monkeypatch.chdir(tmp_path)
    got = run_cli(capsys, "train", "--set", f"trainer.run_name={name}", "--set", f"model.path={tmp_path / 'missing'}",
                  "--set", f"trainer.run_dir={tmp_path / 'runs'}")  # fmt: skip
    assert_refused(got, f"trainer.run_name={name!r}", "one directory name", "trainer.run_dir")
    assert list(tmp_path.iterdir()) == []


def test_master_port_without_ranks_is_refused(capsys, tmp_path, monkeypatch) -> None:
    """``--master-port`` with one process was ignored (the model path stops a run that got through)."""
    monkeypatch.chdir(tmp_path)
    got = run_cli(capsys, "train", "--master-port", "29511", "--set", f"model.path={tmp_path / 'missing'}")
    assert_refused(got, "--master-port", "--nproc is 1", "add --nproc N")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("value", ["99999", "-1"])
def test_master_port_out_of_range_is_refused_at_parse_time(capsys, tmp_path, monkeypatch, value) -> None:
    """``--nproc 2 --master-port 99999`` created the run's lock, then failed at bind() with "a number ... too large"."""
    monkeypatch.chdir(tmp_path)
    got = run_cli(capsys, "train", "--nproc", "2", "--master-port", value, "--set", f"model.path={tmp_path / 'm'}")
    assert_refused(got, "--master-port", "is not a port: use 1-65535")
    assert list(tmp_path.iterdir()) == []


def test_run_dir_that_holds_other_files_is_refused(capsys, tmp_path, monkeypatch) -> None:
    """``--run-dir runs`` (meant as the root) wrote a run's files among the other runs' directories.

    A lock an interrupted start left and ``tirl ablate``'s ``train.log`` and shared ``eval_before.json`` are a run's
    own: those pass (the missing model then stops the run, so nothing trains here).
    """
    root = tmp_path / "runs"
    (root / "20261204-101010-tir-chain").mkdir(parents=True)
    missing = ["--set", f"model.path={tmp_path / 'missing'}"]
    got = run_cli(capsys, "train", "--run-dir", root, *missing)
    assert_refused(got, f"{root}: is not empty (20261204-101010-tir-chain)", f"--set trainer.run_dir={root}")
    assert sorted(p.name for p in root.iterdir()) == ["20261204-101010-tir-chain"]
    own = tmp_path / "own"
    own.mkdir()
    (own / ".lock").write_text("")
    (own / "train.log").write_text("")
    (own / "eval_before.json").write_text("{}")
    assert_refused(run_cli(capsys, "train", "--run-dir", own, *missing), "missing: does not exist")
