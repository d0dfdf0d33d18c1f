"""``tirl filter``: judge a trajectory JSONL file with the void-turn rule.

Writes one verdict line per input trajectory (input order), optionally the
kept (non-void) trajectories unchanged, and prints a summary with the audit
of void trajectories that nevertheless ended with the correct answer.
Nothing is written unless the whole input is valid and holds a trajectory; an output that is also
an input (``tirl filter X --kept X``) is refused. The judging is
:func:`tirl.filters.stream.judge_file` (a fast path exact to the reference
reader, optionally over several processes).
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from pathlib import Path

from tirl.cli import converted, output_file
from tirl.config import load_config
from tirl.errors import InputError, printable
from tirl.fileio import atomic_write, check_output, refuse_overwrite
from tirl.filters import RuleOptions, rules_with_options
from tirl.filters.stream import judge_file
from tirl.parsing import ParseRules
from tirl.wording import counted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``tirl filter``."""
    parser.add_argument("input", type=Path, help="trajectory JSONL (one object with 'messages' per line)")
    parser.add_argument("--verdicts", type=output_file, required=True, help="where to write the verdict JSONL")
    parser.add_argument("--kept", type=output_file, help="where to write the non-void trajectories, unchanged")
    add_rule_arguments(parser)
    parser.add_argument(
        "--workers", type=_workers, help="processes to judge with (default: one per 4 MB of input, up to the CPUs)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def _workers(text: str) -> int:
    value = converted(text, int, "a whole number")
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"{value} workers is out of range: use 1-256 (1: no extra processes)")
    return value


def add_rule_arguments(parser: argparse.ArgumentParser) -> None:
    """The void-turn rule options, shared with ``tirl audit`` (read back by :func:`rules_from_args`)."""
    parser.add_argument(
        "--exec-langs", help="comma-separated executable fence languages (default: python,py,python3,bash,sh,shell)"
    )
    parser.add_argument("--no-boxed", action="store_true", help="do not accept \\boxed{...} as a final answer")
    parser.add_argument("--no-answer-tags", action="store_true", help="do not accept <answer>...</answer>")
    parser.add_argument("--config", type=Path, help="a tirl TOML config; its [filter] section is used")


def rule_options(args: argparse.Namespace) -> RuleOptions:
    """The rule options of :func:`add_rule_arguments` as given (``--config`` aside)."""
    langs = None if args.exec_langs is None else RuleOptions.parse_langs(args.exec_langs)
    return RuleOptions(exec_langs=langs, no_boxed=args.no_boxed, no_answer_tags=args.no_answer_tags)


def rules_from_args(args: argparse.Namespace) -> ParseRules:
    """The rule of ``--config`` (as training builds it) with the rule options applied (:mod:`tirl.filters`)."""
    return rules_with_options(load_config(args.config), rule_options(args))


def run(args: argparse.Namespace) -> int:
    """Validate the whole input first, then write verdicts (and kept lines) atomically."""
    refuse_overwrite(args.verdicts, [args.input], option="--verdicts")
    refuse_overwrite(args.kept, [args.input, args.verdicts], option="--kept")
    check_output(args.verdicts, option="--verdicts")
    if args.kept:
        check_output(args.kept, option="--kept")
    rules = rules_from_args(args)
    # The outputs are opened only once judge_file has judged every line: a bad input raised before they existed.
    with judge_file(args.input, rules, keep=args.kept is not None, workers=args.workers) as judged, ExitStack() as out:
        if not judged.part.trajectories:  # it wrote empty verdicts, exit 0 (tirl audit refuses the same file)
            raise InputError(str(args.input), None, "holds no trajectories (it is empty, or blank lines only)",
                             "give a trajectory JSONL with at least one line")  # fmt: skip
        judged.write_verdicts(out.enter_context(atomic_write(args.verdicts, "wb")))
        if args.kept:
            judged.write_kept(out.enter_context(atomic_write(args.kept, "wb")))
    part = judged.part
    total, void, with_answer, void_correct = part.trajectories, part.void, part.with_answer, part.void_correct
    summary = {
        "trajectories": total,
        "void": void,
        "valid": total - void,
        "void_ratio": void / total if total else 0.0,
        "with_answer": with_answer,
        "void_but_correct": len(void_correct),
        "void_but_correct_rate": len(void_correct) / void if void and with_answer else None,  # none void: no rate
        "void_but_correct_ids": void_correct,
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{counted(total, 'trajectory')}: {total - void} valid, {void} void (void ratio {summary['void_ratio']:.1%})")
    print(f"verdicts written to {args.verdicts}" + (f"; kept trajectories written to {args.kept}" if args.kept else ""))
    if with_answer and not void:  # "0 of 0 void trajectories ... (0.0%)" was a rate of nothing
        print("audit: no trajectory is void, so none could still end with the correct answer")
    elif with_answer:
        rate = summary["void_but_correct_rate"]
        print(
            f"audit: {len(void_correct)} of {void} void trajectories still ended with the correct answer ({rate:.1%})"
            + (" — a high rate means the detector is too eager" if void_correct else "")
        )
        if void_correct:
            shown = ", ".join(void_correct[:20]) + (" …" if len(void_correct) > 20 else "")
            print(f"  ids: {printable(shown)}")  # ids from the file: shown, never obeyed by the terminal
    else:
        print("audit: no trajectory carries 'answer', so the void-but-correct check was not run")
    return 0
