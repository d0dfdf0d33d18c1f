"""One of a run's files given to the command that reads another: the error names the command that reads it.

``tirl diagnose pipeline metrics.jsonl`` listed ~90 keys and the trace format; ``tirl diagnose training`` of a
trace or a trajectory file listed the keys every log format needs. Covered: the three JSONL files a run writes
(metrics, pipeline trace, trajectories), each given to the two diagnose commands it is not for, and a checkpoint
directory (``RUN/checkpoints/step-N``) given as a model, and a run's inner directory or a model directory given
to ``--resume``, and a metrics log or a trace given to ``tirl audit``/``tirl filter`` (their error named the
missing ``messages`` field and the trajectory format only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli_contract.cli_run import TRAJ, assert_refused, metrics_row, run_cli, trace_row, write_jsonl

from tirl.config import TirlConfig, config_to_dict


@pytest.mark.parametrize(
    ("command", "rows", "reader"),
    [
        (["diagnose", "pipeline"], [metrics_row(1), metrics_row(2)], "tirl diagnose training"),
        (["diagnose", "pipeline"], [TRAJ], "tirl audit"),
        (["diagnose", "training"], [trace_row(0.0), trace_row(0.5)], "tirl diagnose pipeline"),
        (["diagnose", "training"], [TRAJ], "tirl audit"),
    ],
)
def test_a_run_file_given_to_the_wrong_command_names_the_right_one(capsys, tmp_path, command, rows, reader) -> None:
    path = write_jsonl(tmp_path / "some.jsonl", rows)
    got = run_cli(capsys, *command, path)
    assert_refused(got, f"read it with `{reader} {path}`")
    assert "(+" in got.err or len(got.err) < 600  # the keys found are cut short, as the training reader's were


@pytest.mark.parametrize(
    ("rows", "reader"),
    [([metrics_row(1), metrics_row(2)], "tirl diagnose training"), ([trace_row(0.0)], "tirl diagnose pipeline")],
)
@pytest.mark.parametrize("command", [["audit"], ["filter"]])
def test_a_run_file_given_as_trajectories_names_its_reader(capsys, tmp_path, rows, reader, command) -> None:
    path = write_jsonl(tmp_path / "some.jsonl", rows)
    out = ["--verdicts", tmp_path / "v.jsonl"] if command == ["filter"] else []
    got = run_cli(capsys, *command, path, *out)
    assert_refused(got, f"{path}:1: missing the required field 'messages'", f"read it with `{reader} {path}`")
    assert not (tmp_path / "v.jsonl").exists()
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "x"}])  # no other run file: the format is the fix
    assert_refused(run_cli(capsys, *command, other, *out), 'each line needs {"id": ..., "messages"')


@pytest.mark.parametrize(
    "command",
    [["diagnose", "training", "P"], ["diagnose", "pipeline", "P"], ["audit", "P"], ["filter", "P", "--verdicts", "V"]],
)
def test_a_json_document_over_several_lines_is_named_for_what_it_is(capsys, tmp_path, command) -> None:
    """A run's config.json or summary.json given where a JSONL file goes said "not valid JSON (Expecting property
    name enclosed in double quotes at column 2)" of a file that is valid JSON."""
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"steps": 1, "eval/accuracy_after": 0.5}, indent=1))
    got = run_cli(capsys, *({"P": path, "V": tmp_path / "v.jsonl"}.get(a, a) for a in command))
    assert_refused(got, f"{path}:1: line 1 is '{{' alone: one JSON document written over several lines, not JSON Lines")


def test_a_trace_line_without_a_queue_keeps_the_format_fix(capsys, tmp_path) -> None:
    """A trace that is no other run file still gets the trace format as its fix."""
    path = write_jsonl(tmp_path / "trace.jsonl", [{"t": 0.0, "init_queue": 1}])
    assert_refused(run_cli(capsys, "diagnose", "pipeline", path), "lacks run_queue, eval_queue", "each line needs t")


@pytest.mark.parametrize("command", [["model", "check"], ["eval", "--model"], ["train", "--model"]])
def test_a_checkpoint_directory_as_a_model_names_its_model(capsys, tmp_path, monkeypatch, command) -> None:
    """``RUN/checkpoints/step-N`` holds the model in ``model/``; the error said it had no config.json."""
    step = tmp_path / "checkpoints" / "step-1"
    (step / "model").mkdir(parents=True)
    (step / "model" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)  # a train that got through would write runs/ here
    got = run_cli(capsys, *command, step)
    assert_refused(got, f"{step}: is a tirl checkpoint, not a model", f"give its model: {step / 'model'}")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "command", [["model", "check"], ["eval", "--model"], ["train", "--model"], ["serve", "--model"]]
)
def test_a_runs_checkpoints_directory_as_a_model_names_the_newest_model(capsys, tmp_path, monkeypatch, command) -> None:
    """``RUN/checkpoints`` said "has no config.json, so it is not a Hugging Face model directory"."""
    ckpts = tmp_path / "checkpoints"
    for step in (1, 2):
        (ckpts / f"step-{step}" / "model").mkdir(parents=True)
        (ckpts / f"step-{step}" / "model" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)  # a train that got through would write runs/ here
    got = run_cli(capsys, *command, ckpts, *(["--port", "0"] if command[0] == "serve" else []))
    assert_refused(got, f"{ckpts}: is a run's checkpoints directory, not a model",
                   f"give a checkpoint's model: {ckpts / 'step-2' / 'model'}")  # fmt: skip
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", [["train", "--resume"], ["config", "show", "--resume"]])
@pytest.mark.parametrize("inner", ["checkpoints", "checkpoints/step-1", "checkpoints/step-1/model"])
def test_resume_of_a_directory_inside_a_run_names_the_run(capsys, tmp_path, command, inner) -> None:
    """They said "has no config.json" or, for the model, "unknown config key 'architectures'"."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step-1" / "model").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(config_to_dict(TirlConfig())))
    (run / "checkpoints" / "step-1" / "model" / "config.json").write_text('{"model_type": "llama"}')
    got = run_cli(capsys, *command, run / inner)
    assert_refused(got, f"is inside the run directory {run}", f"give the run directory itself: {run}")


@pytest.mark.parametrize("command", [["train", "--resume"], ["config", "show", "--resume"]])
def test_resume_of_a_model_directory_says_so(capsys, tmp_path, command) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    assert_refused(run_cli(capsys, *command, tmp_path), "is a model directory, not a tirl run directory", "--model")


def test_audit_of_nothing_is_refused(capsys, tmp_path) -> None:
    """An empty trajectory file printed a table of zeros (exit 0); a directory without trajectories.jsonl named a
    file the user never gave."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert_refused(run_cli(capsys, "audit", empty), f"{empty}: holds no trajectories")
    assert_refused(run_cli(capsys, "audit", tmp_path), f"{tmp_path}: is a directory without trajectories.jsonl")
    assert run_cli(capsys, "audit", write_jsonl(tmp_path / "one.jsonl", [TRAJ])).code == 0


@pytest.mark.parametrize("text", ["", "\n \n\t\n"])
def test_filter_of_nothing_is_refused(capsys, tmp_path, text) -> None:
    """An empty (or blank) trajectory file wrote empty verdicts and exit 0; ``tirl audit`` refuses it, and so does
    filter now, before any output exists (an existing one is left as it was)."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text(text)
    kept = tmp_path / "kept.jsonl"
    kept.write_text("mine\n")
    got = run_cli(capsys, "filter", empty, "--verdicts", tmp_path / "v.jsonl", "--kept", kept)
    assert_refused(got, f"{empty}: holds no trajectories", "at least one line")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl", "kept.jsonl"]
    assert kept.read_text() == "mine\n"


def test_run_on_a_log_that_names_no_run_says_to_leave_it_out(capsys, tmp_path) -> None:
    """The fix was "pass one of them to --run" after "runs found: none"."""
    path = write_jsonl(tmp_path / "metrics.jsonl", [metrics_row(1)])
    got = run_cli(capsys, "diagnose", "training", path, "--run", "x")
    assert_refused(got, "no run named 'x': the files name no run", "leave --run out")


def _as_a_user(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tirl ARGV`` in a child without root's permission override (uid 0 keeps it: setpriv drops every capability)."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: a read-only directory cannot be made here")
        prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
    code = "import sys; from tirl.cli import main; sys.exit(main())"
    return subprocess.run([*prefix, sys.executable, "-c", code, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ["sft", "--out", "ro/s", "--steps", "1"],
        ["model", "init", "--out", "ro/m"],
        ["train", "--run-dir", "ro/run", "--set", "model.path=missing"],
        ["ablate", "--dry-run", "--out", "ro/a"],
        ["review", "bundle.md", "--base-url", "http://127.0.0.1:9", "--model", "m", "--out", "ro/r.md"],
        ["filter", "t.jsonl", "--verdicts", "ro/v.jsonl"],
    ],
)
def test_an_output_in_a_read_only_directory_is_refused_before_any_work(tmp_path, argv) -> None:
    """The write failed only at its end: ``tirl sft`` trained, then could not save; ``tirl review`` asked the
    endpoint (paid), then could not write; ``ablate --dry-run`` said all was well. Now one line before the work."""
    write_jsonl(tmp_path / "t.jsonl", [TRAJ])
    (tmp_path / "bundle.md").write_text("# evidence\n")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    try:
        got = _as_a_user(argv, tmp_path)
    finally:
        ro.chmod(0o755)
    lines = [line for line in got.stderr.splitlines() if line.strip()]
    assert got.returncode == 2 and len(lines) == 1, got.stderr
    assert lines[0].startswith("error: ro/") and "cannot write in" in lines[0] and "choose a writable" in lines[0]
    assert list(ro.iterdir()) == []
