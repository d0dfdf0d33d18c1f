"""``tirl ablate``: the same training job under each void-filter mode x seeds; table, plots, one JSON line.

Plain ``tirl ablate --json`` runs the full ablation (modes off, mask, drop,
penalize x seeds 0, 1, 2, 8 steps each, the stress configuration of
:mod:`tirl.ablation`). ``--seeds``, ``--modes`` and ``--steps`` shrink it.
Writes ``ablation.json``, ``ablation.md`` and ``ablation.png`` (and one run
directory per run) under ``--out``; with ``--json`` the last line of stdout is
``{"seeds": N, "turns_mean": F, "modes": {MODE: {"accuracy_after": [...],
"is_ratio_max": [...], "grad_norm_max": [...], "void_ratio_end": [...],
"collapsed": INT}}}``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tirl.ablation import DEFAULT_SEEDS, DEFAULT_STEPS, MODES, AblationPlan, run_ablation, write_outputs
from tirl.errors import ConfigError
from tirl.fileio import check_output_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tirl ablate``."""
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"comma-separated filter modes (default {','.join(MODES)})"
    )
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="number of seeds per mode (seeds 0..N-1)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="training steps per run")
    parser.add_argument(
        "--split",
        choices=("heldout", "validation"),
        default="heldout",
        help="evaluate on the held-out set (the reported figures) or the validation draw (to choose settings)",
    )
    parser.add_argument(
        "--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
        help="extra config override for every run, after the stress settings (repeatable)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="output directory (default runs/ablate-<time>)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line, last on stdout")


def run(args: argparse.Namespace) -> int:
    """Run the plan, write the outputs, print the table (and the JSON line)."""
    if args.seeds < 1:
        raise ConfigError(f"--seeds {args.seeds} is invalid: use at least 1")
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    plan = AblationPlan(
        modes=modes, seeds=tuple(range(args.seeds)), steps=args.steps, split=args.split, extra=tuple(args.overrides)
    )
    from tirl.config import load_config

    load_config(None, list(plan.overrides(modes[0], 0)))  # a bad --set fails now, not after the first run
    out = args.out or Path("runs") / time.strftime("ablate-%Y%m%d-%H%M%S")
    check_output_dir(out)  # a file, or a path under a file, fails now rather than after the first run
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out} is not empty: give a new directory (an ablation never overwrites runs)")
    t0 = time.perf_counter()
    results = run_ablation(plan, out, on_result=lambda so_far: write_outputs(so_far, out))
    data = write_outputs(results, out)
    print((out / "ablation.md").read_text(encoding="utf-8"))
    print(f"ablation: {len(results)} runs in {time.perf_counter() - t0:.0f}s; outputs in {out}")
    if args.json:
        print(json.dumps(data, separators=(",", ":")))
    return 0
