"""Reading task files: one JSON object per line, errors name the file and the line.

Blank lines and lines starting with ``#`` are skipped. The file is read by
:func:`tirl.jsonl.read_jsonl` (non-UTF-8 bytes, nesting, over-long integers
are refused there). Every problem raises
:class:`~tirl.errors.InputError` with the path, the 1-based line number and
the fix, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tirl.errors import InputError
from tirl.jsonl import read_jsonl as read_lines


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank, non-``#`` line of ``path`` (tirl's one reader)."""
    yield from read_lines(
        path,
        comments=True,
        objects=True,
        fix="write one JSON object per line",
        missing_fix="check the path (env.tasks_file)",
    )


def require_str(obj: dict[str, Any], key: str, path: str | Path, lineno: int, *, numbers: bool = False) -> str:
    """``obj[key]`` as a non-empty string (numbers accepted when ``numbers``), else an InputError."""
    if key not in obj:
        raise InputError(str(path), lineno, f"missing the field {key!r}", f'add "{key}": ... to this object')
    value = obj[key]
    if numbers and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        kind = "a string or a number" if numbers else "a non-empty string"
        raise InputError(str(path), lineno, f"field {key!r} must be {kind}, got {value!r}", f"set {key!r} to {kind}")
    return value
