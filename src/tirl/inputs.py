"""The one check of an input path: a file tirl can read, or an InputError that says what the path really is.

:func:`input_file` is called before an input is opened. It refuses, each with its own words and fix:

* a path that does not exist (``-`` too: tirl reads no ``-`` as standard input, so the fix names
  ``/dev/stdin``), and a symbolic link whose target does not exist (the target is named);
* a directory (``tirl review DIR`` said "file not found");
* ``/dev/stdin`` while standard input is the terminal (nothing is piped in: the read would wait for typing),
  or closed (``<&-``: it said "does not exist");
* a character or block device (``/dev/zero`` never ends: read line by line, it took the machine's memory);
* a socket;
* a pipe (``/dev/stdin`` of ``cmd | tirl ...``, ``<(cmd)``), but only where the caller reads its input more
  than once (it says so with ``pipe_fix``); elsewhere a pipe is read like a file;
* a file this process may not read (permissions).

Not covered: a file that changes kind between this check and the open (the open then fails as it would
have), and a regular file that is still being written.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from tirl.errors import InputError

#: The names under which a process reads its own standard input.
STDIN_NAMES = ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0")


def kind_of(mode: int) -> str:
    """What a path of this ``st_mode`` is, for an error line: ``"a directory"``, ``"a pipe"``, ...."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a regular file" if stat.S_ISREG(mode) else "not a file"


def _missing(p: Path, fix: str, pipe_fix: str | None) -> InputError:
    """The error for a path that does not exist: ``-``, a dangling link, or nothing at all."""
    if str(p) == "-":
        stdin_fix = "give /dev/stdin to read standard input" if pipe_fix is None else "save standard input to a file"
        return InputError("-", None, "is no file (tirl does not read '-' as standard input)", stdin_fix)
    if str(p) in STDIN_NAMES:  # fd 0 closed (`tirl ... <&-`, a service without stdin): /proc/self/fd/0 is gone
        closed_fix = pipe_fix or f"pipe the input in (`tirl ... {p} < FILE`), or give the file's path"
        return InputError(str(p), None, "is standard input, and this process's standard input is closed", closed_fix)
    if p.is_symlink():
        return InputError(str(p), None, f"is a link to {os.readlink(p)}, which does not exist", fix)
    return InputError(str(p), None, "does not exist", fix)


def input_file(path: str | Path, fix: str = "check the path", *, pipe_fix: str | None = None) -> Path:
    """``path`` as a Path when it can be read as an input; an InputError naming what it is otherwise.

    ``fix``: the fix named for a path that is missing or no file (a directory, a socket). ``pipe_fix``: given
    only by a reader that reads its input twice (a pipe is then refused with it); ``None``: a pipe is read.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise _missing(p, fix, pipe_fix) from None
    except OSError as exc:  # a parent that is a file (Not a directory), a loop of links, a forbidden directory
        raise InputError(str(p), None, f"cannot be read ({exc.strerror})", fix) from None
    mode = st.st_mode
    if stat.S_ISDIR(mode) or stat.S_ISSOCK(mode):
        raise InputError(str(p), None, f"is {kind_of(mode)}, not a file", fix)
    if stat.S_ISCHR(mode) and str(p) in STDIN_NAMES and sys.stdin is not None and sys.stdin.isatty():
        tty_fix = pipe_fix or f"pipe the input in (`tirl ... {p} < FILE`), or give the file's path"
        raise InputError(str(p), None, "is the terminal: nothing is piped into standard input", tty_fix)
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise InputError(str(p), None, "is a device, not a file", pipe_fix or "give a file (or a pipe: `<(command)`)")
    if stat.S_ISFIFO(mode) and pipe_fix is not None:
        raise InputError(str(p), None, "is a pipe, not a regular file (it is read more than once)", pipe_fix)
    if not os.access(p, os.R_OK):
        raise InputError(str(p), None, "cannot be read (permission denied)", "check its permissions")
    return p


__all__ = ["STDIN_NAMES", "input_file", "kind_of"]
