"""``tirl ablate``: the same training job under each void-filter mode x paired seeds; statistics, table, plots, JSON.

Plain ``tirl ablate --json`` runs the full ablation (arms off, mask, drop,
penalize, roc x seeds 0, 1, 2, 8 steps each, the stress configuration of
:mod:`tirl.ablation`; seed ``s`` sets ``trainer.seed`` and ``env.seed``).
``--level NAME`` adds a dose level's overrides; ``--dose`` runs the dose-finding
step instead (``off`` only, every level of ``--levels``; :mod:`tirl.ablation_dose`).
``--seeds``, ``--modes``, ``--steps`` and ``--levels`` shrink both. ``--dry-run`` checks every run's
config and ``--out``, prints each ``tirl train`` command (one a line, in run order) and runs nothing
(``benchmarks/gpu_ablation.sh --dry-run`` uses it on a machine without the GPU).
Writes ``ablation.json``, ``ablation.md`` and ``ablation.png`` (``--dose``:
``dose.json``, ``dose.md`` and one folder per level) and one run directory per
run under ``--out``; with ``--json`` the last line of stdout is
``{"seeds": N, "turns_mean": F, "modes": {MODE: {"accuracy_after": [...],
"is_ratio_max": [...], "grad_norm_max": [...], "void_ratio_end": [...],
"collapsed": INT, "collapse_p": F|null, "acc_diff_vs_off": F|null,
"acc_diff_ci": [LO, HI]|null, "reward_auc": F, "auc_p": F|null,
"mechanism": {KEY: F}|null}}, "paired": true, "collapse_rule": STR, "stress": [...]}``
(``--dose``: ``{"dose": [{"level", "stress", "runs", "collapsed", "mechanism",
"accepted"}], "accepted_level": STR|null, "collapse_rule": STR, "paired": true}``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

from tirl.ablation import (
    BASELINE,
    DEFAULT_SEEDS,
    DEFAULT_STEPS,
    DOSE_LEVELS,
    MODES,
    AblationPlan,
    run_ablation,
    train_command,
)
from tirl.commands import flag_overrides
from tirl.errors import ConfigError
from tirl.fileio import check_output_dir
from tirl.wording import counted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tirl ablate``."""
    parser.add_argument(
        "--modes", default=None, help=f"comma-separated filter modes (default {','.join(MODES)}; not with --dose)"
    )
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="number of paired seeds (seeds 0..N-1)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="training steps per run")
    parser.add_argument(
        "--split",
        choices=("heldout", "validation"),
        default="heldout",
        help="evaluate on the held-out set (the reported figures) or the validation draw (to choose settings)",
    )
    parser.add_argument("--level", default="", help=f"a dose level added to the stress ({', '.join(DOSE_LEVELS)})")
    parser.add_argument("--dose", action="store_true", help="dose finding: off only, at every level of --levels")
    parser.add_argument("--levels", default=None, help="--dose: comma-separated levels (default: all, mildest first)")
    parser.add_argument(
        "--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
        help="extra config override for every run, after the stress settings (repeatable)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="output directory (default runs/ablate-<time>)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line, last on stdout")
    parser.add_argument(
        "--dry-run", action="store_true", help="check every run's config, print the tirl train commands, run nothing"
    )


#: the most paired seeds one ablation runs (each is one training run per mode)
MAX_SEEDS = 1000
#: config keys the plan sets for every run, and the flag that sets them (a --set of one is refused)
PLAN_KEYS = {"trainer.steps": "--steps", "trainer.seed": "--seeds", "filter.mode": "--modes"}


def _levels(args: argparse.Namespace) -> tuple[str, ...]:
    given = args.levels if args.levels is not None else ",".join(DOSE_LEVELS)
    levels = tuple(v.strip() for v in given.split(",") if v.strip())
    bad = [v for v in levels if v not in DOSE_LEVELS]
    if bad or not levels:
        raise ConfigError(f"--levels {given!r} is invalid: choose from {','.join(DOSE_LEVELS)}")
    if args.level:
        raise ConfigError("--level and --dose do not go together: --dose runs every level of --levels")
    return levels


def _print_commands(plans: list[AblationPlan], out: Path, *, dose: bool) -> None:
    """``--dry-run``: every run's ``tirl train`` command, in the order the ablation would run them."""
    for plan in plans:
        where = out / plan.level if dose else out
        for seed in plan.seeds:
            for mode in plan.modes:
                print(shlex.join(train_command(where / f"{mode}-seed{seed}", plan.overrides(mode, seed))))


def run(args: argparse.Namespace) -> int:
    """Run the plan (or the dose finding), write the outputs, print the table (and the JSON line)."""
    if not 1 <= args.seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds {args.seeds} is invalid: use 1 to {MAX_SEEDS} (each seed is a run per mode)")
    if args.levels is not None and not args.dose:  # it was ignored, silently
        raise ConfigError("--levels picks the levels of --dose: add --dose, or use --level NAME for one ablation")
    if args.modes is not None and args.dose:
        raise ConfigError("--modes does not go with --dose: the dose step runs filter.mode=off only; drop --modes")
    flag_overrides(args.overrides)  # --set K=1 --set K=2: the last won silently
    for override in args.overrides:  # --set trainer.steps=9 silently beat --steps
        key = override.split("=", 1)[0].strip()
        if key in PLAN_KEYS:
            raise ConfigError(
                f"--set {key}=... is what {PLAN_KEYS[key]} sets for every run: use {PLAN_KEYS[key]} instead"
            )
    modes = ("off",) if args.dose else tuple(m.strip() for m in (args.modes or ",".join(MODES)).split(",") if m.strip())
    if BASELINE not in modes and modes:  # the table's statistics were all '—', its verdict about CIs never drawn
        raise ConfigError(f"--modes {','.join(modes)} has no {BASELINE}: every statistic pairs a mode's run with "
                          f"{BASELINE}'s run of the same seed — add it (--modes {BASELINE},{','.join(modes)}), or "
                          "train one arm alone with tirl train --set filter.mode=MODE")  # fmt: skip
    levels = _levels(args) if args.dose else (args.level,)
    plans = [
        AblationPlan(modes=modes, seeds=tuple(range(args.seeds)), steps=args.steps, split=args.split,
                     extra=tuple(args.overrides), level=level)
        for level in levels
    ]  # fmt: skip
    from tirl.config import load_config

    for plan in plans:  # a bad --set fails now, not after the first run
        for mode in plan.modes:
            load_config(None, list(plan.overrides(mode, 0)))
    out = args.out or Path("runs") / time.strftime("ablate-%Y%m%d-%H%M%S")
    check_output_dir(out)  # a file, or a path under a file, fails now rather than after the first run
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out} is not empty: give a new directory (an ablation never overwrites runs)")
    if args.dry_run:
        _print_commands(plans, out, dose=args.dose)
        return 0
    t0 = time.perf_counter()
    if args.dose:
        from tirl.ablation_dose import dose_json, run_dose

        verdicts = run_dose(plans[0].seeds, args.steps, out, levels=levels, split=args.split, extra=args.overrides)
        print((out / "dose.md").read_text(encoding="utf-8"))
        took = f"{counted(len(levels), 'level')} x {counted(args.seeds, 'seed')} in {time.perf_counter() - t0:.0f}s"
        print(f"dose: {took}; outputs in {out}")
        if args.json:
            print(json.dumps(dose_json(verdicts), separators=(",", ":")))
        return 0
    from tirl.ablation_report import write_outputs

    plan = plans[0]
    label = "validation" if args.split == "validation" else "held-out"
    results = run_ablation(
        plan, out, on_result=lambda so_far: write_outputs(so_far, out, stress=plan.stress, label=label)
    )
    data = write_outputs(results, out, stress=plan.stress, label=label)
    print((out / "ablation.md").read_text(encoding="utf-8"))
    print(f"ablation: {counted(len(results), 'run')} in {time.perf_counter() - t0:.0f}s; outputs in {out}")
    if args.json:
        print(json.dumps(data, separators=(",", ":")))
    return 0
