"""Reading and writing the JSONL formats, with errors that name the file and the line.

Writes are atomic: :func:`atomic_write` writes to a temporary file beside the
target and renames it into place only when the block finishes without an
exception, so a failed command never leaves a half-written output behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tirl.errors import InputError
from tirl.types import Trajectory


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, object)`` for each non-blank line; bad JSON raises :class:`InputError`."""
    p = Path(path)
    if not p.is_file():
        raise InputError(str(p), None, "file not found", "check the path")
    with p.open("r", encoding="utf-8", errors="strict") as fh:
        try:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(
                        str(p),
                        number,
                        f"not valid JSON ({exc.msg} at column {exc.colno})",
                        "each line must be one JSON object",
                    ) from None
        except UnicodeDecodeError as exc:
            raise InputError(str(p), None, f"not UTF-8 text ({exc.reason})", "re-encode the file as UTF-8") from None


def read_trajectories(path: str | Path) -> Iterator[tuple[int, Trajectory]]:
    """Yield ``(line_number, Trajectory)``; a line without ``messages`` raises :class:`InputError`."""
    for number, obj in read_jsonl(path):
        try:
            traj = Trajectory.from_dict(obj, default_id=f"line-{number}")
        except ValueError as exc:
            raise InputError(
                str(path),
                number,
                str(exc),
                'each line needs {"id": ..., "messages": [{"role": ..., "content": ...}, ...]}',
            ) from None
        yield number, traj


@contextmanager
def atomic_write(path: str | Path) -> Iterator[IO[str]]:
    """Open a text file for writing that appears at ``path`` only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
