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


class InvalidValue(ConfigError):
    """Config ``key`` holds a value out of its range or rule: ``config KEY=VALUE is invalid: FIX``.

    ``key`` stays on the error, so a caller that knows where the value came from (a TOML file) can say so
    without reading the message.
    """

    def __init__(self, key: str, value: object, fix: str) -> None:
        self.key = key
        super().__init__(f"config {key}={show_value(value)} is invalid: {fix}")


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
#: the characters that reorder what follows them on screen ("Trojan source"): shown escaped, as controls are
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _obeyed(ch: str) -> bool:
    """A character a terminal acts on instead of showing: C0 and C1 controls, DEL, and the bidi controls."""
    return ch < " " or "\x7f" <= ch <= "\x9f" or ch in _BIDI


def one_line(text: str) -> str:
    r"""``text`` with line breaks and control characters escaped (``\n``, ``\x1e``): one ``error:`` line stays one.

    Messages echo user input (keys, values, paths); a key holding a newline must not split the line.
    The rest is :func:`printable`'s rule: an escape sequence in the input is shown, never obeyed.
    """
    if text.isprintable():
        return text
    return "".join(_escape(ch) if ch in _BREAKS or (_obeyed(ch) and ch != "\t") else ch for ch in text)


def printable(text: str) -> str:
    r"""``text`` for a terminal: controls escaped (``\x1b``, ``\x07``, ``\r``, ``\x9b``, ``\u202e``) but ``\n``, ``\t``.

    Text that came from a file or a model (a trajectory id, a file name the agent made, a reviewer's answer) is
    shown, never obeyed: an OSC 52 sequence would write the clipboard, others set the window title, move the
    cursor, clear the screen or hide the lines before them. Not covered: text that only looks like other text
    (homoglyphs).
    """
    if text.isprintable():
        return text
    return "".join(_escape(ch) if _obeyed(ch) and ch not in "\n\t" else ch for ch in text)


def _escape(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")
