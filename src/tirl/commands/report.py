"""``tirl report RUN_DIR``: a self-contained HTML report (plots + diagnoses) of a run directory.

Refused with one ``error:`` line: a path that does not exist or is not a directory, a directory that holds none
of a run's files (:data:`tirl.diagnostics.report.FILES`), and an output inside the run directory other than a
new name at its top (``RUN_DIR/report.html``, the default, or e.g. ``RUN_DIR/report-v2.html``): never one of
the run's own files (:mod:`tirl.trainer.run_files`) and never anything under ``checkpoints/``, ``tb/`` or
another subdirectory, links and ``..`` resolved first; a run holding a symbolic link among its own files
(:func:`tirl.trainer.run_files.refuse_links`: ``report.html -> ~/.bashrc`` in a shared run). A section whose
file cannot be read is a ``warning:`` line on stderr (one per file) and a notice in the page; the rest of the
report is still written (exit 0). A torn
last line of ``metrics.jsonl`` or ``pipeline_trace.jsonl`` (a killed run) is skipped with a ``note:`` line naming
``FILE:LINE`` (and the same note in the page). ``tirl train`` prints the same lines at its end. After the
report's path, stdout gets the training verdict in one line (:func:`tirl.diagnostics.render.verdict_line`, the
line ``tirl train`` ends with) when ``metrics.jsonl`` could be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tirl.cli import output_file
from tirl.diagnostics.report import FILES, stderr_lines, write_report
from tirl.errors import InputError, OutputError
from tirl.fileio import check_output, fd_alias
from tirl.trainer import run_files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``tirl report``."""
    parser.add_argument("run_dir", type=Path, help="a run directory (metrics.jsonl, pipeline_trace.jsonl, ...)")
    parser.add_argument(
        "--out",
        type=output_file,
        help="where to write the HTML (default: RUN_DIR/report.html); inside the run directory only a new name "
        "at its top, never one of the run's files or anything under checkpoints/ or tb/",
    )


def check_run_dir(run_dir: Path) -> None:
    """Refuse a path that is not a directory holding at least one of the files the report reads."""
    fix = "give a run directory written by tirl train"
    if not run_dir.exists():
        raise InputError(str(run_dir), None, "does not exist", fix)
    if not run_dir.is_dir():
        raise InputError(str(run_dir), None, "is not a directory", fix)
    if not any((run_dir / name).exists() for name in FILES):
        names = ", ".join(f"{n}/" if n == run_files.TB else n for n in FILES)
        raise InputError(str(run_dir), None, f"holds no run: none of {names}", fix)


def check_out_of_run(out: Path, run_dir: Path, *, option: str = "--out") -> None:
    """Refuse an output inside ``run_dir`` unless it is a new name at the top (see the module doc)."""
    if fd_alias(out) is not None:  # /dev/stdout: written to the descriptor, never to a path
        return
    real_run, real_out = Path(os.path.realpath(run_dir)), Path(os.path.realpath(out))
    if not real_out.is_relative_to(real_run):
        return
    parts = real_out.relative_to(real_run).parts
    if len(parts) == 1 and not run_files.is_run_file(parts[0]):
        return
    if not parts:
        problem = "is the run directory itself"
    elif len(parts) == 1:
        problem = f"is the run's own {parts[0]}"
    else:
        problem = f"is under the run's {parts[0]}/"
    fix = f"write the report to {run_dir / run_files.REPORT} or outside the run"
    raise OutputError(str(out), None, f"{option} {problem}: the run's files are never written over", fix)


def run(args: argparse.Namespace) -> int:
    """Write the report, print its path and the training verdict; warn once per unreadable file, print notes."""
    check_run_dir(args.run_dir)
    run_files.refuse_links(args.run_dir)  # RUN/report.html -> ~/.bashrc would be written through
    out = args.out if args.out is not None else args.run_dir / run_files.REPORT
    check_output(out, option="--out")  # first: a directory, or a path under a file, is named as such
    check_out_of_run(out, args.run_dir, option="--out" if args.out is not None else "the report's path")
    problems: dict[str, str] = {}
    notes: list[str] = []
    verdicts: list[str] = []
    print(write_report(args.run_dir, args.out, problems=problems, notes=notes, verdicts=verdicts))
    for line in stderr_lines(problems, notes):
        print(line, file=sys.stderr)
    for line in verdicts:  # the training verdict in one line, as `tirl train` prints it at its end
        print(line)
    return 0
