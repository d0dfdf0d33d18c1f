"""Checkpoint checksums: resume takes the newest checkpoint that verifies; files are fsynced before the rename."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from trainer_fakes import SMALL

from tirl.models.tiny import build_tiny_model
from tirl.trainer.checkpoint import latest_checkpoint, list_checkpoints, save_checkpoint, verify_checkpoint


def _save(run: Path, steps: tuple[int, ...]) -> None:
    model, tok = build_tiny_model(SMALL, seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in steps:
        save_checkpoint(run, step, model=model, tokenizer=tok, optimizer=opt)


def test_state_json_lists_every_file_with_size_and_sha256(tmp_path):
    _save(tmp_path, (1,))
    (ckpt,) = list_checkpoints(tmp_path)
    files = ckpt.state["files"]
    on_disk = {p.relative_to(ckpt.path).as_posix() for p in ckpt.path.rglob("*") if p.is_file()} - {"state.json"}
    assert set(files) == on_disk and "model/model.safetensors" in files
    assert all(len(v["sha256"]) == 64 and v["size"] > 0 for v in files.values())
    assert verify_checkpoint(ckpt) is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_damaged_newest_checkpoint_is_skipped_with_a_warning(tmp_path, capsys, damage):
    _save(tmp_path, (1, 2))
    shard = tmp_path / "checkpoints" / "step-2" / "model" / "model.safetensors"
    if damage == "truncate":
        with shard.open("r+b") as fh:
            fh.truncate(shard.stat().st_size // 2)
    elif damage == "flip":
        data = bytearray(shard.read_bytes())
        data[-1] ^= 0xFF
        shard.write_bytes(bytes(data))
    else:
        shard.unlink()
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.step == 1
    err = capsys.readouterr().err
    assert "warning: skipping checkpoint" in err and "step-2" in err and "model.safetensors" in err


def test_no_checkpoint_verifies(tmp_path, capsys):
    _save(tmp_path, (1,))
    (tmp_path / "checkpoints" / "step-1" / "optimizer.safetensors").write_bytes(b"")
    assert latest_checkpoint(tmp_path) is None
    assert capsys.readouterr().err == ""  # nothing is used, so nothing is said: the caller's error names the damage
    assert latest_checkpoint(tmp_path, verify=False) is not None


@pytest.mark.parametrize("resave", [False, True], ids=["new-step", "step-saved-again"])
def test_every_file_is_fsynced_before_the_rename(tmp_path, monkeypatch, resave):
    """Before the staging directory gets its name (a rename, or the exchange that replaces a step saved again)."""
    import tirl.fileio

    if resave:
        _save(tmp_path, (3,))
    synced: set[str] = set()
    renamed_with: list[set[str]] = []
    real_fsync, real_rename, real_exchange = os.fsync, os.rename, tirl.fileio._exchange

    def fsync(fd: int) -> None:
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def rename(src, dst, *a, **kw):
        renamed_with.append(set(synced))
        real_rename(src, dst, *a, **kw)

    def exchange(a, b):
        renamed_with.append(set(synced))
        return real_exchange(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(tirl.fileio, "_exchange", exchange)
    _save(tmp_path, (3,))
    (ckpt,) = list_checkpoints(tmp_path)
    tmp_names = {str(Path(p)) for p in renamed_with[-1]}
    for rel in [*ckpt.state["files"], "state.json"]:
        assert any(name.endswith(f"/{rel}") and "/checkpoints/.step-3." in name for name in tmp_names), rel


def test_train_resume_skips_a_truncated_newest_checkpoint(tmp_path, capsys):
    """End to end: `tirl train --resume` continues from the older checkpoint, and no step is lost or repeated."""
    from tirl.cli import main
    from tirl.models.tiny import TinyModelSpec, save_policy
    from tirl.trainer.logging import read_metrics

    spec = TinyModelSpec(hidden_size=32, layers=1, heads=2, kv_heads=2, intermediate_size=64, max_positions=256)
    model_dir = save_policy(*build_tiny_model(spec, seed=0), tmp_path / "tiny")
    run = tmp_path / "run"
    tiny = ["--set", "trainer.prompts_per_step=2", "--set", "algo.group_size=2", "--set", "filter.mode=off",
            "--set", "generation.max_new_tokens=16", "--set", "generation.max_total_tokens=200",
            "--set", "trainer.threads=1", "--set", "trainer.eval_before_after=false",
            "--set", "trainer.checkpoint_every=2", "--no-progress"]  # fmt: skip
    assert main(["train", "--model", str(model_dir), "--steps", "4", "--run-dir", str(run), *tiny]) == 0
    shard = run / "checkpoints" / "step-4" / "model" / "model.safetensors"
    with shard.open("r+b") as fh:
        fh.truncate(shard.stat().st_size // 3)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--steps", "5", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "step-4" in err
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3, 4, 5]
    assert verify_checkpoint(latest_checkpoint(run)) is None and latest_checkpoint(run).step == 5
    # tirl eval of the run: a damaged newest checkpoint is skipped with one warning, not one per look-up
    newest = run / "checkpoints" / "step-5" / "model" / "model.safetensors"  # the newest now: damage it too
    with newest.open("r+b") as fh:
        fh.truncate(newest.stat().st_size // 3)
    capsys.readouterr()
    assert main(["eval", "--model", str(run), "--n", "2", "--set", "trainer.threads=1"]) == 0
    err = capsys.readouterr().err
    assert err.count("skipping checkpoint step-5") == 1, err


@pytest.mark.parametrize("kind", ["file", "symlink", "leading-zeros", "huge-state"])
def test_odd_step_entries_are_skipped_with_their_reason(tmp_path, capsys, kind):
    _save(tmp_path, (1,))
    root = tmp_path / "checkpoints"
    if kind == "file":
        (root / "step-5").write_text("not a checkpoint")
    elif kind == "symlink":
        (root / "step-5").symlink_to(root / "step-1")
    elif kind == "leading-zeros":
        shutil.copytree(root / "step-1", root / "step-05")
    else:
        shutil.copytree(root / "step-1", root / "step-5")
        with (root / "step-5" / "state.json").open("a") as fh:
            fh.write(" " * (16 * 2**20))
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.step == 1
    err = capsys.readouterr().err
    assert "skipping checkpoint step-5" in err or "skipping checkpoint step-05" in err, err


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_saving_over_an_odd_step_entry_replaces_it_without_following_it(tmp_path, kind):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    root = tmp_path / "run" / "checkpoints"
    root.mkdir(parents=True)
    if kind == "symlink":
        (root / "step-1").symlink_to(outside)
    else:
        (root / "step-1").write_text("x")
    _save(tmp_path / "run", (1,))
    assert (outside / "keep.txt").read_text() == "mine"
    assert verify_checkpoint(latest_checkpoint(tmp_path / "run")) is None
