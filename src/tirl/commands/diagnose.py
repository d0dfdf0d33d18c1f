"""``tirl diagnose training LOG...`` and ``tirl diagnose pipeline TRACE``: verdicts with evidence.

Exit status 0 for any verdict (a diagnosis is not a failure); 2 for an
unreadable input. ``--json`` prints the machine-readable shape documented in
docs/diagnostics.md; ``--bundle OUT.md`` also writes the evidence bundle for
``tirl review``. The JSON is strict: a non-finite number is ``null``, never
``Infinity``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tirl.cli import output_file
from tirl.diagnostics.adapters import FORMATS, load_logs
from tirl.diagnostics.bundle import filter_config, pipeline_bundle, training_bundle
from tirl.diagnostics.log_rows import resolve_training_log
from tirl.diagnostics.pipeline import diagnose_pipeline, load_trace
from tirl.diagnostics.render import has_ratio, print_pipeline, print_training
from tirl.diagnostics.training import diagnose_training
from tirl.errors import InputError
from tirl.fileio import check_output, refuse_overwrite, write_text
from tirl.jsonl import dumps_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``training`` and ``pipeline`` sub-commands."""
    sub = parser.add_subparsers(dest="what", required=True, metavar="{training,pipeline}")
    tr = sub.add_parser("training", help="void-turn symptoms in a per-step metrics log (JSONL or wandb CSV)")
    tr.add_argument(
        "log",
        type=Path,
        nargs="+",
        help="metrics.jsonl (or its run directory), a verl/SimpleTIR JSONL, or a wandb CSV export; several files "
        "are parts of the same run(s), e.g. one wandb chart export per metric",
    )
    tr.add_argument("--run", help="diagnose only this run of a wandb export (default: each run separately)")
    tr.add_argument("--format", default="auto", choices=FORMATS, help="key names of the log (default: auto)")
    tr.add_argument("--config", type=Path, help="tirl TOML config whose [filter] goes into the bundle")
    pi = sub.add_parser("pipeline", help="the bottleneck stage from a pipeline trace JSONL")
    pi.add_argument("trace", type=Path, help="pipeline_trace.jsonl (or its run directory)")
    for p in (tr, pi):
        p.add_argument("--json", action="store_true", help="print the verdict as JSON")
        p.add_argument("--bundle", type=output_file, help="also write the evidence bundle (Markdown) here")


def _config_dir(log: Path) -> Path:
    """Where a training log's run keeps its config.json: beside the file, in or above a TensorBoard directory."""
    if log.is_dir() and (log / "config.json").is_file():
        return log
    return log.parent


def _in_run_dir(path: Path, name: str) -> Path:
    """A run directory stands for the file the trainer writes in it; a directory without it is an InputError."""
    if not path.is_dir():
        return path
    if not (path / name).exists():  # it said "DIR/NAME: file not found", a file the user never named
        raise InputError(str(path), None, f"is a directory without {name}",
                         f"give the {name} file, or a run directory that `tirl train` wrote")  # fmt: skip
    return path / name


def run(args: argparse.Namespace) -> int:
    """Diagnose, print, optionally write the bundle (checked before anything is read)."""
    if args.bundle:
        refuse_overwrite(args.bundle, args.log if args.what == "training" else [args.trace], option="--bundle")
        check_output(args.bundle, option="--bundle")
    if args.what == "training":
        paths = [resolve_training_log(p) for p in args.log]
        logs = load_logs(paths, args.format, args.run)
        for note in dict.fromkeys(note for log in logs for note in log.notes):  # a file of several runs: once
            print(f"note: {note}", file=sys.stderr)
        diags = [diagnose_training(log) for log in logs]
        if args.bundle:
            bundles = [
                training_bundle(log, d, _config_dir(paths[0]), args.config) for log, d in zip(logs, diags, strict=True)
            ]
            write_text(args.bundle, "\n".join(bundles))
        if args.json:  # one run: its verdict object; several (a multi-run wandb export): {"runs": [...]}
            shape = diags[0].to_dict() if len(diags) == 1 else {"runs": [d.to_dict() for d in diags]}
            print(dumps_json(shape, indent=2))
        else:
            section = filter_config(_config_dir(paths[0]), args.config)  # the run's [filter], when it is known
            mode = section.get("mode") if isinstance(section, dict) else None
            for log, d in zip(logs, diags, strict=True):
                print_training(d, filter_mode=mode if isinstance(mode, str) else None, has_ratio=has_ratio(log))
    else:
        args.trace = _in_run_dir(args.trace, "pipeline_trace.jsonl")
        notes: list[str] = []
        rows = load_trace(args.trace, notes)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        pdiag = diagnose_pipeline(rows, str(args.trace))
        if args.bundle:
            write_text(args.bundle, pipeline_bundle(rows, pdiag))
        if args.json:
            print(dumps_json(pdiag.to_dict(), indent=2))
        else:
            print_pipeline(pdiag)
    if args.bundle and not args.json:
        print(f"evidence bundle: {args.bundle}")
    return 0
