"""``tirl sandbox exec FILE``: run one file in the sandbox and print its :class:`ExecResult`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import warnings
from pathlib import Path

from tirl.config import SandboxConfig
from tirl.errors import InputError
from tirl.sandbox import ExecResult, create_sandbox


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``exec`` and its options."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    ex = sub.add_parser("exec", help="run one file and print the result")
    ex.add_argument("file", type=Path, help="the program to run")
    ex.add_argument("--lang", choices=["python", "bash"], default=None, help="default: from the file suffix")
    ex.add_argument("--timeout", type=float, default=5.0, help="wall-clock limit in seconds (default 5)")
    ex.add_argument("--memory-mb", type=int, default=1024, help="address-space limit in MB (default 1024)")
    ex.add_argument("--max-output-chars", type=int, default=2000, help="cut longer output (default 2000)")
    ex.add_argument("--backend", choices=["auto", "bwrap", "process"], default="auto", help="auto: bwrap if it works")
    ex.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _lang(args: argparse.Namespace) -> str:
    if args.lang:
        return str(args.lang)
    return "bash" if args.file.suffix in (".sh", ".bash") else "python"


def _print(result: ExecResult, backend: str) -> None:
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


def run(args: argparse.Namespace) -> int:
    """Run the file; exit status 0 when it ran to completion with status 0, else 1."""
    path: Path = args.file
    try:
        code = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read the file ({exc.strerror})", "pass a readable file") from exc
    cfg = SandboxConfig(
        backend=args.backend,
        timeout_s=args.timeout,
        memory_mb=args.memory_mb,
        max_output_chars=args.max_output_chars,
        warm_pool=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sandbox = create_sandbox(cfg)

    async def _go() -> ExecResult:
        try:
            return await sandbox.run(code, lang=_lang(args))  # type: ignore[arg-type]
        finally:
            await sandbox.close()

    result = asyncio.run(_go())
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    if args.json:
        print(json.dumps(dict(result.to_dict(), backend=sandbox.name)))
    else:
        _print(result, sandbox.name)
    return 0 if result.ok else 1
