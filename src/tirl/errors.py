"""The error hierarchy of tirl.

Every error a user can cause says *what* input is wrong, *where* (file, line,
field or config key) and *how to fix it*. The CLI turns a :class:`TirlError`
into one readable line and exit status 2, never a traceback.
"""

from __future__ import annotations


class TirlError(Exception):
    """Base class for errors that are reported to the user without a traceback."""

    exit_code = 2


class ConfigError(TirlError):
    """A configuration value is invalid; the message names the key and the fix."""


class InputError(TirlError):
    """An input file is malformed; the message names the file, the line and the fix."""

    def __init__(self, path: str, line: int | None, problem: str, fix: str = "") -> None:
        self.path = path
        self.line = line
        self.problem = problem
        self.fix = fix
        where = f"{path}:{line}" if line is not None else path
        text = f"{where}: {problem}"
        if fix:
            text += f" — {fix}"
        super().__init__(text)


class SetupError(TirlError):
    """The environment is not set up as needed (missing binary, server, credential)."""


class OutputError(InputError):
    """An output path cannot be written as asked (a directory, under a file, an input, a full device)."""


def describe(exc: BaseException, *, where: bool = False) -> str:
    """The one way tirl turns an exception into text: ``"ExcType: message"`` (``"ExcType"`` when it has none).

    ``where=True`` appends the innermost frame, ``" (file.py:LINE)"``, without a full traceback.
    """
    text = str(exc)
    out = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if where:
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None:
            out += f" ({tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno})"
    return out


def cut(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters with its length said: echoed input must not flood an error line."""
    return text if len(text) <= limit else f"{text[: limit - 20]}...({len(text)} characters)"


def show_value(value: object) -> str:
    """``repr(value)``, cut to 60 characters: an echoed value (5000 digits, a 5000-character name) stays short."""
    return cut(repr(value))


_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def one_line(text: str) -> str:
    r"""``text`` with line breaks and control characters escaped (``\n``, ``\x1e``): one ``error:`` line stays one.

    Messages echo user input (keys, values, paths); a key holding a newline must not split the line.
    """
    if text.isprintable():
        return text
    return "".join(_escape(ch) if ch in _BREAKS or (ch < " " and ch != "\t") or ch == "\x7f" else ch for ch in text)


def _escape(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")
