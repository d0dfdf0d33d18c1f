"""Disk full while a checkpoint is written: one ``error:`` line, exit 2, and no ``.step-N.*`` or ``step-N`` left.

Two ways to run out of space: a real tmpfs too small for a checkpoint (root only: it mounts one; skipped
elsewhere), and ``ENOSPC`` from ``fsync`` of a checkpoint file (how a network or thin-provisioned file system
reports a full disk late), which runs everywhere.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model

from tirl.cli import main

FLAGS = [*TINY_TRAIN_ARGS, "--set", "trainer.checkpoint_every=1"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


def _assert_full_disk_refusal(code: int, err: str, run: Path) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "no space" in lines[0].lower() and str(run) in lines[0] and "--resume" in lines[0], lines[0]
    ckpts = run / "checkpoints"
    assert not ckpts.exists() or not list(ckpts.iterdir()), list(ckpts.iterdir())  # no .step-1.* staging, no step-1


def test_enospc_from_fsync_of_a_checkpoint_file(model_dir: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if "/checkpoints/.step-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    run = tmp_path / "run"
    capsys.readouterr()
    code = main(["train", "--model", str(model_dir), "--steps", "1", "--run-dir", str(run), *FLAGS])
    _assert_full_disk_refusal(code, capsys.readouterr().err, run)


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A 160 KiB tmpfs: room for a run's logs, not for a checkpoint of the tiny model (~200 KB)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("root-only: mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"root-only: cannot mount a tmpfs here ({done.stderr.decode(errors='replace').strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_real_full_tmpfs_during_the_first_checkpoint(model_dir: Path, small_tmpfs: Path, capsys) -> None:
    run = small_tmpfs / "run"
    capsys.readouterr()
    flags = [*FLAGS, "--set", "trainer.samples_per_step=1"]
    code = main(["train", "--model", str(model_dir), "--steps", "1", "--run-dir", str(run), *flags])
    _assert_full_disk_refusal(code, capsys.readouterr().err, run)


def test_enospc_while_writing_the_logs_is_one_error_line(model_dir: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """Any write of the run (metrics, TensorBoard, summary) that finds the disk full: one line naming the run."""
    from tirl.trainer.logging import RunLogger

    def log_step(self: RunLogger, step: int, metrics: dict) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(RunLogger, "log_step", log_step)
    run = tmp_path / "run"
    capsys.readouterr()
    code = main(["train", "--model", str(model_dir), "--steps", "1", "--run-dir", str(run), *FLAGS])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"error: {run}: no space left") and "--resume" in lines[0]


def test_enospc_in_tensorboards_writer_thread_is_one_error_line(
    model_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """TensorBoard writes event files from its own thread: its failure is reported once, not also as a traceback."""
    import threading

    from tensorboard.summary.writer.record_writer import RecordWriter

    def write(self: RecordWriter, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(RecordWriter, "write", write)
    hook = threading.excepthook
    run = tmp_path / "run"
    capsys.readouterr()
    code = main(["train", "--model", str(model_dir), "--steps", "1", "--run-dir", str(run), *FLAGS])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err and "Exception in thread" not in err, err
    assert len(lines) == 1 and lines[0].startswith(f"error: {run}: no space left"), err
    assert threading.excepthook is hook  # the logger put the process's hook back
