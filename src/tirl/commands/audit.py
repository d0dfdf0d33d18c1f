"""``tirl audit TRAJ.jsonl``: void turns with reasons, the detector-too-eager rate, turn/length/tool-error stats."""

from __future__ import annotations

import argparse
from pathlib import Path

from tirl.commands.filter import add_rule_arguments, rules_from_args
from tirl.diagnostics.audit import audit_file
from tirl.diagnostics.render import print_audit
from tirl.jsonl import dumps_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``tirl audit`` (the rule options are those of ``tirl filter``)."""
    parser.add_argument("input", type=Path, help="trajectory JSONL (or a run directory with trajectories.jsonl)")
    add_rule_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the audit as JSON")


def run(args: argparse.Namespace) -> int:
    """Audit the file with the same rule options as ``tirl filter``."""
    path = args.input / "trajectories.jsonl" if args.input.is_dir() else args.input
    report = audit_file(path, rules_from_args(args))
    if args.json:
        print(dumps_json(report.to_dict(), indent=2))
    else:
        print_audit(report.to_dict(), str(path))
    return 0
