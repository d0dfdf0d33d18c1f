"""The ``tirl`` command line: a table of thin subcommands.

Each subcommand lives in ``tirl.commands.<module>`` and provides
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only
when their command runs, so ``tirl filter`` never imports torch.
A :class:`~tirl.errors.TirlError` becomes one ``error: ...`` line and exit 2.

The contract for every command: bad input (arguments, files, values) gives
one ``error:`` line on stderr and exit 2, never a traceback and never a
partial output file. Argument errors use the same one line
(:class:`OneLineParser`). As a last net, the input-caused exceptions that a
reader could still let through (non-UTF-8 bytes, nesting that exhausts the
stack, an over-long integer, a number too large to compute with, an output
the OS refuses) become an ``error:``
line too; any other exception is a bug in tirl and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from tirl import __version__
from tirl.config_values import misread
from tirl.errors import TirlError, one_line

T = TypeVar("T")

#: When this process imported the command line (its timers report the whole command from here: :func:`elapsed`).
STARTED = time.perf_counter()


def elapsed() -> float:
    """Seconds since the command started (imports included), for timers that report the whole command."""
    return time.perf_counter() - STARTED


# name -> (module under tirl.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("train", "train a policy with GRPO/PPO (no arguments: the built-in CPU job)"),
    "sft": ("sft", "warm-start the built-in tiny model on generated demonstrations"),
    "eval": ("evaluate", "measure the accuracy of a checkpoint on a fixed evaluation set"),
    "compare": ("compare", "two evaluations of the same tasks, task by task: the change, its 95% CI and p-value"),
    "filter": ("filter", "judge trajectories with the void-turn rule; write verdicts and kept ones"),
    "audit": ("audit", "void-turn statistics, detector-too-eager rate, turn and tool-error stats"),
    "diagnose": ("diagnose", "verdicts from a training log or a pipeline trace"),
    "report": ("report", "write a self-contained HTML report of a run directory"),
    "review": ("review", "send an evidence bundle to an OpenAI-compatible endpoint"),
    "serve": ("serve", "serve a checkpoint with an OpenAI-compatible HTTP API"),
    "sandbox": ("sandbox", "run code in the sandbox (tirl sandbox exec FILE)"),
    "model": (
        "model",
        "make a small random-weight model (init), check a model directory (check), fold a LoRA adapter into its "
        "base model (merge)",
    ),
    "config": ("config", "print the resolved config with each value's source, or the TRL/verl names tirl reads"),
    "ablate": ("ablate", "the same job under each void-filter mode x seeds: table, plots, one JSON line"),
    "tasks": ("tasks", "write an env's tasks as files: SkyRL-style rows and swe-lite JSONL with their repositories"),
}


def converted(text: str, convert: Callable[[str], T], noun: str) -> T:
    """``convert(text)``, or the argparse error ``'TEXT' is not NOUN`` when it raises ``ValueError``."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None


def finite_float(text: str) -> float:
    """An argparse type: a finite number that is the one written, checked at parse time.

    Refused: ``inf``, ``nan``, ``1e999`` and ``1e-400`` (which reads as 0.0: :func:`tirl.config_values.misread`).
    """
    value = converted(text, float, "a number")
    why = misread(text, value)
    if why is not None:
        raise argparse.ArgumentTypeError(f"{text!r} {why}")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (a free one) to 65535."""
    value = converted(text, int, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: use 1-65535, or 0 for a free one")
    return value


def output_file(text: str) -> Path:
    """An argparse type: the path of an output file; one ending in ``/`` (a directory) is refused at parse time.

    ``type=Path`` drops the slash, so ``--out reports/`` was written as a file named ``reports``.
    """
    if text.endswith(os.sep):
        raise argparse.ArgumentTypeError(f"{text!r} ends with '/', so it names a directory: give a file path")
    return Path(text)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one ``error:`` line (with the fix: ``--help``) and exit 2.

    Every ``type=float`` argument of every command is read with :func:`finite_float`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("type", float, finite_float)

    def error(self, message: str) -> NoReturn:  # noqa: D102
        self.exit(2, f"error: {self.prog}: {one_line(message)} — see `{self.prog} --help`\n")


def _net(exc: BaseException) -> str | None:
    """The ``error:`` text for an input-caused exception that escaped a reader; None for a tirl bug."""
    if isinstance(exc, UnicodeDecodeError):
        return f"an input is not UTF-8 text ({exc.reason} at byte {exc.start}) — re-encode it as UTF-8"
    if isinstance(exc, RecursionError):
        return "an input is nested too deeply to read — flatten it"
    if isinstance(exc, ValueError) and "null byte" in str(exc):
        return "a path given on the command line holds a NUL byte — remove it"
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return f"an input holds an integer with more than {sys.get_int_max_str_digits()} digits — shorten it"
    if isinstance(exc, OverflowError):
        return f"a number in an input is too large to compute with ({exc}) — check the input's values"
    if isinstance(exc, OSError) and isinstance(exc.filename, str | os.PathLike):
        return f"{exc.filename}: {exc.strerror or exc} — check the path"
    return None


def _top_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="tirl",
        description="RL for multi-turn, tool-using LLM agents.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items()),
    )
    parser.add_argument("--version", action="version", version=f"tirl {__version__}")
    parser.add_argument("command", nargs="?", help="one of the commands below")
    return parser


_CTRL_C = threading.Event()  # set by the first Ctrl-C this process's command line saw


def _noted_ctrl_c(signum: int, frame: Any) -> None:
    """Python's own Ctrl-C (a KeyboardInterrupt), noted first: a library may turn it into another exception."""
    _CTRL_C.set()
    signal.default_int_handler(signum, frame)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tirl`` command line; returns the exit status.

    As the process's own command line (``argv`` None: the ``tirl`` script, ``python -m tirl.cli``), a Ctrl-C
    after the command has ended is ignored: the process only runs its exit callbacks then (torch's, temporary
    directories), and a late second Ctrl-C printed a traceback from one of them after tirl's last line. An
    exception after a Ctrl-C is the Ctrl-C's (``interrupted``, 130): numpy's import, interrupted under torch's,
    raised "ImportError: cannot load module more than once per process" (`tirl serve`, 0.3 s in). After a
    forced stop (a second Ctrl-C or SIGTERM) the process ends at most a few seconds after the last line, even
    while a thread still works (:func:`tirl.trainer.stop_signals.exit_when_stuck`).
    """
    own = argv is None and threading.current_thread() is threading.main_thread()
    if own and signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where Ctrl-C is ignored
        signal.signal(signal.SIGINT, _noted_ctrl_c)
    try:
        status = _main(argv)
    except Exception:  # a library that turned the Ctrl-C into its own error (numpy's import: an ImportError)
        if not _CTRL_C.is_set():
            raise
        print("interrupted", file=sys.stderr)
        status = 130
    finally:
        if own:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    stops = sys.modules.get("tirl.trainer.stop_signals")  # not imported: no command of this process took signals
    if own and stops is not None:  # after a second Ctrl-C: a thread still working (an update) must not hold the exit
        stops.exit_when_stuck(status)
    return status


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    top = _top_parser()
    if not args or args[0] in ("-h", "--help") or args[0] == "--version":
        top.parse_args(args)
        top.print_help()
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        top.error(f"unknown command {name!r}; choose one of {', '.join(COMMANDS)}")
    module_name, help_text = COMMANDS[name]
    # OpenMP threads that spin while waiting starve the generator thread, the update thread and the sandbox
    # processes on a small CPU (measured 36 s -> 0.55 s for one 16-row generation batch on 2 busy cores).
    # It must be set before torch is first imported (the OpenMP runtime reads it once), so it is set here.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # transformers draws "Loading weights" / "Writing model shards" bars on stderr at every load and save; a
    # command's own lines say what it did. huggingface_hub reads the variable once, at its import (a user's
    # own setting wins).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        module = importlib.import_module(f"tirl.commands.{module_name}")
    except KeyboardInterrupt:  # Ctrl-C in a command module's imports: the first 0.2 s of `tirl train`
        print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        if exc.name == f"tirl.commands.{module_name}":
            print(f"error: the command {name!r} is not available in this build", file=sys.stderr)
            return 2
        raise
    parser = OneLineParser(prog=f"tirl {name}", description=help_text)
    module.add_arguments(parser)
    ns = parser.parse_args(rest)
    try:
        return int(module.run(ns) or 0)
    except TirlError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `tirl audit --json ... | head`: the reader left, nothing is wrong
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (UnicodeDecodeError, RecursionError, ValueError, OverflowError, OSError) as exc:
        text = _net(exc)
        if text is None:
            raise
        print(f"error: {one_line(text)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
