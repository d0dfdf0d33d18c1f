"""``tirl report RUN_DIR``: a self-contained HTML report (plots + diagnoses) of a run directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from tirl.diagnostics.report import write_report
from tirl.errors import InputError
from tirl.fileio import check_output, refuse_overwrite


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``tirl report``."""
    parser.add_argument("run_dir", type=Path, help="a run directory (metrics.jsonl, pipeline_trace.jsonl, ...)")
    parser.add_argument("--out", type=Path, help="where to write the HTML (default: RUN_DIR/report.html)")


def run(args: argparse.Namespace) -> int:
    """Write the report and print its path."""
    if not args.run_dir.is_dir():
        raise InputError(str(args.run_dir), None, "not a directory", "give the run directory the trainer wrote")
    out = args.out if args.out is not None else args.run_dir / "report.html"
    inputs = [args.run_dir / name for name in ("metrics.jsonl", "pipeline_trace.jsonl", "trajectories.jsonl")]
    refuse_overwrite(out, [*inputs, args.run_dir / "summary.json"], option="--out")
    check_output(out)
    print(write_report(args.run_dir, args.out))
    return 0
