"""Atomic training checkpoints: ``run_dir/checkpoints/step-N``.

A checkpoint directory holds::

    model/          save_pretrained (safetensors) + the tokenizer — loadable by `tirl eval --model`
    optimizer.pt    the optimizer's state_dict
    rng.pt          Python, NumPy and torch RNG states (and any extra generator states)
    state.json      {"step": N, "policy_version": V, ...}

It is written into a temporary sibling directory and renamed into place, so
``step-N`` either exists complete or not at all; a ``kill -9`` mid-write
leaves only a ``.tmp-*`` directory, which the next save or resume removes.

Not covered: sharded (FSDP/DeepSpeed) states and remote storage.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.utils import logging as hf_logging

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
    full_state = {"step": step, **(state or {})}
    with (tmp / "state.json").open("w", encoding="utf-8") as fh:
        json.dump(full_state, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
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
            state = json.loads((child / "state.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            continue
        out.append(Checkpoint(path=child, step=int(m.group(1)), state=state))
    return sorted(out, key=lambda c: c.step)


def latest_checkpoint(run_dir: str | Path) -> Checkpoint | None:
    """The newest complete checkpoint, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_training_state(ckpt: Checkpoint, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Load the optimizer state into ``optimizer`` and return the saved RNG states.

    The model weights are loaded by the caller from :attr:`Checkpoint.model_dir`
    (the same ``load_policy`` path as any model).
    """
    optimizer.load_state_dict(torch.load(ckpt.path / "optimizer.pt", weights_only=True))
    rng: dict[str, Any] = torch.load(ckpt.path / "rng.pt", weights_only=False)
    return rng
