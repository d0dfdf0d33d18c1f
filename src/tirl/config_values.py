"""One config value from text (``--set``, a TOML file) or a saved config, as the type its key annotates.

>>> coerce("1e-400", float, "algo.lr")
Traceback (most recent call last):
...
tirl.errors.ConfigError: config algo.lr='1e-400' is invalid: it underflows to 0.0 (floats reach down to \
about 5e-324): write 0 if you mean zero
>>> coerce(1.0, int, "trainer.steps")
Traceback (most recent call last):
...
tirl.errors.ConfigError: config trainer.steps=1.0 is invalid: use an integer: write 1, not 1.0

:func:`coerce` reads unions (``none``/``null`` text unsets an optional key), literals, lists (comma-separated
text or a TOML array: :func:`list_text`), booleans, strings and numbers. A number must be the one written;
refused, each naming the key and the fix: a float given for an integer key (TOML ``steps = 1.0`` as well as
``--set trainer.steps=1.0``), an integer beyond 64 bits, ``true``/``false`` for a number, and a float that is
not finite or is nonzero in the text but 0.0 once parsed (``1e-400``: ``generation.temperature`` became greedy)
or infinite once parsed (``1e999``). A TOML file's floats reach the config through :func:`toml_float`
(``tomllib``'s ``parse_float``), so the text of one that does not fit is still there when its key is known.

A TOML file and a saved ``config.json`` have types, so a string for a number or boolean key (``steps = "5"``,
``flag = "true"``: usually a broken template) is the writer's mistake, not text to parse: :func:`quoted_kind`
finds it, :func:`unquoted` gives the value to write instead and :func:`toml_line` the line that holds it, for
:mod:`tirl.config`'s error. Only ``--set`` (where every value is text) parses ``"5"`` as 5.

Not covered: precision (``0.1`` is the float nearest to it, as everywhere) and subnormal floats (``1e-310`` is
kept: it is not zero); a saved ``config.json`` (``text=False``) is otherwise read as JSON wrote it.
"""

from __future__ import annotations

import math
import re
import tomllib
import types
import typing
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from tirl.errors import ConfigError, show_value

__all__ = [
    "FloatText",
    "coerce",
    "list_text",
    "misread",
    "quoted_kind",
    "to_float",
    "to_int",
    "toml_float",
    "toml_line",
    "unquoted",
]


def coerce(value: Any, tp: Any, key: str, text: bool = True) -> Any:
    """Convert a TOML or command-line value (``text``) or a saved JSON value to the annotated type.

    Raises ConfigError when the value does not fit the type.
    """
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        is_null = value is None or (text and isinstance(value, str) and value.lower() in ("none", "null"))
        if is_null and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, key, text)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"config {key}={show_value(value)} is invalid")
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"config {key}={show_value(value)} is invalid: choose one of {', '.join(map(str, args))}")
    if origin is list:
        (item,) = args
        if text and isinstance(value, str):
            value = list_text(value, key)
        if not isinstance(value, list):
            raise ConfigError(
                f"config {key}={show_value(value)} is invalid: give a list (comma-separated on the command line)"
            )
        return [coerce(v, item, key, text) for v in value]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if text and isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"config {key}={show_value(value)} is invalid: use true or false")
    if tp is int:
        return to_int(value, key)
    if tp is float:
        return to_float(value, key)
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config {key}={show_value(value)} is invalid: use a string")
    return value


def list_text(text: str, key: str) -> list[Any]:
    """A command-line list: a TOML array (``["####", "a,b"]``) or comma-separated items (``####,ANS``)."""
    if not text.lstrip().startswith("["):
        return [v for v in (p.strip() for p in text.split(",")) if v]
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:
        reason = str(exc) if isinstance(exc, tomllib.TOMLDecodeError) else "unreadable"
        raise ConfigError(
            f"config {key}={show_value(text)} is not a TOML array ({reason}): quote each item, e.g. "
            f'{key}=["####", "a,b"], or write items comma-separated without brackets'
        ) from None
    return list(value)  # "v = [" always parses to an array


class FloatText(float):
    """A TOML float whose text is not the float it parses to (``1e-400`` is 0.0, ``1e999`` inf): the text kept."""

    text: str

    def __new__(cls, text: str) -> FloatText:
        """The float of ``text``, carrying ``text``."""
        made = super().__new__(cls, float(text.replace("_", "")))
        made.text = text
        return made

    def __repr__(self) -> str:
        return self.text


def misread(text: str, real: float) -> str | None:
    """Why ``real`` (``float(text)``) is not the number ``text`` writes, or None when it is.

    E.g. ``"underflows to 0.0 (...): write 0 if you mean zero"``; ``tirl.cli.finite_float`` (the float options)
    uses it too.
    """
    if real != 0.0 and math.isfinite(real):
        return None
    try:
        exact = Decimal(text.strip().replace("_", ""))
    except InvalidOperation:
        return None
    if not exact.is_finite():
        return None  # inf, nan: written as such (refused below as not finite)
    if real == 0.0 and exact != 0:
        return "underflows to 0.0 (floats reach down to about 5e-324): write 0 if you mean zero"
    if math.isinf(real):
        return "overflows to infinity (floats reach up to about 1.8e308): write a finite number"
    return None


def toml_float(text: str) -> float:
    """``tomllib``'s ``parse_float``: the float, or a :class:`FloatText` when the text does not fit a float."""
    real = float(text.replace("_", ""))
    return FloatText(text) if misread(text, real) else real


def to_float(value: Any, key: str) -> float:
    """``value`` (a number, or the text of one) as a finite float that is the number written; else ConfigError."""
    if isinstance(value, bool):
        raise ConfigError(f"config {key}={show_value(value)} is invalid: use a number")
    if isinstance(value, FloatText):
        raise ConfigError(f"config {key}={show_value(value)} is invalid: it {misread(value.text, float(value))}")
    try:
        real = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"config {key}={show_value(value)} is invalid: use a number") from None
    why = misread(value, real) if isinstance(value, str) else None
    if why is not None:
        raise ConfigError(f"config {key}={show_value(value)} is invalid: it {why}")
    if not math.isfinite(real):
        raise ConfigError(f"config {key}={show_value(value)} is invalid: use a finite number")
    return real


def to_int(value: Any, key: str) -> int:
    """``value`` (an integer, or the text of one) as a 64-bit int; a float, even ``1.0``, is a ConfigError."""
    number = None
    if not isinstance(value, bool | float):
        try:
            number = int(value)
        except (TypeError, ValueError, OverflowError):
            pass
    if number is None:
        raise ConfigError(f"config {key}={show_value(value)} is invalid: {_int_fix(value)}")
    if not -(2**63) <= number < 2**63:
        raise ConfigError(f"config {key}={show_value(value)} is invalid: the integer overflows 64 bits")
    return number


def _int_fix(value: Any) -> str:
    """The fix for a value an integer key refuses: the integer to write when it is a whole float (``1.0``, ``1e3``)."""
    if isinstance(value, bool | FloatText):
        return "use an integer"
    try:
        real = float(value)
    except (TypeError, ValueError, OverflowError):
        return "use an integer"
    if not real.is_integer() or abs(real) >= 2**63:
        return "use an integer"
    return f"use an integer: write {int(real)}, not {value if isinstance(value, str) else repr(value)}"


_KINDS: dict[Any, str] = {bool: "true or false", int: "an integer", float: "a number"}
_TOML_NUMBER = re.compile(r"[-+]?[0-9][0-9_]*(\.[0-9][0-9_]*)?([eE][-+]?[0-9][0-9_]*)?")


def quoted_kind(value: Any, tp: Any) -> str | None:
    """What ``tp`` takes when a source with types (TOML, a saved config.json) gave it the string ``value``.

    ``"an integer"``, ``"a number"`` or ``"true or false"`` for a numeric or boolean key; None otherwise.

    >>> quoted_kind("5", int | None), quoted_kind(5, int), quoted_kind("none", float | None), quoted_kind("a", str)
    ('an integer', None, None, None)

    An optional key's ``none``/``null`` is no such string: TOML has no null, so a file unsets a key with it.
    """
    if not isinstance(value, str):
        return None
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and value.lower() in ("none", "null"):
            return None
        kinds = [quoted_kind(value, arg) for arg in args if arg is not type(None)]
        return None if None in kinds else kinds[0]
    return _KINDS.get(tp)


def unquoted(value: str, tp: Any, key: str) -> str | None:
    """``value`` as TOML writes it without quotes for ``tp`` (``"5"`` -> ``5``, ``"yes"`` -> ``true``).

    None when the string is no value of ``tp`` as ``--set`` would read it (``"abc"``, ``"1e-400"``).
    """
    try:
        real = coerce(value, tp, key)
    except ConfigError:
        return None
    if isinstance(real, bool):
        return "true" if real else "false"
    text = value.strip()
    if _TOML_NUMBER.fullmatch(text):
        try:
            if tomllib.loads(f"v = {text}")["v"] == real:
                return text  # as the user wrote it (1e-4, 1_000)
        except (tomllib.TOMLDecodeError, ValueError):
            pass
    return repr(real)  # TOML has no ".5" or "5.": the float's own spelling


def toml_line(text: str, name: str, value: str) -> int | None:
    """The 1-based line of ``text`` (a TOML file) setting the key ``name`` to the string ``value``, if only one does.

    ``tomllib`` keeps no positions, so this searches the text: None when no line or several lines match (a key or
    value spelled with escapes, the same value under two tables).
    """
    written = re.compile(rf"(?:^|[\s.{{,]){re.escape(name)}\s*=\s*(['\"]){re.escape(value)}\1")
    hits = [n for n, line in enumerate(text.split("\n"), start=1) if written.search(line)]
    return hits[0] if len(hits) == 1 else None
