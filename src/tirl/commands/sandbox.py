"""``tirl sandbox exec FILE...``: run files in the sandbox and print each :class:`ExecResult`.

Without ``--pool`` every file gets a fresh sandbox (the ``bwrap`` backend, or the process fallback).
With ``--pool`` the files run one after another through ONE warm-pool server, in the order given:
the way to reproduce an incident where one execution affected the next. ``--json`` prints one
ExecResult object per line (with ``file`` and ``backend``). ``--timeout`` bounds each file's run
whatever its code does: past the timeout plus a grace period the command reports a timeout and moves
on; the sandbox's whole PID namespace is killed either way.

Inputs are read before anything runs: a file that is not a regular file (``/dev/zero``, a FIFO, a
directory), is larger than 10 MB or is not readable is refused with an ``error:`` line and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import stat
import sys
import tokenize
import warnings
from pathlib import Path

from tirl.cli import converted
from tirl.config import SandboxConfig
from tirl.config_ranges import check_flag
from tirl.errors import InputError
from tirl.inputs import input_file, kind_of
from tirl.sandbox import ExecResult, Sandbox, create_sandbox

MAX_FILE_BYTES = 10 * 1024 * 1024
# How long past its own timeout a run may take (sandbox start-up on a loaded machine) before it is abandoned.
GRACE_S = 15.0


def _seconds(text: str) -> float:
    """A number; its range is the config key's (:data:`FLAG_KEYS`, checked in :func:`run`)."""
    return converted(text, float, "a number")


def _count(text: str) -> int:
    """A whole number; its range is the config key's (:data:`FLAG_KEYS`, checked in :func:`run`)."""
    return converted(text, int, "a whole number")


#: each flag is a ``sandbox.*`` key under another name: one range, and the error names the flag
FLAG_KEYS = {
    "timeout": "sandbox.timeout_s",
    "memory_mb": "sandbox.memory_mb",
    "max_output_chars": "sandbox.max_output_chars",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``exec`` and its options."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    ex = sub.add_parser("exec", help="run files and print each result")
    ex.add_argument("file", type=Path, nargs="+", help="the programs to run, in order")
    ex.add_argument("--lang", choices=["python", "bash"], default=None, help="default: from each file's suffix")
    ex.add_argument("--timeout", type=_seconds, default=5.0, help="wall-clock limit per file in seconds (default 5)")
    ex.add_argument(
        "--memory-mb",
        type=_count,
        default=1024,
        help="memory limit in MB: per process, and for the whole sandbox where it gets a memory cgroup (default 1024)",
    )
    ex.add_argument("--max-output-chars", type=_count, default=2000, help="cut longer output (default 2000)")
    ex.add_argument("--backend", choices=["auto", "bwrap", "process"], default="auto", help="auto: bwrap if it works")
    ex.add_argument("--pool", action="store_true", help="run all files through one warm-pool server, in order")
    ex.add_argument("--json", action="store_true", help="print one JSON object per file")


def _lang(args: argparse.Namespace, path: Path) -> str:
    if args.lang:
        return str(args.lang)
    return "bash" if path.suffix in (".sh", ".bash") else "python"


def read_program(path: Path, lang: str = "python") -> str:
    """The text of ``path``: a readable regular file of at most 10 MB in UTF-8 (InputError otherwise).

    The sandbox runs text, written back as UTF-8, so a file in another encoding is refused rather than run with
    U+FFFD in place of its bytes: a Python file's encoding is found as Python finds it (a UTF-8 BOM is dropped,
    a PEP 263 coding line other than UTF-8 is refused), anything else must be plain UTF-8. A NUL byte, which no
    program text can hold, is refused here too, naming the file instead of failing inside the sandbox.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block the open
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):  # '-', a dangling link, a missing path: in tirl's words
            input_file(path, "pass a program file", pipe_fix="save the program to a file first")
        raise InputError(str(path), None, f"cannot read the file ({exc.strerror})", "pass a readable file") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # before fdopen, which raises on a directory
        os.close(fd)
        raise InputError(str(path), None, f"is {kind_of(mode)}, not a regular file", "pass a program file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise InputError(str(path), None, f"is larger than {MAX_FILE_BYTES >> 20} MB", "pass a smaller program")
    return _decode(path, data, lang)


def _utf8(path: Path, data: bytes, encoding: str = "utf-8") -> str:
    """``data`` decoded (``utf-8`` or ``utf-8-sig``), or an InputError naming the first byte that is not UTF-8."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InputError(str(path), None, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                         "re-encode the file as UTF-8") from None  # fmt: skip


def _decode(path: Path, data: bytes, lang: str) -> str:
    """``data`` as text (see :func:`read_program`), or an InputError naming the byte that is not."""
    encoding = "utf-8"
    if lang == "python":
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:  # bytes that are not UTF-8 in its first lines, an unknown coding line, ...
            _utf8(path, data)  # the first: name the byte
            raise InputError(str(path), None, f"has an encoding declaration Python refuses ({exc.msg})",
                             "re-encode the file as UTF-8 and drop the coding line") from None  # fmt: skip
        if encoding not in ("utf-8", "utf-8-sig"):
            raise InputError(str(path), None, f"declares the encoding {encoding}; the sandbox runs UTF-8 text",
                             "re-encode the file as UTF-8 and drop the coding line") from None  # fmt: skip
    text = _utf8(path, data, encoding)
    if "\0" in text:
        raise InputError(str(path), None, f"contains a NUL byte at offset {data.index(0)}",
                         "remove it: a program's text cannot hold one") from None  # fmt: skip
    return text


def _print(path: Path, result: ExecResult, backend: str, many: bool) -> None:
    if many:
        print(f"=== {path}")
    if result.stdout:
        print(result.stdout, end="" if result.stdout.endswith("\n") else "\n")
    flags = [name for name in ("timed_out", "memory_exceeded", "truncated") if getattr(result, name)]
    print(f"--- exit {result.exit_code}, {result.wall_s * 1000:.1f} ms, backend {backend}")
    if flags:
        print("--- " + ", ".join(flags))
    if result.stderr:
        print("--- stderr:\n" + result.stderr.rstrip("\n"))
    if result.error:
        print(f"--- sandbox error: {result.error}")


async def _run_one(sandbox: Sandbox, code: str, lang: str, timeout_s: float) -> ExecResult:
    """One run, bounded whatever the code does (the sandbox's own timeout, then GRACE_S more)."""
    try:
        return await asyncio.wait_for(sandbox.run(code, lang=lang, timeout_s=timeout_s), timeout_s + GRACE_S)  # type: ignore[arg-type]
    except TimeoutError:
        return ExecResult("", "", None, timed_out=True, wall_s=timeout_s + GRACE_S, error="the sandbox did not stop")


def run(args: argparse.Namespace) -> int:
    """Run the files; exit status 0 when every one ran to completion with status 0, else 1."""
    for dest, key in FLAG_KEYS.items():  # the parser took 1..1048576 and the config refused 10 naming its key
        check_flag("--" + dest.replace("_", "-"), key, getattr(args, dest))
    programs = [
        (path, read_program(path, _lang(args, path))) for path in args.file
    ]  # every input checked before anything runs
    cfg = SandboxConfig(
        backend=args.backend,
        timeout_s=args.timeout,
        memory_mb=args.memory_mb,
        max_output_chars=args.max_output_chars,
        warm_pool=bool(args.pool),
        pool_size=1,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sandbox = create_sandbox(cfg)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)

    async def _go() -> list[ExecResult]:
        results = []
        try:
            for path, code in programs:
                result = await _run_one(sandbox, code, _lang(args, path), args.timeout)
                results.append(result)
                if args.json:
                    print(json.dumps(dict(result.to_dict(), file=str(path), backend=sandbox.name)), flush=True)
                else:
                    _print(path, result, sandbox.name, len(programs) > 1)
                    sys.stdout.flush()
        finally:
            await asyncio.wait_for(sandbox.close(), GRACE_S)
        return results

    results = asyncio.run(_go())
    return 0 if all(r.ok for r in results) else 1
