"""Reading task files: one JSON object per line, errors name the file and the line.

Blank lines and lines starting with ``#`` are skipped. Every problem raises
:class:`~tirl.errors.InputError` with the path, the 1-based line number and
the fix, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tirl.errors import InputError


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank line of ``path``."""
    p = Path(path)
    if not p.is_file():
        raise InputError(str(p), None, "task file does not exist", "check the path (env.tasks_file)")
    with p.open(encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    str(p),
                    lineno,
                    f"not valid JSON ({exc.msg} at column {exc.colno})",
                    "write one JSON object per line",
                ) from None
            if not isinstance(obj, dict):
                raise InputError(
                    str(p), lineno, f"expected a JSON object, got {type(obj).__name__}", "write one object per line"
                )
            yield lineno, obj


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
