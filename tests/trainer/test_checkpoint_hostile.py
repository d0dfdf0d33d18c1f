"""A run directory as hostile input to ``tirl train --resume`` (issue 22, item 2 and the checkpoint rows).

Each test damages a copy of one real 2-step tiny run (the real CLI in this
process, the real files) the way the red team did and checks that resume
either skips cleanly to an older checkpoint that verifies, with a line saying
so, or stops with exactly one ``error:`` line and leaves the run as it was:
a pickle payload in any checkpoint file (with the checksum list rewritten by
the attacker), a checkpoint without a checksum list, truncated training-state
files, ``policy_version: [1]``, a ``step-99999999999999999999999`` directory,
no checkpoint that verifies, a second writer, a torn last metrics line, a link among the run's files.
Disk-full saves are in ``test_checkpoint_disk_full.py``.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model, with_sets

from tirl.cli import main
from tirl.trainer.logging import read_metrics

FLAGS = [*TINY_TRAIN_ARGS, "--set", "trainer.checkpoint_every=1"]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    """A finished 2-step run with checkpoints step-1 and step-2 (never modified: tests copy it)."""
    root = tmp_path_factory.mktemp("base")
    model = save_tiny_model(root / "tiny")
    run = root / "run"
    assert main(["train", "--model", str(model), "--steps", "2", "--run-dir", str(run), *FLAGS]) == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1", "step-2"]
    return run


@pytest.fixture
def run(base_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(base_run, out)
    return out


def _resume(run: Path, capsys, steps: int = 2) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["train", "--resume", str(run), "--steps", str(steps), "--no-progress"])
    return code, capsys.readouterr().err


def _one_error(code: int, err: str) -> str:
    """The single ``error:`` line of a refused command (exit 2, no traceback)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _relist(ckpt: Path) -> None:
    """What an attacker who controls the run directory does: rewrite the checksum list to match the files."""
    state = json.loads((ckpt / "state.json").read_text())
    files = {}
    for path in sorted(p for p in ckpt.rglob("*") if p.is_file() and p.name != "state.json"):
        files[path.relative_to(ckpt).as_posix()] = {
            "size": path.stat().st_size,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }
    state["files"] = files
    (ckpt / "state.json").write_text(json.dumps(state))


def _edit_state(ckpt: Path, **changes: object) -> None:
    state = json.loads((ckpt / "state.json").read_text())
    for key, value in changes.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    (ckpt / "state.json").write_text(json.dumps(state))


def _training_files(ckpt: Path) -> list[Path]:
    """The checkpoint's files other than the model directory and state.json (whatever their format)."""
    return sorted(p for p in ckpt.iterdir() if p.is_file() and p.name != "state.json")


def _snapshot(run: Path) -> dict[str, bytes]:
    return {
        p.relative_to(run).as_posix(): p.read_bytes()
        for p in run.rglob("*")
        if p.is_file() and p.name != ".lock"  # the lock file may appear; nothing else may change
    }


class _Payload:
    """Unpickling this runs ``os.mkdir(path)``: what a hostile pickle does on ``torch.load(weights_only=False)``."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.mkdir, (self.path,)


@pytest.mark.parametrize("name", ["rng.pt", "optimizer.pt", "rng.json", "optimizer.json", "optimizer.safetensors"])
def test_a_pickle_payload_in_a_checkpoint_never_runs_on_resume(run: Path, tmp_path: Path, capsys, name: str) -> None:
    """The issue's exploit: a hostile ``rng.pt`` and a checksum list rewritten to match it.

    Each name is written (or replaced) in the newest checkpoint; whatever tirl does with it, the code in it
    must not run, and the outcome is a clean resume or one error line.
    """
    marker = tmp_path / "pwned"
    ckpt = run / "checkpoints" / "step-2"
    torch.save(_Payload(marker), ckpt / name)
    _relist(ckpt)
    code, err = _resume(run, capsys, steps=3)
    assert not marker.exists(), "the pickle in the checkpoint ran"
    assert "Traceback" not in err
    if code != 0:
        _one_error(code, err)
    assert [r["step"] for r in read_metrics(run)] == ([1, 2, 3] if code == 0 else [1, 2])


CUSTOM_CODE = """
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
class EvilConfig(LlamaConfig):
    model_type = "evilllama"
class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig
class EvilTok(PreTrainedTokenizerFast):
    pass
"""


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
def test_custom_code_in_a_checkpoints_model_never_runs_on_resume(
    run: Path, tmp_path: Path, capsys, monkeypatch, where: str
) -> None:
    """An ``auto_map`` naming a ``.py`` file planted in the model directory, the checksum list rewritten, and
    a ``y`` on standard input: before the fix transformers asked "Do you wish to run the custom code? [y/N]"
    in the middle of ``tirl train --resume``, and the ``y`` ran the file. Now it is one error line naming it.
    """
    marker = tmp_path / "pwned"
    model = run / "checkpoints" / "step-2" / "model"
    (model / "evil_code.py").write_text(f"import os\nos.mkdir({str(marker)!r})\n{CUSTOM_CODE}")
    data = json.loads((model / where).read_text())
    if where == "config.json":
        data.update(model_type="evilllama", auto_map={"AutoConfig": "evil_code.EvilConfig",
                                                      "AutoModelForCausalLM": "evil_code.EvilModel"})  # fmt: skip
    else:
        data.update(tokenizer_class="EvilTok", auto_map={"AutoTokenizer": [None, "evil_code.EvilTok"]})
    (model / where).write_text(json.dumps(data))
    _relist(run / "checkpoints" / "step-2")
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 10))
    code, err = _resume(run, capsys, steps=3)
    assert not marker.exists(), "the checkpoint's code ran"
    line = _one_error(code, "\n".join(x for x in err.splitlines() if not x.startswith("resuming ")))
    assert f"model/{where}: names custom code to run (auto_map: " in line, line


def _edit_config(run: Path, **sections: dict[str, object]) -> None:
    data = json.loads((run / "config.json").read_text())
    for section, values in sections.items():
        data[section].update(values)
    (run / "config.json").write_text(json.dumps(data))


@pytest.mark.parametrize("command", ["train", "eval"])
def test_an_env_import_string_in_a_saved_config_is_not_imported(
    run: Path, tmp_path: Path, capsys, monkeypatch, command: str
) -> None:
    """``env.name=verifiers:MODULE:Factory`` written into ``config.json``: ``tirl train --resume`` and ``tirl eval
    --model RUN`` imported MODULE (any module on ``sys.path``; here one the test puts there) before the fix.
    """
    pytest.importorskip("verifiers")
    marker, mods = tmp_path / "pwned", tmp_path / "mods"
    mods.mkdir()
    module = f"tirl_h4_evil_{command}"  # one per case: an imported module is not imported again
    (mods / f"{module}.py").write_text(f"import os\nos.mkdir({str(marker)!r})\ndef load():\n    return None\n")
    monkeypatch.syspath_prepend(str(mods))
    _edit_config(run, env={"name": f"verifiers:{module}:load"})
    capsys.readouterr()
    argv = ["train", "--resume", str(run), "--steps", "3"] if command == "train" else ["eval", "--model", str(run)]
    code = main([*argv, "--no-progress"] if command == "train" else [*argv, "--n", "1"])
    err = capsys.readouterr().err
    assert not marker.exists(), "the module named by the run's config was imported"
    line = _one_error(code, err)
    assert "config.json: chooses code to import" in line and f"--set env.name=verifiers:{module}:load" in line


class _KeyCatcher(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization", ""))
        self.send_response(500)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


def test_a_saved_config_cannot_send_an_environment_variable_to_its_server(run: Path, capsys, monkeypatch) -> None:
    """``generator=openai``, ``base_url`` and ``api_key_env`` written into ``config.json``: before the fix the
    resume sent the named variable's value to that server as its key. Repeated on the command line, it is sent.
    """
    monkeypatch.setenv("TIRL_H4_SECRET", "s3cret-value")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeyCatcher)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    _KeyCatcher.seen = []
    try:
        _edit_config(run, model={"generator": "openai", "base_url": url, "api_key_env": "TIRL_H4_SECRET"})
        code, err = _resume(run, capsys, steps=3)
        assert not any("s3cret" in h for h in _KeyCatcher.seen), _KeyCatcher.seen
        line = _one_error(code, err)
        assert "model.base_url=" in line and "model.api_key_env='TIRL_H4_SECRET'" in line, line
        capsys.readouterr()
        sets = ["--set", f"model.base_url={url}", "--set", "model.api_key_env=TIRL_H4_SECRET"]
        main(["train", "--resume", str(run), "--steps", "3", "--no-progress", *sets])
        assert "config.json: chooses" not in capsys.readouterr().err
        assert any("s3cret" in h for h in _KeyCatcher.seen), "the user's own --set did not reach the server"
    finally:
        server.shutdown()


def test_a_checkpoint_without_a_checksum_list_is_refused_not_trusted(run: Path, capsys) -> None:
    _edit_state(run / "checkpoints" / "step-2", files=None)
    code, err = _resume(run, capsys)
    assert code == 0, err
    assert "skipping checkpoint" in err and "step-2" in err and "checksum list" in err
    assert "resuming" in err and "step-1" in err
    assert [r["step"] for r in read_metrics(run)] == [1, 2]


@pytest.mark.parametrize("relist", [False, True], ids=["no-list", "list-rewritten"])
def test_truncated_training_state_is_a_clean_skip_or_one_error(run: Path, capsys, relist: bool) -> None:
    """The red team's case: a truncated ``optimizer.pt``/``rng.pt`` in a checkpoint without a checksum list."""
    ckpt = run / "checkpoints" / "step-2"
    for path in _training_files(ckpt):
        with path.open("r+b") as fh:
            fh.truncate(path.stat().st_size // 2)
    if relist:
        _relist(ckpt)
    else:
        _edit_state(ckpt, files=None)
    code, err = _resume(run, capsys, steps=3)
    assert "Traceback" not in err
    assert code == 0, err  # step-1 verifies and reads: resume continues from it
    assert "skipping checkpoint" in err and "step-2" in err and "resuming" in err
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]


@pytest.mark.parametrize("damage", ["truncate", "header-length"])
def test_damaged_weights_with_a_rewritten_list_are_a_clean_skip(run: Path, capsys, damage: str) -> None:
    """The checksum list matches (an attacker rewrote it), but the safetensors file cannot be opened."""
    ckpt = run / "checkpoints" / "step-2"
    shard = ckpt / "model" / "model.safetensors"
    data = bytearray(shard.read_bytes())
    if damage == "truncate":
        del data[len(data) // 2 :]
    else:
        data[0:8] = (10**9).to_bytes(8, "little")  # a header length far past the end of the file
    shard.write_bytes(bytes(data))
    _relist(ckpt)
    code, err = _resume(run, capsys, steps=3)
    assert code == 0 and "Traceback" not in err, err
    assert "skipping checkpoint step-2" in err and "model.safetensors" in err and "step-1" in err
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]


def test_policy_version_that_is_not_a_number_skips_the_checkpoint(run: Path, capsys) -> None:
    _edit_state(run / "checkpoints" / "step-2", policy_version=[1])
    code, err = _resume(run, capsys, steps=3)
    assert code == 0, err
    assert "skipping checkpoint" in err and "policy_version" in err
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]


def test_an_absurd_step_directory_is_skipped(run: Path, capsys) -> None:
    shutil.copytree(run / "checkpoints" / "step-2", run / "checkpoints" / "step-99999999999999999999999")
    code, err = _resume(run, capsys, steps=3)
    assert code == 0, err
    assert "step-99999999999999999999999" in err and "Traceback" not in err
    assert "resuming" in err and "step-2" in err
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]


@pytest.mark.parametrize("damage", ["truncate-weights", "no-checksum-list", "policy-version-list"])
def test_when_no_checkpoint_verifies_resume_stops_and_changes_nothing(run: Path, capsys, damage: str) -> None:
    """Never a restart from step 1 over an existing run: one error line naming the run and the damage."""
    for ckpt in (run / "checkpoints").iterdir():
        if damage == "truncate-weights":
            shard = ckpt / "model" / "model.safetensors"
            with shard.open("r+b") as fh:
                fh.truncate(shard.stat().st_size // 2)
        elif damage == "no-checksum-list":
            _edit_state(ckpt, files=None)
        else:
            _edit_state(ckpt, policy_version=[1])
    before = _snapshot(run)
    code, err = _resume(run, capsys, steps=3)
    line = _one_error(code, err)
    assert str(run) in line and "step-1" in line and "step-2" in line
    assert "--run-dir" in line  # the fix: restore a checkpoint or start a new run
    assert _snapshot(run) == before


def test_eval_of_a_run_without_a_good_checkpoint_is_one_error_naming_the_damage(run: Path, capsys) -> None:
    for ckpt in (run / "checkpoints").iterdir():
        _edit_state(ckpt, files=None)
    capsys.readouterr()
    line = _one_error(main(["eval", "--model", str(run), "--n", "2"]), capsys.readouterr().err)
    assert str(run) in line and "step-2: state.json has no checksum list" in line


def test_a_run_whose_checkpoints_were_removed_is_not_started_over(run: Path, capsys) -> None:
    shutil.rmtree(run / "checkpoints")
    before = _snapshot(run)
    line = _one_error(*_resume(run, capsys, steps=3))
    assert str(run) in line and "has no checkpoint" in line and "logged step 2" in line
    assert _snapshot(run) == before


def test_a_run_killed_before_its_first_checkpoint_starts_again_and_says_so(run: Path, capsys) -> None:
    shutil.rmtree(run / "checkpoints")
    (run / "summary.json").unlink()
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text(lines[0])  # step 1 logged; killed before its checkpoint was complete
    code, err = _resume(run, capsys, steps=1)
    assert code == 0, err
    assert f"resuming {run}: it has no checkpoint yet, so training starts at step 1" in err
    assert [r["step"] for r in read_metrics(run)] == [1]


def test_resume_says_which_step_it_continues_from(run: Path, capsys) -> None:
    code, err = _resume(run, capsys, steps=3)
    assert code == 0, err
    assert f"resuming {run} from checkpoint step-2: training continues at step 3" in err


def test_a_torn_last_metrics_line_is_kept_and_reported(run: Path, capsys) -> None:
    torn = '{"step": 3, "train/lo'
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write(torn)
    code, err = _resume(run, capsys, steps=3)
    assert code == 0, err
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]
    kept = run / "metrics.jsonl.torn"
    assert kept.read_text() == torn + "\n"
    assert "metrics.jsonl" in err and "torn" in err and str(kept) in err


def test_a_link_planted_as_the_lock_file_is_refused_not_followed(run: Path, tmp_path: Path, capsys) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("not tirl's")
    (run / ".lock").unlink(missing_ok=True)  # the copied run has one from its first writer
    (run / ".lock").symlink_to(target)
    line = _one_error(*_resume(run, capsys, steps=3))
    assert ".lock" in line and "lock file" in line
    assert target.read_text() == "not tirl's"


def _locked_by(run: Path, pid: int) -> bool:
    try:
        return (run / ".lock").read_text().strip() == str(pid)
    except OSError:
        return False


def test_a_second_writer_of_a_run_is_refused(run: Path, capsys) -> None:
    """Two ``--resume`` of one run at once: the second is one error line; after a kill -9 the lock is free."""
    cmd = [sys.executable, "-m", "tirl.cli", "train", "--resume", str(run), "--steps", "100000", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        # the first writer holds the lock (its pid is in .lock) — or, without a lock, is past set-up and training
        while not _locked_by(run, proc.pid) and len(read_metrics(run)) < 3:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the first writer did not start: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
            time.sleep(0.05)
        code, err = _resume(run, capsys, steps=3)
        line = _one_error(code, err)
        assert str(run) in line and "another" in line and str(proc.pid) in line
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    code, err = _resume(run, capsys, steps=len(read_metrics(run)) + 1)
    assert code == 0, err  # the kernel released the dead writer's lock


def test_a_file_added_to_every_checkpoint_is_named_with_its_fix(run: Path, capsys) -> None:
    """A stray file (e.g. `tirl report --out` into a checkpoint) still refuses the checkpoint (an added file is how
    an attacker would plant code), and the error now says that deleting the file is the fix."""
    for ckpt in (run / "checkpoints").iterdir():
        (ckpt / "report.html").write_text("<html></html>")
    code, err = _resume(run, capsys, steps=3)
    line = _one_error(code, err)
    assert "report.html is not in the checksum list (added after the checkpoint was saved: delete it" in line
    for ckpt in (run / "checkpoints").iterdir():
        (ckpt / "report.html").unlink()
    code, err = _resume(run, capsys, steps=3)
    assert code == 0, err  # and deleting it is indeed enough


def test_resuming_a_finished_run_says_how_to_continue_and_changes_nothing(run: Path, capsys) -> None:
    """It said "training continues at step 3", trained nothing, and redid the after-evaluation and summary."""
    before = _snapshot(run)
    code, err = _resume(run, capsys, steps=2)
    line = _one_error(code, err)
    assert "finished: its last checkpoint is step 2 of trainer.steps=2" in line and "--steps 12" in line
    assert _snapshot(run) == before


def test_a_run_killed_before_its_summary_finishes_its_evaluation(run: Path, capsys) -> None:
    (run / "summary.json").unlink()
    code, err = _resume(run, capsys, steps=2)
    assert code == 0, err
    assert "its 2 steps are done; the evaluation after training and the summary run now" in err
    assert (run / "summary.json").is_file()


@pytest.mark.parametrize("name", ["metrics.jsonl", "checkpoints", "checkpoints/step-1"])
def test_a_link_in_a_shared_run_is_refused_before_anything_is_written(run: Path, tmp_path: Path, capsys, name) -> None:
    """``metrics.jsonl -> elsewhere`` had resume append to the file outside the run, ``checkpoints -> elsewhere``
    save into and prune the directory outside it."""
    outside = tmp_path / "outside"
    (run / name).rename(outside)
    (run / name).symlink_to(outside)
    before = {p: p.read_bytes() for p in sorted(outside.rglob("*")) if p.is_file()} if outside.is_dir() else None
    text = outside.read_bytes() if outside.is_file() else None
    line = _one_error(*_resume(run, capsys, steps=3))
    assert f"{run / name}: is a symbolic link (to {outside})" in line and "cp -rL" in line
    if outside.is_dir():
        assert {p: p.read_bytes() for p in sorted(outside.rglob("*")) if p.is_file()} == before
    else:
        assert outside.read_bytes() == text


@pytest.fixture(scope="module")
def evaluated_base(tmp_path_factory) -> Path:
    """A finished 2-step run that evaluated before and after (so it has eval_before.json)."""
    root = tmp_path_factory.mktemp("evaluated")
    model = save_tiny_model(root / "tiny")
    run = root / "run"
    flags = with_sets(FLAGS, "trainer.eval_before_after=true")
    assert main(["train", "--model", str(model), "--steps", "2", "--run-dir", str(run), *flags]) == 0
    assert (run / "eval_before.json").is_file()
    return run


@pytest.fixture
def evaluated(evaluated_base: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(evaluated_base, out)
    return out


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("missing", "is missing, and the run resumes from a checkpoint"),
        ("torn", "not valid JSON"),
        ("no_accuracy", "needs a number 'accuracy' from 0 to 1"),
        ("bad_tasks", "'tasks' list whose rows are not the ones tirl writes"),
    ],
)
def test_a_damaged_eval_before_is_refused_before_any_step(evaluated: Path, capsys, damage: str, says: str) -> None:
    """It was read only after the last step: torn, an error then; without accuracy, a traceback; missing, it was
    written anew from the resumed policy and called "before"."""
    run = evaluated
    path = run / "eval_before.json"
    record = json.loads(path.read_text())
    if damage == "missing":
        path.unlink()
    elif damage == "torn":
        path.write_text(path.read_text()[:40])
    elif damage == "no_accuracy":
        path.write_text(json.dumps({k: v for k, v in record.items() if k != "accuracy"}))
    else:
        path.write_text(json.dumps({**record, "tasks": [{"id": "t"}]}))
    before = _snapshot(run)
    line = _one_error(*_resume(run, capsys, steps=3))
    assert says in line and "--set trainer.eval_before_after=false" in line
    assert _snapshot(run) == before  # no step ran: no step-3 checkpoint, no new metrics row


def test_without_the_comparison_a_run_with_no_eval_before_resumes(evaluated: Path, capsys) -> None:
    run = evaluated
    (run / "eval_before.json").unlink()
    capsys.readouterr()
    code = main(["train", "--resume", str(run), "--steps", "3", "--no-progress", "--set",
                 "trainer.eval_before_after=false"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert (run / "checkpoints" / "step-3").is_dir() and not (run / "eval_before.json").exists()


def test_before_the_first_checkpoint_a_damaged_eval_before_is_evaluated_again(evaluated: Path, capsys) -> None:
    """Killed after its evaluation but before any checkpoint: the policy is still the one it started from."""
    run = evaluated
    shutil.rmtree(run / "checkpoints")
    for name in ("metrics.jsonl", "summary.json", "trajectories.jsonl", "eval_after.json"):
        (run / name).unlink(missing_ok=True)
    (run / "eval_before.json").write_text('{"accuracy": ')
    capsys.readouterr()
    code = main(["train", "--resume", str(run), "--steps", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "eval_before.json: not valid JSON" in err and "so it is evaluated again" in err
    assert 0 <= json.loads((run / "eval_before.json").read_text())["accuracy"] <= 1
