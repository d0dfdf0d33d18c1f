"""Output paths: never a partial or replaced file, never an overwritten input or run.

Writes go through symbolic links and into devices and FIFOs (never replacing
them); directories and paths under a file are refused before any work; a
user's ``X.tmp`` survives ``--out X``. A run directory holding a link among its own files is refused.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from cli_run import TRAJ, assert_refused, metrics_row, run_cli, write_jsonl

from tirl.errors import OutputError
from tirl.fileio import atomic_write, check_output


@pytest.fixture
def traj(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "in.jsonl", [TRAJ, {**TRAJ, "id": "t1"}])


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", [metrics_row(s) for s in range(1, 6)])
    return run


# ------------------------------------------------------------------ refused before any work
@pytest.mark.parametrize("where", ["directory", "under_a_file"])
def test_filter_output_directory_or_under_a_file(capsys, tmp_path, traj, where):
    target = tmp_path if where == "directory" else traj / "v.jsonl"
    assert_refused(run_cli(capsys, "filter", traj, "--verdicts", target), str(target))
    assert traj.read_text(encoding="utf-8").count("\n") == 2


@pytest.mark.parametrize("where", ["directory", "under_a_file"])
def test_report_out_directory_or_under_a_file(capsys, tmp_path, where):
    run = _run_dir(tmp_path)
    target = tmp_path if where == "directory" else run / "metrics.jsonl" / "r.html"
    assert_refused(run_cli(capsys, "report", run, "--out", target), str(target))


def _full_run(tmp_path: Path) -> Path:
    """A run directory with what `tirl train` writes (the files the report must never replace)."""
    run = _run_dir(tmp_path)
    for name in ("config.json", "eval_before.json", "summary.json", "config_notes.json"):
        (run / name).write_text('{"x": 1}\n', encoding="utf-8")
    (run / "tb").mkdir()
    (run / "tb" / "events.out.tfevents.1.host").write_bytes(b"event")
    (run / "checkpoints" / "step-1").mkdir(parents=True)
    (run / "checkpoints" / "step-1" / "state.json").write_text('{"step": 1}\n', encoding="utf-8")
    (run / ".lock").write_text("123\n", encoding="utf-8")
    return run


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "target",
    [
        "config.json", "eval_before.json", "summary.json", "metrics.jsonl", ".lock", "config_notes.json",
        "eval_after.json", "metrics.jsonl.torn", "tb/events.out.tfevents.1.host", "tb/new.html",
        "checkpoints/step-1/state.json", "checkpoints/step-1/new.html", "checkpoints/new.html",
        "tb/../config.json", "link-to-config", "link-to-checkpoint/new.html",
    ],
)  # fmt: skip
def test_report_out_never_writes_into_the_run(capsys, tmp_path, target):
    """``--out RUN/config.json`` (or under checkpoints/ or tb/) replaced the run's file with HTML, exit 0."""
    run = _full_run(tmp_path)
    os.symlink(run / "config.json", tmp_path / "link-to-config")
    os.symlink(run / "checkpoints" / "step-1", tmp_path / "link-to-checkpoint")
    before = _snapshot(run)
    out = tmp_path / target if target.startswith("link") else run / target
    outcome = run_cli(capsys, "report", run, "--out", out)
    assert_refused(outcome, f"{out}: --out ", f"write the report to {run}/report.html or outside the run")
    assert _snapshot(run) == before


def test_report_out_may_be_a_new_name_at_the_top_of_the_run(capsys, tmp_path):
    run = _full_run(tmp_path)
    before = _snapshot(run)
    for given in (run / "report-2.html", run / "tb" / ".." / "report-3.html", None):
        outcome = run_cli(capsys, "report", run, *(["--out", given] if given else []))
        assert outcome.code == 0, outcome.err
    after = _snapshot(run)
    assert sorted(set(after) - set(before)) == ["report-2.html", "report-3.html", "report.html"]
    assert all(after[name] == data for name, data in before.items())


def test_diagnose_bundle_under_a_file(capsys, tmp_path):
    run = _run_dir(tmp_path)
    target = run / "metrics.jsonl" / "b.md"
    assert_refused(run_cli(capsys, "diagnose", "training", run, "--bundle", target), str(target))


def test_filter_kept_is_the_input(capsys, traj):
    before = traj.read_bytes()
    assert_refused(run_cli(capsys, "filter", traj, "--verdicts", traj.with_name("v"), "--kept", traj), "--kept")
    assert traj.read_bytes() == before
    assert not traj.with_name("v").exists()


def test_filter_verdicts_is_the_input_through_a_link(capsys, tmp_path, traj):
    link = tmp_path / "link.jsonl"
    link.symlink_to(traj)
    before = traj.read_bytes()
    assert_refused(run_cli(capsys, "filter", traj, "--verdicts", link), "--verdicts")
    assert traj.read_bytes() == before


def test_train_run_dir_of_an_existing_run_names_resume(capsys, tmp_path):
    run = _run_dir(tmp_path)
    (run / "config.json").write_text("{}", encoding="utf-8")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    out = run_cli(capsys, "train", "--run-dir", run, "--no-progress")
    assert_refused(out, "--resume", str(run))
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_sft_out_existing_file_fails_before_training(capsys, tmp_path):
    out_file = tmp_path / "model.bin"
    out_file.write_text("keep me", encoding="utf-8")
    out = run_cli(capsys, "sft", "--out", out_file, "--steps", "1")
    assert_refused(out, str(out_file))
    assert "model:" not in out.out  # nothing was built
    assert out_file.read_text(encoding="utf-8") == "keep me"


# ------------------------------------------------------------------ written through, never replaced
def test_symlink_output_is_written_through(capsys, tmp_path, traj):
    real = tmp_path / "real.jsonl"
    real.write_text("old\n", encoding="utf-8")
    link = tmp_path / "v.jsonl"
    link.symlink_to(real)
    assert run_cli(capsys, "filter", traj, "--verdicts", link).code == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert [json.loads(x)["id"] for x in real.read_text(encoding="utf-8").splitlines()] == ["t0", "t1"]


def test_dev_full_is_refused_and_stays_a_device(capsys, traj):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this machine")
    assert_refused(run_cli(capsys, "filter", traj, "--verdicts", "/dev/full"), "/dev/full")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_dev_null_is_written_into_not_replaced(capsys, traj):
    assert run_cli(capsys, "filter", traj, "--verdicts", "/dev/null").code == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_fifo_output_is_written_into(capsys, tmp_path, traj):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert run_cli(capsys, "filter", traj, "--verdicts", fifo).code == 0
    reader.join(30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [json.loads(x)["id"] for x in got[0].decode().splitlines()] == ["t0", "t1"]


def test_report_out_keeps_the_users_tmp_file(capsys, tmp_path):
    run = _run_dir(tmp_path)
    out = tmp_path / "r.html"
    mine = tmp_path / "r.html.tmp"
    mine.write_text("user data", encoding="utf-8")
    assert run_cli(capsys, "report", run, "--out", out).code == 0
    assert mine.read_text(encoding="utf-8") == "user data"
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


# ------------------------------------------------------------------ the one atomic write, directly
def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("before", encoding="utf-8")
    with pytest.raises(RuntimeError), atomic_write(target) as fh:
        fh.write("half")
        raise RuntimeError("boom")
    assert target.read_text(encoding="utf-8") == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_atomic_write_keeps_the_mode_of_an_existing_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("x", encoding="utf-8")
    target.chmod(0o640)
    with atomic_write(target) as fh:
        fh.write("y")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640 and target.read_text(encoding="utf-8") == "y"


def test_check_output_refuses_a_socket(tmp_path):
    import socket

    path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        with pytest.raises(OutputError, match="socket"):
            check_output(path)
    finally:
        sock.close()


@pytest.mark.parametrize("stdout_to", ["pipe", "file"])
def test_dev_stdout_writes_to_the_descriptor(tmp_path, traj, stdout_to):
    """`--verdicts /dev/stdout` shares stdout with the summary: nothing replaced, nothing lost, in order."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "tirl.cli", "filter", str(traj), "--verdicts", "/dev/stdout", "--json"]
    if stdout_to == "pipe":
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    else:
        out = tmp_path / "out.txt"
        with out.open("w") as fh:
            subprocess.run(cmd, stdout=fh, timeout=120, check=True)
        text = out.read_text(encoding="utf-8")
    lines = [json.loads(x) for x in text.splitlines()]
    assert [x.get("id") for x in lines[:2]] == ["t0", "t1"] and lines[2]["trajectories"] == 2


def test_closed_descriptor_is_refused(capsys, traj):
    assert_refused(run_cli(capsys, "filter", traj, "--verdicts", "/dev/fd/987"), "987")


def test_sft_out_is_the_init_checkpoint(capsys, tmp_path):
    init = tmp_path / "init"
    init.mkdir()
    (init / "config.json").write_text("{}", encoding="utf-8")
    out = run_cli(capsys, "sft", "--init", init, "--out", init, "--steps", "1")
    assert_refused(out, "--out", "input")
    assert "model:" not in out.out and (init / "config.json").read_text(encoding="utf-8") == "{}"


@pytest.mark.parametrize("name", ["report.html", "metrics.jsonl", "tb"])
def test_report_never_writes_through_a_link_in_a_shared_run(capsys, tmp_path, name):
    """A shared run with ``report.html -> ~/.bashrc``: ``tirl report RUN`` replaced the link's target, exit 0."""
    run = _full_run(tmp_path)
    victim = tmp_path / "victim"
    if name == "tb":
        victim.mkdir()
        (run / "tb" / "events.out.tfevents.1.host").rename(victim / "events.out.tfevents.1.host")
        (run / "tb").rmdir()
    elif name == "metrics.jsonl":
        (run / name).replace(victim)
    else:
        victim.write_text("the user's file\n")
    (run / name).symlink_to(victim)
    before = _snapshot(tmp_path)
    assert_refused(run_cli(capsys, "report", run), f"{run / name}: is a symbolic link (to {victim})", "cp -rL")
    assert _snapshot(tmp_path) == before


# ------------------------------------------------------------------ '-' is no output
@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["filter", "{traj}", "--verdicts", "-"], ["--verdicts -: is no file", "give /dev/stdout"]),
        (["filter", "{traj}", "--verdicts", "{tmp}/v.jsonl", "--kept", "-"], ["--kept -: is no file", "/dev/stdout"]),
        (["report", "{run}", "--out", "-"], ["--out -: is no file", "give /dev/stdout"]),
        (["diagnose", "training", "{run}/metrics.jsonl", "--bundle", "-"], ["--bundle -: is no file", "/dev/stdout"]),
        (["review", "{traj}", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--out", "-"],
         ["--out -: is no file", "give a file path (the answer is printed on standard output already)"]),
        (["model", "init", "--out", "-"], ["-: is no directory", "give a directory path"]),
        (["tasks", "export", "--out", "-", "--n", "1"], ["-: is no directory", "give a directory path"]),
    ],
    ids=["filter --verdicts", "filter --kept", "report", "diagnose --bundle", "review", "model init", "tasks export"],
)  # fmt: skip
def test_a_dash_output_is_refused_not_written_as_a_file_named_dash(capsys, tmp_path, monkeypatch, traj, argv, needles):
    """``--out -`` wrote a file (or made a directory) named ``-`` in the current directory; tirl reads no ``-``
    either. A stream output names /dev/stdout (written to the descriptor); ``review`` prints its answer already."""
    run = _run_dir(tmp_path)
    monkeypatch.chdir(tmp_path)
    given = [a.format(traj=traj, tmp=tmp_path, run=run) for a in argv]
    got = run_cli(capsys, *given)
    assert_refused(got, *needles)
    assert not os.path.lexists(tmp_path / "-") and not (tmp_path / "v.jsonl").exists()


def test_a_dash_is_refused_by_the_writers_themselves(tmp_path, monkeypatch):
    """Every writer refuses ``-`` (the commands' own checks come first and name their option)."""
    from tirl.fileio import check_output_dir, staged_dir

    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputError, match="'-' as standard output"), atomic_write("-") as fh:
        fh.write("x")
    with pytest.raises(OutputError, match="is no directory"):
        check_output_dir("-")
    with pytest.raises(OutputError, match="is no directory"), staged_dir("-", replace=False):
        pass
    assert not os.path.lexists(tmp_path / "-")
