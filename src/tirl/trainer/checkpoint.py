"""Atomic training checkpoints: ``run_dir/checkpoints/step-N``.

A checkpoint directory holds::

    model/          save_pretrained (safetensors) + the tokenizer — loadable by `tirl eval --model`
    optimizer.pt    the optimizer's state_dict
    rng.pt          Python, NumPy and torch RNG states (and any extra generator states)
    state.json      {"step": N, "policy_version": V, ...}

It is written into a temporary sibling directory and renamed into place, so
``step-N`` either exists complete or not at all; a ``kill -9`` mid-write
leaves only a ``.tmp-*`` directory, which the next save or resume removes.
Every file is fsynced before the rename. ``state.json`` carries the size and
SHA-256 of every other file (``"files": {relative path: {"size", "sha256"}}``);
:func:`latest_checkpoint` returns the newest checkpoint that verifies against
them and skips a damaged newer one (a truncated shard, a missing file) with a
warning on stderr. Checkpoints written before checksums existed are accepted
unverified.

Not covered: sharded (FSDP/DeepSpeed) states and remote storage.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.utils import logging as hf_logging

from tirl.fileio import fsync_file
from tirl.jsonl import JSONProblem, parse_json

_STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A complete checkpoint on disk."""

    path: Path
    step: int
    state: dict[str, Any]

    @property
    def model_dir(self) -> Path:
        """The ``save_pretrained`` directory (model + tokenizer)."""
        return self.path / "model"


def rng_state() -> dict[str, Any]:
    """The global RNG states of Python, NumPy and torch."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any] | None = None,
    rng: dict[str, Any] | None = None,
    keep_last: int = 3,
) -> Checkpoint:
    """Write ``run_dir/checkpoints/step-{step}`` atomically; keep the newest ``keep_last`` checkpoints."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}-{os.getpid()}"
    tmp.mkdir()
    hf_logging.disable_progress_bar()  # transformers draws a shard-writing bar on every save
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(rng if rng is not None else rng_state(), tmp / "rng.pt")
    full_state = {"step": step, **(state or {}), "files": _manifest(tmp)}
    with (tmp / "state.json").open("w", encoding="utf-8") as fh:
        json.dump(full_state, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    _fsync_dir(tmp / "model")
    _fsync_dir(tmp)
    if final.exists():  # re-saving a step (resumed run): replace it as a whole
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    for old in list_checkpoints(run_dir)[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(old.path, ignore_errors=True)
    return Checkpoint(path=final, step=step, state=full_state)


def list_checkpoints(run_dir: str | Path) -> list[Checkpoint]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    out: list[Checkpoint] = []
    if not root.is_dir():
        return out
    for child in root.iterdir():
        m = _STEP_DIR.match(child.name)
        if not m or not (child / "state.json").is_file():
            continue
        try:
            state = parse_json((child / "state.json").read_bytes())
        except (JSONProblem, OSError):
            continue
        if not isinstance(state, dict):
            continue
        out.append(Checkpoint(path=child, step=int(m.group(1)), state=state))
    return sorted(out, key=lambda c: c.step)


def latest_checkpoint(run_dir: str | Path, *, verify: bool = True) -> Checkpoint | None:
    """The newest complete checkpoint that verifies against its checksums, or None.

    A newer checkpoint that fails verification is skipped with one warning on stderr.
    """
    for ckpt in reversed(list_checkpoints(run_dir)):
        problem = verify_checkpoint(ckpt) if verify else None
        if problem is None:
            return ckpt
        if ckpt.path not in _warned:
            _warned.add(ckpt.path)
            print(f"warning: skipping checkpoint {ckpt.path}: {problem}; using an older one", file=sys.stderr)
    return None


_warned: set[Path] = set()


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _manifest(root: Path) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of every file under ``root`` (each fsynced on the way: it is about to be renamed)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        fsync_file(path)
        out[path.relative_to(root).as_posix()] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    return out


def verify_checkpoint(ckpt: Checkpoint) -> str | None:
    """None when every file listed in ``state.json`` is present with its size and SHA-256; else the problem."""
    files = ckpt.state.get("files")
    if files is None:
        return None  # written before checksums existed
    if not isinstance(files, dict):
        return "state.json has no valid file list"
    for rel, want in files.items():
        path = ckpt.path / rel
        if not isinstance(want, dict) or not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != want.get("size"):
            return f"{rel} has {path.stat().st_size} bytes, {want.get('size')} were written"
        if _sha256(path) != want.get("sha256"):
            return f"{rel} does not match its checksum"
    return None


def load_training_state(ckpt: Checkpoint, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Load the optimizer state into ``optimizer`` and return the saved RNG states.

    The model weights are loaded by the caller from :attr:`Checkpoint.model_dir`
    (the same ``load_policy`` path as any model).
    """
    optimizer.load_state_dict(torch.load(ckpt.path / "optimizer.pt", weights_only=True))
    rng: dict[str, Any] = torch.load(ckpt.path / "rng.pt", weights_only=False)
    return rng
