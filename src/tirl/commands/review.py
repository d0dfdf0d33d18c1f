"""``tirl review BUNDLE.md --base-url URL --model ID``: a second opinion from an OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from tirl.cli import output_file
from tirl.diagnostics.review import review_bundle
from tirl.errors import InputError, printable
from tirl.fileio import check_output, refuse_overwrite, write_text
from tirl.inputs import input_file

_BUNDLE_FIX = "give the file that `tirl diagnose training RUN --bundle FILE` (or `diagnose pipeline`) wrote"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``tirl review``."""
    parser.add_argument("bundle", type=Path, help="an evidence bundle written by `tirl diagnose ... --bundle`")
    parser.add_argument("--base-url", required=True, help="the API root, e.g. https://api.openai.com/v1")
    parser.add_argument("--model", required=True, help="the model id exactly as the endpoint lists it")
    parser.add_argument("--env-key", default="OPENAI_API_KEY", help="NAME of the environment variable holding the key")
    parser.add_argument("--timeout", type=float, default=120.0, help="request timeout in seconds")
    parser.add_argument("--out", type=output_file, help="also write the answer to this file")


def run(args: argparse.Namespace) -> int:
    """Check the set-up, send the bundle, print the answer."""
    input_file(args.bundle, _BUNDLE_FIX)  # a directory or a device says what it is; a pipe is read once
    if args.timeout <= 0:
        raise InputError("--timeout", None, f"{args.timeout} is not a positive number of seconds", "give e.g. 120")
    if args.out:
        refuse_overwrite(args.out, [args.bundle], option="--out")
        check_output(
            args.out, option="--out", dash_fix="give a file path (the answer is printed on standard output already)"
        )
    try:
        bundle = args.bundle.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"{exc.reason} at byte {exc.start}"
        raise InputError(str(args.bundle), None, f"not UTF-8 text ({where})", "re-encode it as UTF-8") from None
    except OSError as exc:
        raise InputError(str(args.bundle), None, f"cannot be read ({exc.strerror})", _BUNDLE_FIX) from None
    if not bundle.strip():  # nothing to review: the endpoint is never asked (a request would cost a call)
        raise InputError(str(args.bundle), None, "is empty: there is nothing to review", _BUNDLE_FIX)
    result = review_bundle(
        bundle, base_url=args.base_url, model=args.model, env_key=args.env_key, timeout_s=args.timeout
    )
    print(
        printable(result.text)
    )  # the endpoint's words: shown, never obeyed by the terminal (--out keeps them as sent)
    if args.out:
        write_text(args.out, result.text + "\n")
    return 0
