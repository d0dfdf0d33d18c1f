"""Ctrl-C in `tirl train`, and the model `tirl eval` names, on a tiny random model.

Ctrl-C is a real SIGINT to a `tirl train` subprocess once it has a checkpoint: it used to print ``interrupted`` and
nothing else; it now names the checkpoint the run directory keeps and the command that continues it, and that
command finishes the run. Not covered here: Ctrl-C before training starts (the new run directory is removed then;
which moment a signal lands in is not repeatable); SIGTERM, ``--nproc`` ranks and the first step are in
``tests/distributed/test_interrupt_ranks.py``.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.tiny_run import TINY_RUN_ARGS, save_tiny_model

from tirl.cli import main
from tirl.trainer.logging import read_metrics

TINY = TINY_RUN_ARGS


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a shell's background job inherits SIGINT ignored


@pytest.mark.slow
def test_ctrl_c_names_the_checkpoint_kept_and_the_command_that_continues(model_dir: Path, tmp_path: Path, capsys):
    run_dir = tmp_path / "run"
    args = ["train", "--model", str(model_dir), "--steps", "40", "--run-dir", str(run_dir), *TINY]
    args += ["--set", "trainer.eval_before_after=false", "--set", "trainer.checkpoint_every=1"]
    proc = subprocess.Popen([sys.executable, "-m", "tirl.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)  # fmt: skip
    deadline = time.monotonic() + 180
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if len(read_metrics(run_dir)) >= 2:  # step 1's checkpoint is complete before step 2 starts
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.05)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    said = re.fullmatch(rf"interrupted: {re.escape(str(run_dir))} keeps checkpoint step-(\d+) — continue it with "
                        rf"`tirl train --resume {re.escape(str(run_dir))}`", last)  # fmt: skip
    assert said, err[-2000:]
    kept = int(said.group(1))
    assert kept >= 1 and (run_dir / "checkpoints" / f"step-{kept}" / "state.json").is_file()
    assert "Traceback" not in err
    assert main(["train", "--resume", str(run_dir), "--steps", str(kept + 1), "--no-progress"]) == 0  # as it said
    assert [r["step"] for r in read_metrics(run_dir)] == list(range(1, kept + 2))
    assert "training continues at step" in capsys.readouterr().err


def test_eval_names_the_model_set_by_model_path(model_dir: Path, capsys) -> None:
    """``--set model.path=DIR`` evaluates DIR; the record said ``built-in`` (only ``--model`` was named)."""
    code = main(["eval", "--set", f"model.path={model_dir}", "--n", "1", "--json", *TINY[:-1]])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out.strip().splitlines()[-1])["model"] == str(model_dir)
