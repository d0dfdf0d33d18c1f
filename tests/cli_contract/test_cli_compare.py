"""``tirl compare`` on files shaped as ``tirl eval --json`` and a run's ``summary.json`` write them.

The writers themselves are exercised for real in tests/trainer/test_train_cli.py (a run's summary) and the
``tirl eval`` tests; here the records are built to the same shape so that every figure is known.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import assert_refused, run_cli

from tirl.ablation_stats import mcnemar_exact


def _record(solved: dict[str, int], k: int, **extra: object) -> dict[str, object]:
    tasks = [{"id": t, "correct": j < s, "termination": "submitted", "turns": 3}
             for t, s in sorted(solved.items()) for j in range(k)]  # fmt: skip
    decoding = "greedy" if k == 1 else "sampled (temperature 0.7, top-p 1)"
    return {"model": "m", "split": "validation", "decoding": decoding, "tasks": tasks, **extra}


def _write(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def test_two_sampled_evaluations(capsys, tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", _record({"t1": 0, "t2": 1, "t3": 2, "t4": 0}, 4))
    b = _write(tmp_path / "b.json", _record({"t1": 2, "t2": 1, "t3": 4, "t4": 0}, 4))
    got = run_cli(capsys, "compare", a, b)
    assert got.code == 0, got.err
    assert "solve rate (pass@1): 0.1875 -> 0.4375: +25.0 points" in got.out
    assert "2 tasks up, 0 down, 2 equal; Wilcoxon signed-rank exact p = 0.5" in got.out
    assert "pass@4: 2 -> 3 of 4: 1 solved after only, 0 before only" in got.out
    record = json.loads(run_cli(capsys, "compare", a, b, "--json").out)
    assert record["n"] == 4 and record["samples"] == [4, 4] and record["change_points"] == pytest.approx(25.0)


def test_a_run_directory_alone_is_its_before_and_after(capsys, tmp_path: Path) -> None:
    before = {f"t{i}": int(i < 3) for i in range(10)}
    after = {f"t{i}": int(i >= 2) for i in range(10)}  # t0, t1 lost; t3..t9 gained
    summary = {"run_dir": str(tmp_path), "eval/before": _record(before, 1), "eval/after": _record(after, 1)}
    _write(tmp_path / "summary.json", summary)
    got = run_cli(capsys, "compare", tmp_path)
    assert got.code == 0, got.err
    assert "solved: 0.3000 -> 0.8000: +50.0 points" in got.out
    assert f"7 tasks up, 2 down, 1 equal; McNemar exact p = {mcnemar_exact(7, 2):.3g}" in got.out
    other = _write(tmp_path / "e.json", _record(before, 1))
    assert "solved: 0.3000 -> 0.8000" in run_cli(capsys, "compare", other, tmp_path).out  # a run dir: its after


def test_different_decodings_are_compared_with_a_note(capsys, tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", _record({"t1": 1, "t2": 0}, 1))
    b = _write(tmp_path / "b.json", _record({"t1": 3, "t2": 1}, 4))
    got = run_cli(capsys, "compare", a, b)
    assert got.code == 0 and "warning: the same tasks were evaluated differently (decoding greedy vs sampled" in got.err
    assert "1 vs 4 episodes per task" in got.err
    assert "paired: 2 tasks (1 vs 4 episodes per task)" in got.out


#: What the records of ``tirl eval --json`` carry (tirl.trainer.sampled_eval.eval_json) about their tasks and protocol.
_SETTINGS = {"env": "tir-chain", "tasks_file": None, "split": "heldout", "seed": 0, "ood_rate": 0.0, "max_turns": 6}


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        ({"env": "tir-math"}, ["env tir-chain vs tir-math", "the same --env"]),
        ({"split": "validation"}, ["split heldout vs validation", "the same --split"]),
        ({"seed": 1}, ["seed 0 vs 1", "the same --seed"]),
        ({"tasks_file": "b.jsonl", "seed": 1}, ["tasks_file None vs b.jsonl", "the same env.tasks_file"]),
        ({"ids": ["t1", "t3", "t4"]}, ["2 vs 3 tasks, not one set within the other", "the same --n"]),
    ],
)
def test_evaluations_of_different_tasks_are_refused(capsys, tmp_path: Path, change: dict, needles: list[str]) -> None:
    """The ids overlap (a task file's ids ignore the seed), and the pairs were compared with exit 0: now one error
    line naming both values and the option to align."""
    a = _write(tmp_path / "a.json", _record({"t1": 1, "t2": 0}, 1, **_SETTINGS))
    ids = change.pop("ids", ["t1", "t2"])
    b = _write(tmp_path / "b.json", _record(dict.fromkeys(ids, 1), 1, **{**_SETTINGS, **change}))
    for extra in ((), ("--json",)):
        got = run_cli(capsys, "compare", a, b, *extra)
        assert_refused(got, "a.json and", "b.json", "were measured on different tasks", *needles)
        assert got.out == ""


def test_a_task_files_seed_is_not_its_tasks(capsys, tmp_path: Path) -> None:
    """A task file's held-out tasks are its first ones whatever the seed: another seed is the same tasks."""
    on_file = {**_SETTINGS, "tasks_file": "t.jsonl"}
    a = _write(tmp_path / "a.json", _record({"t1": 1, "t2": 0}, 1, **on_file))
    b = _write(tmp_path / "b.json", _record({"t1": 1, "t2": 1}, 1, **{**on_file, "seed": 7}))
    got = run_cli(capsys, "compare", a, b)
    assert got.code == 0 and got.err == "" and "paired: 2 tasks" in got.out


def test_one_task_file_spelled_two_ways_is_the_same_tasks(capsys, tmp_path: Path, monkeypatch) -> None:
    """A relative and an absolute path, ``./x``, a link to the file: refused as different tasks before; a
    different file is still refused, and so is a spelling of a file this machine does not have."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl").write_text("{}\n")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "t.jsonl")
    (tmp_path / "u.jsonl").write_text("{}\n")
    a = _write(tmp_path / "a.json", _record({"t1": 1, "t2": 0}, 1, **{**_SETTINGS, "tasks_file": "t.jsonl"}))
    for spelling in (str(tmp_path / "t.jsonl"), "./t.jsonl", "link.jsonl"):
        b = _write(tmp_path / "b.json", _record({"t1": 1, "t2": 1}, 1, **{**_SETTINGS, "tasks_file": spelling}))
        got = run_cli(capsys, "compare", a, b)
        assert got.code == 0 and "paired: 2 tasks" in got.out, (spelling, got.err)
    for other in ("u.jsonl", "gone/t.jsonl"):
        b = _write(tmp_path / "b.json", _record({"t1": 1, "t2": 1}, 1, **{**_SETTINGS, "tasks_file": other}))
        assert_refused(run_cli(capsys, "compare", a, b), "were measured on different tasks", f"vs {other}")


def test_the_same_tasks_run_differently_are_compared_with_one_warning(capsys, tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", _record({"t1": 1, "t2": 0}, 1, **_SETTINGS))
    b = _write(tmp_path / "b.json", _record({"t1": 1, "t2": 1}, 1, **{**_SETTINGS, "max_turns": 3, "ood_rate": 0.3}))
    got = run_cli(capsys, "compare", a, b)
    assert got.code == 0 and "paired: 2 tasks" in got.out
    assert got.err.splitlines() == [
        "warning: the same tasks were evaluated differently (ood_rate 0 vs 0.3; max_turns 6 vs 3): the change "
        "mixes the model's with the setting's"
    ]
    same = _write(tmp_path / "c.json", _record({"t1": 0, "t2": 0}, 1, **_SETTINGS))
    assert run_cli(capsys, "compare", a, same).err == ""  # every setting recorded and equal: nothing to say


def test_an_older_record_is_compared_with_a_note_of_what_was_not_checked(capsys, tmp_path: Path) -> None:
    """A record written before tirl recorded max_turns (and ood_rate) still compares; the note names them."""
    old = {k: v for k, v in _SETTINGS.items() if k not in ("max_turns", "ood_rate")}
    a = _write(tmp_path / "a.json", _record({"t1": 1, "t2": 0}, 1, **old))
    b = _write(tmp_path / "b.json", _record({"t1": 1, "t2": 1}, 1, **{**_SETTINGS, "max_turns": 3}))
    got = run_cli(capsys, "compare", a, b)
    assert got.code == 0 and "paired: 2 tasks" in got.out
    assert got.err.splitlines() == [
        f"note: {a} does not record ood_rate, max_turns (an older tirl): not checked against the other evaluation"
    ]


def test_a_run_directorys_greedy_evaluations_take_the_runs_config(capsys, tmp_path: Path) -> None:
    """summary.json's eval/before and eval/after carry no settings: the run's config.json says them."""
    run = tmp_path / "run"
    run.mkdir()
    bare = {"tasks": _record({"t1": 1, "t2": 1}, 1)["tasks"]}  # as tirl.trainer.run.eval_record writes it
    _write(run / "summary.json", {"run_dir": str(run), "eval/before": bare, "eval/after": bare})
    env = {"name": "tir-chain", "tasks_file": None, "eval_split": "heldout", "seed": 0, "eval_ood_rate": 0.0,
           "max_turns": 6, "ood_rate": 0.5}  # fmt: skip
    _write(run / "config.json", {"env": env})
    ours = _write(tmp_path / "e.json", _record({"t1": 1, "t2": 0}, 1, **_SETTINGS))
    got = run_cli(capsys, "compare", ours, run)
    assert got.code == 0 and got.err == "" and "second: " in got.out and "heldout, greedy" in got.out
    _write(run / "config.json", {"env": {**env, "seed": 4}})
    assert_refused(run_cli(capsys, "compare", ours, run), "seed 0 vs 4", "the same --seed")


def test_a_fifo_as_the_runs_config_is_not_read(tmp_path: Path) -> None:
    """A FIFO named config.json blocked ``tirl compare`` for ever (it was read like a file, as summary.json's
    FIFO was before): it is passed over like a missing config, with the note that the settings were not checked."""
    run = tmp_path / "run"
    run.mkdir()
    bare = {"tasks": _record({"t1": 1, "t2": 1}, 1)["tasks"]}
    _write(run / "summary.json", {"run_dir": str(run), "eval/before": bare, "eval/after": bare})
    os.mkfifo(run / "config.json")
    ours = _write(tmp_path / "e.json", _record({"t1": 1, "t2": 0}, 1, **_SETTINGS))
    got = subprocess.run([sys.executable, "-m", "tirl.cli", "compare", str(ours), str(run)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert "paired: 2 tasks" in got.stdout and "does not record env, tasks_file, split, seed" in got.stderr


@pytest.mark.parametrize(
    ("value", "needles"),
    [
        ([1, 2], ["is not an evaluation record (a JSON list)"]),
        ({"tasks": []}, ["holds no per-task results"]),
        ({"tasks": [{"id": 3, "correct": True}]}, ["tasks[0]", "string 'id'"]),
        ({"tasks": [{"id": "a", "correct": 1}]}, ["tasks[0]", "boolean 'correct'"]),
        (
            {"tasks": [{"id": "a", "correct": True}, {"id": "a", "correct": True}, {"id": "b", "correct": True}]},
            ["task 'b' has 1 episode where the others have 2"],
        ),
    ],
)
def test_a_bad_evaluation_is_one_error_line(capsys, tmp_path: Path, value: object, needles: list[str]) -> None:
    good = _write(tmp_path / "good.json", _record({"a": 1, "b": 0}, 1))
    bad = _write(tmp_path / "bad.json", value)
    assert_refused(run_cli(capsys, "compare", good, bad), "bad.json", *needles)


def test_refusals_name_the_input_and_the_fix(capsys, tmp_path: Path) -> None:
    one = _write(tmp_path / "one.json", _record({"a": 1}, 1))
    other = _write(tmp_path / "other.json", _record({"b": 1}, 1))
    assert_refused(run_cli(capsys, "compare", one, other), "no task in common", "same env, split, seed")
    assert_refused(run_cli(capsys, "compare", one), "one.json", "a comparison needs two")
    assert_refused(run_cli(capsys, "compare", tmp_path / "missing.json", one), "missing.json", "does not exist")
    # alone, a missing path was "is one evaluation: a comparison needs two" (new-user walk, session 45)
    assert_refused(run_cli(capsys, "compare", tmp_path / "nope"), "nope: does not exist", "give a run directory")
    assert_refused(run_cli(capsys, "compare", tmp_path), "has no summary.json")
    _write(tmp_path / "summary.json", {"run_dir": "x", "eval/before": None})
    assert_refused(run_cli(capsys, "compare", tmp_path), "holds no evaluation before and after training")
    (tmp_path / "torn.json").write_text("{", encoding="utf-8")
    assert_refused(run_cli(capsys, "compare", one, tmp_path / "torn.json"), "torn.json")


def test_sampled_picks_a_run_directorys_sampled_pair(capsys, tmp_path: Path) -> None:
    """``--sampled``: a run directory stands for eval_before_sampled.json / eval_after_sampled.json."""
    greedy = {"run_dir": str(tmp_path), "eval/before": _record({"t1": 0, "t2": 1}, 1),
              "eval/after": _record({"t1": 0, "t2": 1}, 1)}  # fmt: skip
    _write(tmp_path / "summary.json", greedy)
    _write(tmp_path / "eval_before_sampled.json", _record({"t1": 0, "t2": 1, "t3": 2, "t4": 0}, 4))
    assert_refused(run_cli(capsys, "compare", tmp_path, "--sampled"), "has no sampled evaluation after training",
                   "eval_after_sampled.json", "trainer.eval_samples", "drop --sampled")  # fmt: skip
    _write(tmp_path / "eval_after_sampled.json", _record({"t1": 2, "t2": 1, "t3": 4, "t4": 0}, 4))
    got = run_cli(capsys, "compare", tmp_path, "--sampled")
    assert got.code == 0, got.err
    assert "solve rate (pass@1): 0.1875 -> 0.4375: +25.0 points" in got.out and "Wilcoxon" in got.out
    other = _write(tmp_path / "other.json", _record({"t1": 0, "t2": 1, "t3": 2, "t4": 0}, 4))
    assert "0.1875 -> 0.4375" in run_cli(capsys, "compare", other, tmp_path, "--sampled").out  # a run dir: after
    plain = run_cli(capsys, "compare", tmp_path)  # without --sampled: the greedy pair, and a note on the other
    assert "paired: 2 tasks (1 vs 1 episode per task)" in plain.out and "compare them with --sampled" in plain.err
    (tmp_path / "eval_before_sampled.json").unlink()
    assert_refused(run_cli(capsys, "compare", tmp_path, "--sampled"), "has no sampled evaluation before training")
    assert_refused(run_cli(capsys, "compare", other, other, "--sampled"), "--sampled", "drop --sampled")


def test_the_same_evaluation_twice_is_refused(capsys, tmp_path: Path) -> None:
    """``compare X X`` printed +0.0 points and p = 1 with exit 0; another spelling or a link of X is X too."""
    one = _write(tmp_path / "one.json", _record({"a": 1, "b": 0}, 1))
    (tmp_path / "link.json").symlink_to(one)
    for second in (one, tmp_path / "." / "one.json", tmp_path / "link.json"):
        assert_refused(run_cli(capsys, "compare", one, second), f"is {one} again", "give two evaluations")
    copy = _write(tmp_path / "copy.json", _record({"a": 1, "b": 0}, 1))  # a second file is a second evaluation
    assert run_cli(capsys, "compare", one, copy).code == 0


def test_a_larger_n_is_compared_on_the_tasks_both_hold(capsys, tmp_path: Path) -> None:
    """``tirl eval --n 300`` draws the ``--n 100`` tasks first: the shared tasks are paired, with a note."""
    a = _write(tmp_path / "a.json", _record({"t1": 1, "t2": 0}, 1, **_SETTINGS))
    b = _write(tmp_path / "b.json", _record({"t1": 1, "t2": 1, "t3": 0}, 1, **_SETTINGS))
    got = run_cli(capsys, "compare", a, b)
    assert got.code == 0 and "paired: 2 tasks" in got.out
    assert got.err.splitlines() == [f"note: {b} holds 3 tasks, {a} 2: the 2 both hold are compared"]
