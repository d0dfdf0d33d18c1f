r"""The one JSON/JSONL reader of tirl, with errors that name the file, the line and the fix.

:func:`parse_json` is :func:`json.loads` made safe for hostile text (files
and the HTTP bodies of ``tirl serve``): every problem is a
:class:`JSONProblem` (a ``ValueError``) with a one-line reason instead of a
``RecursionError`` or a conversion error. It refuses

* text that is not JSON;
* nesting deeper than :data:`MAX_DEPTH` (``[[[[...]]]]`` 1e5 levels deep);
* integers longer than Python's 4300-digit conversion limit;
* strings with lone UTF-16 surrogates (the escape ``\ud800`` alone), which no UTF-8 file
  or response can hold;
* ``NaN``/``Infinity`` when ``allow_nan=False`` (request bodies);
* an object that repeats a key when ``unique_keys=True`` (request bodies: :class:`DuplicateKey` names it;
  ``json.loads`` keeps the last value, so ``{"model": "a", "model": "b"}`` was served as ``"b"``).

:func:`read_jsonl` reads a JSONL file line by line through
:func:`parse_json`: non-UTF-8 bytes, bad lines and non-objects raise
:class:`~tirl.errors.InputError` naming the line. Options cover the
differences between tirl's files: ``comments`` (task files skip ``#``
lines), ``torn_tail`` (logs of a killed run may end with half a line) and
``objects`` (every line must be an object). :func:`jsonl_line` is that
reading of one raw line, and :func:`to_trajectory` a line's value as a
:class:`~tirl.types.Trajectory`: ``tirl filter`` runs them on each line its
fast path does not take (:mod:`tirl.filters.stream`).

Writes go through :func:`tirl.fileio.atomic_write` (re-exported here).
"""

from __future__ import annotations

import decimal
import json
import math
import numbers
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict, Unpack

from tirl.errors import InputError
from tirl.fileio import atomic_write
from tirl.inputs import input_file
from tirl.types import FieldError, Trajectory

__all__ = [
    "MAX_DEPTH",
    "DuplicateKey",
    "JSONProblem",
    "NotJSON",
    "atomic_write",
    "check_depth",
    "json_value",
    "jsonl_line",
    "nonfinite_to_null",
    "open_input",
    "other_reader",
    "parse_json",
    "read_jsonl",
    "read_jsonl_text",
    "read_trajectories",
    "read_trajectory_lines",
    "to_trajectory",
]

MAX_DEPTH = 64  # deeper than any file tirl reads or request it serves; deep enough for tool-call arguments
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # the only way a strict UTF-8 line holds a lone surrogate


class JSONProblem(ValueError):
    """Text that :func:`parse_json` refuses; ``str()`` is the reason, e.g. ``"nested deeper than 64 levels"``."""


class DuplicateKey(JSONProblem):
    """An object that repeats ``key`` (:func:`parse_json` with ``unique_keys=True``)."""

    def __init__(self, key: str) -> None:
        shown = repr(key) if len(repr(key)) <= 40 else f"{repr(key)[:30]}... ({len(key)} characters)"
        super().__init__(f"the key {shown} appears twice in one object: give each key once")
        self.key = key


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s object hook that refuses a repeated key."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return value


def _no_constant(name: str) -> Any:
    raise JSONProblem(f"{name} is not a JSON number")


def _may_hold_surrogates(text: str | bytes) -> bool:
    """Whether the parsed value can hold a lone surrogate (False lets :func:`_check_tree` skip every string)."""
    if not isinstance(text, str) or _SURROGATE_ESCAPE.search(text):
        return True  # json.loads decodes bytes with "surrogatepass"
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_depth(value: Any, depth: int = 1) -> None:
    """The depth check alone, level by level over the containers only (the fast path of :func:`_check_tree`).

    ``depth``: the level ``value`` sits at (1 for a whole document; a value inside one starts deeper).
    """
    level = [value] if isinstance(value, dict | list) else []
    while level:
        if depth > MAX_DEPTH:
            raise JSONProblem(f"nested deeper than {MAX_DEPTH} levels")
        below: list[Any] = []
        for node in level:
            items = node.values() if isinstance(node, dict) else node
            below.extend(x for x in items if isinstance(x, dict | list))
        level = below
        depth += 1


def _check_tree(value: Any, strings: bool = True) -> None:
    """Depth and (when ``strings``) lone-surrogate checks, iteratively (no recursion to exhaust)."""
    if not strings:
        check_depth(value)
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if not node.isascii():
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError:
                    raise JSONProblem("a string holds a lone UTF-16 surrogate (not valid Unicode)") from None
            continue
        if isinstance(node, dict):
            children: Any = [*node.keys(), *node.values()]
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > MAX_DEPTH:
            raise JSONProblem(f"nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def parse_json(text: str | bytes, *, allow_nan: bool = True, unique_keys: bool = False) -> Any:
    """:func:`json.loads` that raises only :class:`JSONProblem` (see the module doc)."""
    try:
        value = json.loads(
            text,
            parse_constant=None if allow_nan else _no_constant,
            object_pairs_hook=_unique_object if unique_keys else None,
        )
    except json.JSONDecodeError as exc:
        raise JSONProblem(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise JSONProblem(f"nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError as exc:
        raise JSONProblem(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except JSONProblem:
        raise
    except ValueError as exc:  # int('9' * 5000): "Exceeds the limit (4300 digits) for integer string conversion"
        if "digits" not in str(exc):
            raise JSONProblem(f"not valid JSON ({exc})") from None
        raise JSONProblem(f"an integer has more than {sys.get_int_max_str_digits()} digits") from None
    if not allow_nan and isinstance(value, float) and not math.isfinite(value):
        raise JSONProblem("a number is out of range")
    _check_tree(value, strings=_may_hold_surrogates(text))
    return value


def open_input(p: Path, missing_fix: str = "check the path") -> Any:
    """``p`` opened for binary reading; what :func:`tirl.inputs.input_file` refuses is an InputError.

    A pipe is read (once); a missing file, a directory, a device, a socket or an unreadable path is refused.
    """
    input_file(p, missing_fix)
    try:
        return p.open("rb")
    except OSError as exc:
        raise InputError(str(p), None, f"cannot be read ({exc.strerror})", missing_fix) from None


class ReadOptions(TypedDict, total=False):
    """The keyword options of :func:`read_jsonl` (defaults: those of :func:`read_jsonl_text`)."""

    comments: bool
    torn_tail: bool
    objects: bool
    fix: str
    missing_fix: str
    on_torn: Callable[[int], None] | None


def read_jsonl(path: str | Path, **options: Unpack[ReadOptions]) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` for each non-blank line; every problem raises :class:`InputError`.

    ``comments``: skip lines starting with ``#``. ``torn_tail``: a last line
    without a newline that does not parse is ignored (a killed writer's
    half line); ``on_torn`` is then called with its line number, so the
    caller can say so. ``objects``: a line that is not a JSON object is an error.
    ``fix``/``missing_fix``: the fix named by a bad line's / a missing file's error.
    """
    for number, value, _ in read_jsonl_text(path, **options):
        yield number, value


def read_jsonl_text(
    path: str | Path,
    *,
    comments: bool = False,
    torn_tail: bool = False,
    objects: bool = False,
    fix: str = "each line must be one JSON object",
    missing_fix: str = "check the path",
    on_torn: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, Any, str]]:
    """:func:`read_jsonl` that also yields each line's text, stripped (to copy a line unchanged)."""
    p = Path(path)
    with open_input(p, missing_fix) as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                got = jsonl_line(p, number, raw, comments=comments, torn_tail=torn_tail, objects=objects, fix=fix)
            except _TornTail:
                if on_torn is not None:
                    on_torn(number)
                return
            if got is not None:
                yield number, *got


class _TornTail(Exception):
    """The last line has no newline and does not parse: a killed writer's half line (``torn_tail``)."""


def jsonl_line(
    p: Path,
    number: int,
    raw: bytes,
    *,
    comments: bool = False,
    torn_tail: bool = False,
    objects: bool = False,
    fix: str = "each line must be one JSON object",
) -> tuple[Any, str] | None:
    """One raw line (``number`` counts from 1) as :func:`read_jsonl_text` reads it: ``(value, stripped text)``.

    ``None`` for a blank (or, with ``comments``, a ``#``) line; a problem raises :class:`InputError`.
    """
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            str(p), number, f"not UTF-8 text ({exc.reason} at byte {exc.start})", "re-encode the file as UTF-8"
        ) from None
    text = line.strip()
    if not text or (comments and text.startswith("#")):
        return None
    try:
        value = parse_json(text)
    except JSONProblem as exc:
        if torn_tail and not raw.endswith(b"\n"):
            raise _TornTail from None
        if number == 1 and text in ("{", "["):  # a run's config.json or summary.json: "Expecting property name"
            problem = f"line 1 is '{text}' alone: one JSON document written over several lines, not JSON Lines"
            raise InputError(str(p), number, problem, fix) from None
        raise InputError(str(p), number, str(exc), fix) from None
    if objects and not isinstance(value, dict):
        raise InputError(str(p), number, f"expected a JSON object, got {type(value).__name__}", fix)
    return value, text


def read_json(path: str | Path, *, missing_fix: str = "check the path") -> Any:
    """One JSON document (``config.json``, ``state.json``); problems raise :class:`InputError`."""
    p = Path(path)
    with open_input(p, missing_fix) as fh:
        data = fh.read()
    try:
        return parse_json(data)
    except JSONProblem as exc:
        raise InputError(str(p), None, str(exc), "the file must hold one JSON document") from None


def read_trajectories(path: str | Path) -> Iterator[tuple[int, Trajectory]]:
    """Yield ``(line_number, Trajectory)``; a line without ``messages`` raises :class:`InputError`."""
    for number, traj, _ in read_trajectory_lines(path):
        yield number, traj


def read_trajectory_lines(path: str | Path) -> Iterator[tuple[int, Trajectory, str]]:
    """:func:`read_trajectories` that also yields each line's text (``tirl filter --kept`` copies it)."""
    for number, obj, text in read_jsonl_text(path):
        yield number, to_trajectory(path, number, obj), text


def to_trajectory(path: str | Path, number: int, obj: Any) -> Trajectory:
    """Line ``number``'s value as a :class:`Trajectory`; a field of the wrong type or value raises InputError.

    The error names the field and the type it must have (:func:`tirl.types.trajectory_fields`), and ends with
    that field's fix.
    """
    try:
        return Trajectory.from_dict(obj, default_id=f"line-{number}")
    except (ValueError, TypeError) as exc:
        fix = exc.fix if isinstance(exc, FieldError) else _LINE_FIX
        if isinstance(obj, dict) and "messages" not in obj:  # a run's metrics.jsonl or trace: name its reader
            fix = other_reader(set(obj), str(path)) or fix
        raise InputError(str(path), number, str(exc), fix) from None


def other_reader(keys: set[str], path: str) -> str | None:
    """The command that reads a file of these keys when it is another of a run's files, else None.

    A new user's mix-up, told as the fix: ``metrics.jsonl`` given to ``diagnose pipeline``, ``pipeline_trace.jsonl``
    or ``trajectories.jsonl`` to ``diagnose training`` (before: a list of up to 90 keys and the keys needed).
    """
    if {"init_queue", "run_queue", "eval_queue"} <= keys:
        return f"it is a pipeline trace: read it with `tirl diagnose pipeline {path}`"
    if "messages" in keys:
        return f"it holds trajectories: read it with `tirl audit {path}`"
    if "step" in keys and any(k.startswith(("train/", "filter/", "reward/")) for k in keys):
        return f"it is a training log: read it with `tirl diagnose training {path}`"
    return None


_LINE_FIX = 'each line needs {"id": ..., "messages": [{"role": ..., "content": ...}, ...]}'


def nonfinite_to_null(value: Any) -> Any:
    """``value`` with every non-finite float (in dicts, lists and tuples, at any depth) replaced by ``None``.

    Containers are copied (tuples become lists); other values are returned as they are.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: nonfinite_to_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nonfinite_to_null(v) for v in value]
    return value


class NotJSON(TypeError):
    """A value strict JSON cannot hold; ``path`` says where (``.key``, ``[3]``), the message what it is."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        super().__init__(f"{path or 'the value'} is {what}, which JSON cannot hold")


def _as_float(value: numbers.Real | decimal.Decimal, path: str) -> float:
    """``float(value)``; beyond the float range its signed infinity, ``Decimal("sNaN")`` NaN (both raised)."""
    try:
        return float(value)
    except OverflowError:  # Fraction(10**400): float() raises rather than saturates
        return -math.inf if isinstance(value, numbers.Real) and value < 0 else math.inf
    except ValueError:  # a signalling NaN
        return math.nan
    except Exception as exc:  # a user's Real whose __float__ fails: the value's problem, named
        raise NotJSON(path, f"a {type(value).__name__} that float() refuses ({type(exc).__name__})") from None


def json_value(value: Any, path: str = "", *, strict: bool = False) -> Any:
    """``value`` as plain JSON data: what :func:`dumps_json` writes as it is, or :class:`NotJSON` naming where.

    Kept: ``None``, bools, ints, strings, finite floats (non-finite ones become ``None``, as in
    :func:`nonfinite_to_null`), dicts with string keys (int, float, bool and ``None`` keys become text, as
    :func:`json.dumps` makes them), lists and tuples (as lists), other real numbers (``Fraction``, ``Decimal``)
    as floats. Array-like values with ``tolist()`` (numpy scalars and arrays, torch tensors) become their plain
    lists and numbers, losslessly. With ``strict``, a non-finite number is :class:`NotJSON` too (``what``
    ``NaN``, ``Infinity`` or ``-Infinity``): ``check_env`` reports what a run would store as ``null``.
    Anything else (a set, bytes, an arbitrary object, a dict key of another type) is :class:`NotJSON`.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, numbers.Real | decimal.Decimal):  # float, Fraction, Decimal: as the reward is read
        number = _as_float(value, path)
        if strict and not math.isfinite(number):
            raise NotJSON(path, "NaN" if math.isnan(number) else "Infinity" if number > 0 else "-Infinity")
        return number if math.isfinite(number) else None
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise NotJSON(f"{path}.{key!r}", f"under a {type(key).__name__} key")
            name = key if isinstance(key, str) else json.dumps(key)
            out[name] = json_value(item, f"{path}.{name}", strict=strict)
        return out
    if isinstance(value, list | tuple):
        return [json_value(item, f"{path}[{i}]", strict=strict) for i, item in enumerate(value)]
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and type(value).__module__.split(".")[0] in ("numpy", "torch"):
        return json_value(tolist(), path, strict=strict)
    name = type(value).__name__
    raise NotJSON(path, f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}")


def dumps_json(value: Any, *, indent: int | None = None) -> str:
    """Strict JSON text: non-finite floats (``inf``, ``nan``) become ``null``, never ``Infinity``/``NaN``."""
    return json.dumps(nonfinite_to_null(value), indent=indent, allow_nan=False, ensure_ascii=False)
