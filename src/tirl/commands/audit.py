"""``tirl audit TRAJ.jsonl``: void turns with reasons, the detector-too-eager rate, turn/length/tool-error stats."""

from __future__ import annotations

import argparse
from pathlib import Path

from tirl.commands.filter import _rules
from tirl.diagnostics.audit import audit_file
from tirl.diagnostics.render import print_audit
from tirl.jsonl import dumps_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``tirl audit`` (the rule options are those of ``tirl filter``)."""
    parser.add_argument("input", type=Path, help="trajectory JSONL (or a run directory with trajectories.jsonl)")
    parser.add_argument(
        "--exec-langs", help="comma-separated executable fence languages (default: python,py,python3,bash,sh,shell)"
    )
    parser.add_argument("--no-boxed", action="store_true", help="do not accept \\boxed{...} as a final answer")
    parser.add_argument("--no-answer-tags", action="store_true", help="do not accept <answer>...</answer>")
    parser.add_argument("--config", type=Path, help="a tirl TOML config; its [filter] section is used")
    parser.add_argument("--json", action="store_true", help="print the audit as JSON")


def run(args: argparse.Namespace) -> int:
    """Audit the file with the same rule options as ``tirl filter``."""
    path = args.input / "trajectories.jsonl" if args.input.is_dir() else args.input
    report = audit_file(path, _rules(args))
    if args.json:
        print(dumps_json(report.to_dict(), indent=2))
    else:
        print_audit(report.to_dict(), str(path))
    return 0
