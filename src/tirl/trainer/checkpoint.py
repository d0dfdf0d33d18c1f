"""Atomic, verified training checkpoints: ``run_dir/checkpoints/step-N``.

A checkpoint directory holds::

    model/                  save_pretrained (safetensors) + the tokenizer — loadable by `tirl eval --model`
    optimizer.safetensors   the optimiser's tensors  } no pickle anywhere:
    optimizer.json          its structure            } see :mod:`tirl.trainer.train_state`
    rng.json                Python, NumPy and torch RNG states (CPU, and each CUDA device / MPS where present)
    state.json              {"step": N, "policy_version": V, "files": {path: {"size", "sha256"}}}

It is written into a hidden sibling directory (``.step-N.*``, by
:func:`tirl.fileio.staged_dir`) and renamed into place, so ``step-N`` either
exists complete or not at all. A step saved again (a resumed run redoing a
step) is swapped with the old one in one atomic exchange on Linux, so
``step-N`` is at every instant the whole old checkpoint or the whole new one;
where the file system cannot exchange (NFS), a ``kill -9`` between the two
renames leaves the old one as ``.step-N.old.*/step-N``, and the next resume or
save puts it back. Every file is fsynced before the rename. A ``kill -9``
mid-write leaves only hidden ``.step-N.*`` (or older tirl's ``.tmp-*``)
directories, which no reader looks at (only ``step-N`` names are checkpoints)
and the next save removes; old checkpoints beyond ``keep_last`` are renamed
to a hidden name before they are deleted, so a kill mid-delete leaves no
half checkpoint under a ``step-N`` name. A save that runs out of space
(``ENOSPC``, ``EDQUOT``) removes its temporary directory and raises
:class:`~tirl.errors.OutputError` (one ``error:`` line).

Resume (:func:`resume_point`) takes the newest checkpoint that verifies:
``state.json`` is a JSON object whose ``step`` matches the directory name and
whose ``policy_version`` is a whole number; its checksum list names every file
in the directory (a file it does not list, a symbolic link, a listed file that
is missing or differs in size or SHA-256: damaged); the training state parses
and passes its checks; every ``model/*.safetensors`` header reads. A
checkpoint *without* a checksum list is refused, not trusted. A damaged
newer checkpoint is skipped with a line saying so; when checkpoints exist
but none verifies, resume stops with one error line naming the run and the
damage and changes nothing — it never starts over at step 1.

What the checksums give: protection against corruption (a torn copy, a full
disk, bit rot, a truncated file). What they cannot give: protection against
someone who can write the run directory, since they can rewrite the list in
``state.json`` too. Against that, the rule is that nothing in a checkpoint can
run code: no pickle is loaded (``tests/test_no_pickle.py`` checks the source),
and every file is parsed by a reader that refuses bad input with an error.

Not covered: sharded (FSDP/DeepSpeed) states, remote storage, and a file
replaced between its verification and its load.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from transformers.utils import logging as hf_logging

from tirl.errors import InputError, OutputError
from tirl.fileio import clean_staged, fsync_file, staged_dir
from tirl.jsonl import JSONProblem, parse_json
from tirl.trainer import run_files
from tirl.trainer.run_files import step_dirs  # torch-free, in run_files: an interrupted line lists them
from tirl.trainer.train_state import DamagedState, RngState, TrainingState, read_training_state, write_training_state

_STAGED = re.compile(r"^\.(step-\d+)\.")  # what staged_dir leaves beside step-N: .step-N.XXXX, .step-N.old.XXXX
MAX_STEP = 10**12  # far beyond any run; a larger number in a directory name is not a step tirl wrote
MAX_STATE_BYTES = 16 * 2**20  # state.json: a step, a version and one checksum line per file
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint directory whose ``state.json`` parsed (its files are checked by :func:`verify_checkpoint`)."""

    path: Path
    step: int
    state: dict[str, Any]
    policy_version: int = 0

    @property
    def model_dir(self) -> Path:
        """The ``save_pretrained`` directory (model + tokenizer)."""
        return self.path / "model"


@dataclass(frozen=True, slots=True)
class Skipped:
    """A ``step-N`` directory that cannot be used, and why."""

    path: Path
    problem: str


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """The checkpoint a resume continues from, its parsed training state, and the newer ones it skipped."""

    checkpoint: Checkpoint
    training: TrainingState
    skipped: list[Skipped] = field(default_factory=list)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _disk_full(exc: BaseException) -> bool:
    """Whether a save failed for lack of space (an OSError, or a library's wrapped message about one)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    text = str(exc)
    return "No space left" in text or "StorageFull" in text or "Disk quota" in text


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any] | None = None,
    rng: RngState | None = None,
    keep_last: int = 3,
) -> Checkpoint:
    """Write ``run_dir/checkpoints/step-{step}`` atomically; keep the newest ``keep_last`` checkpoints.

    Out of space: nothing is left behind and :class:`~tirl.errors.OutputError` says so.
    """
    root = Path(run_dir) / run_files.CHECKPOINTS
    final = root / f"step-{step}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        clean_leftovers(run_dir)
        with staged_dir(final, replace=True) as tmp:  # an old step-N (a file or a link too) is swapped out whole
            full_state = _write(tmp, step, model, tokenizer, optimizer, state, rng)
    except BaseException as exc:
        if not _disk_full(exc):
            raise
        raise OutputError(
            str(root), None, f"no space left on the device while saving checkpoint step-{step}",
            f"free space, then continue the run with `tirl train --resume {run_dir}`",
        ) from None  # fmt: skip
    for old in list_checkpoints(run_dir)[:-keep_last] if keep_last > 0 else []:
        _delete(old.path)
    return Checkpoint(path=final, step=step, state=full_state, policy_version=int(full_state.get("policy_version", 0)))


def _delete(path: Path) -> None:
    """Remove a checkpoint: first renamed to a hidden ``.tmp-*`` name (one step), so no half of it keeps its name."""
    doomed = path.with_name(f".tmp-deleted-{path.name}-{os.getpid()}")
    try:
        os.rename(path, doomed)
    except OSError:
        return  # already gone, or the directory takes no rename: left as it is, whole
    shutil.rmtree(doomed, ignore_errors=True)


def clean_leftovers(run_dir: str | Path, *, restore_only: bool = False) -> list[str]:
    """Tidy ``checkpoints/`` after a killed save; the names of the checkpoints put back.

    A ``step-N`` swapped out but not yet replaced (``.step-N.old.*/step-N``, see the module doc) is put back
    when ``step-N`` is missing; then, unless ``restore_only``, every hidden leftover is removed: staging
    directories, old checkpoints swapped out but not yet deleted, ``.tmp-*``. The caller holds the run's lock
    (a save in progress in another process would lose its directory).
    """
    root = Path(run_dir) / run_files.CHECKPOINTS
    if not root.is_dir():
        return []
    staged = {m.group(1) for m in (_STAGED.match(p.name) for p in root.iterdir()) if m}
    restored = [name for name in sorted(staged) if clean_staged(root / name, restore_only=restore_only)]
    if not restore_only:
        for stale in root.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
    return restored


def _write(tmp: Path, step: int, model: Any, tokenizer: Any, optimizer: Any, state: Any, rng: Any) -> dict[str, Any]:
    hf_logging.disable_progress_bar()  # transformers draws a shard-writing bar on every save
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    write_training_state(optimizer, rng if rng is not None else RngState.capture(), tmp)
    full_state = {"step": step, "policy_version": 0, **(state or {}), "files": _manifest(tmp)}
    with (tmp / "state.json").open("w", encoding="utf-8") as fh:
        json.dump(full_state, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    _fsync_dir(tmp / "model")
    _fsync_dir(tmp)
    return full_state


def _read_entry(child: Path, step: int) -> Checkpoint | Skipped:
    """A ``step-N`` directory as a :class:`Checkpoint` (``state.json`` checked) or why it is not one."""
    if not 1 <= step <= MAX_STEP or child.name != f"step-{step}":
        return Skipped(child, f"step number is not one tirl writes (1..{MAX_STEP}, no leading zeros)")
    if child.is_symlink() or not child.is_dir():
        return Skipped(child, "is not a directory (or is a symbolic link)")
    try:
        if (child / "state.json").stat().st_size > MAX_STATE_BYTES:
            return Skipped(child, f"state.json is larger than {MAX_STATE_BYTES} bytes")
        state = parse_json((child / "state.json").read_bytes())
    except FileNotFoundError:
        return Skipped(child, "state.json is missing")
    except (JSONProblem, OSError) as exc:
        return Skipped(child, f"state.json cannot be read ({exc})")
    if not isinstance(state, dict):
        return Skipped(child, "state.json is not a JSON object")
    if state.get("step") != step or isinstance(state.get("step"), bool):
        return Skipped(child, f"state.json says step {str(state.get('step'))[:40]}, the directory step {step}")
    version = state.get("policy_version", step)
    if not (isinstance(version, int) and not isinstance(version, bool) and 0 <= version <= MAX_STEP):
        return Skipped(child, f"state.json's policy_version {str(version)[:40]} is not a whole number >= 0")
    return Checkpoint(path=child, step=step, state=state, policy_version=version)


def scan_checkpoints(run_dir: str | Path) -> tuple[list[Checkpoint], list[Skipped]]:
    """The ``step-N`` directories of a run: those whose ``state.json`` parsed, and the others; oldest first."""
    good: list[Checkpoint] = []
    bad: list[Skipped] = []
    for step, child in step_dirs(run_dir):
        entry = _read_entry(child, step)
        (good if isinstance(entry, Checkpoint) else bad).append(entry)  # type: ignore[arg-type]
    return sorted(good, key=lambda c: c.step), sorted(bad, key=lambda s: s.path.name)


def list_checkpoints(run_dir: str | Path) -> list[Checkpoint]:
    """Checkpoints of a run whose ``state.json`` parsed, oldest first (files not verified)."""
    return scan_checkpoints(run_dir)[0]


def find_checkpoint(run_dir: str | Path, *, verify: bool = True) -> tuple[Checkpoint | None, list[Skipped]]:
    """The newest checkpoint that verifies against its checksums (or None), and the newer ones that do not."""
    good, bad = scan_checkpoints(run_dir)
    skipped = list(bad)
    for ckpt in reversed(good):
        problem = verify_checkpoint(ckpt) if verify else None
        if problem is None:
            return ckpt, skipped
        skipped.append(Skipped(ckpt.path, problem))
    return None, skipped


def latest_checkpoint(run_dir: str | Path, *, verify: bool = True) -> Checkpoint | None:
    """The newest checkpoint that verifies against its checksums, or None (``tirl eval --model RUN_DIR``).

    When one is found, each newer checkpoint that does not verify is named on stderr with its problem; when
    none is, nothing is printed (:func:`find_checkpoint` gives the reasons to the caller's error).
    """
    ckpt, skipped = find_checkpoint(run_dir, verify=verify)
    if ckpt is not None:
        warn_skipped(skipped, ckpt)
    return ckpt


def damage_summary(skipped: list[Skipped]) -> str:
    """``"step-2: PROBLEM; step-1: PROBLEM"`` for an error line."""
    return "; ".join(f"{s.path.name}: {s.problem}" for s in skipped)


def warn_skipped(skipped: list[Skipped], used: Checkpoint | None) -> None:
    """One ``warning:`` line per skipped checkpoint, saying which one is used instead."""
    tail = f"; using {used.path.name}" if used is not None else ""
    for s in skipped:
        print(f"warning: skipping checkpoint {s.path.name} ({s.path}): {s.problem}{tail}", file=sys.stderr)


def resume_point(run_dir: str | Path) -> ResumePoint | None:
    """The newest checkpoint that verifies and whose training state reads; None when the run has no checkpoint.

    :class:`~tirl.errors.InputError` when checkpoints exist but none can be resumed (it names each one's
    problem). Nothing is printed or changed here.
    """
    good, bad = scan_checkpoints(run_dir)
    skipped = list(bad)
    for ckpt in reversed(good):
        problem = verify_checkpoint(ckpt) or _weights_problem(ckpt)
        if problem is None:
            try:
                return ResumePoint(ckpt, read_training_state(ckpt.path), skipped)
            except DamagedState as exc:
                problem = str(exc)
        skipped.append(Skipped(ckpt.path, problem))
    if not skipped:
        return None
    damage = damage_summary(skipped)
    raise InputError(str(run_dir), None, f"no checkpoint of this run can be resumed ({damage}); nothing was changed",
                     "restore a good checkpoints/step-N from a copy, or start a new run with --run-dir")  # fmt: skip


def _weights_problem(ckpt: Checkpoint) -> str | None:
    """Why a safetensors file of the model cannot be opened (header and offsets only: no tensor is read)."""
    shards = sorted(ckpt.model_dir.glob("*.safetensors"))
    if not shards:
        return "model/ has no .safetensors weights"
    for shard in shards:
        try:
            with safe_open(str(shard), framework="pt") as fh:
                fh.keys()
        except (SafetensorError, OSError, ValueError) as exc:
            return f"model/{shard.name} cannot be read ({str(exc)[:160]})"
    return None


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


def _on_disk(root: Path) -> tuple[set[str], str | None]:
    """Relative paths of the files under ``root`` (not following links), or the first thing that is not one."""
    files: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                return files, f"{rel} is a symbolic link"
            if name in filenames:
                if not path.is_file():
                    return files, f"{rel} is not a regular file"
                files.add(rel)
    files.discard("state.json")
    return files, None


def _listed(files: Any) -> tuple[dict[str, tuple[int, str]], str | None]:
    """The checksum list as {path: (size, sha256)}, or what is wrong with it."""
    if files is None:
        return {}, "state.json has no checksum list (written by an older tirl, or edited): it is not trusted"
    if not isinstance(files, dict):
        return {}, "state.json's checksum list is not an object"
    out: dict[str, tuple[int, str]] = {}
    for rel, want in files.items():
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in rel:
            return {}, f"the checksum list names {rel[:80]!r}, which is not a path inside the checkpoint"
        size = want.get("size") if isinstance(want, dict) else None
        digest = want.get("sha256") if isinstance(want, dict) else None
        if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0 and isinstance(digest, str)):
            return {}, f"the checksum list's entry for {rel[:80]} has no size and sha256"
        if not _SHA256.match(digest):
            return {}, f"the checksum list's sha256 of {rel[:80]} is not 64 hex digits"
        out[rel] = (size, digest)
    return out, None


def verify_checkpoint(ckpt: Checkpoint) -> str | None:
    """None when the checksum list names exactly the files on disk, each with its size and SHA-256; else the problem."""
    listed, problem = _listed(ckpt.state.get("files"))
    if problem is not None:
        return problem
    present, problem = _on_disk(ckpt.path)
    if problem is not None:
        return problem
    for rel in sorted(present - set(listed)):
        return f"{rel} is not in the checksum list (added after the checkpoint was saved: delete it if you added it)"
    for rel, (size, digest) in sorted(listed.items()):
        path = ckpt.path / rel
        if rel not in present:
            return f"{rel} is missing"
        if path.stat().st_size != size:
            return f"{rel} has {path.stat().st_size} bytes, {size} were written"
        if _sha256(path) != digest:
            return f"{rel} does not match its checksum"
    return None
