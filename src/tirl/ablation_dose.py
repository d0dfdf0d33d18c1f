"""``tirl ablate --dose``: find the stress level at which ``off`` collapses, before the ablation runs there.

For each level of :data:`tirl.ablation.DOSE_LEVELS` (mildest first) it runs ``off`` only, seeds 0..N-1
(default 3), with :data:`tirl.ablation.STRESS` plus the level's overrides — the same runs as
``tirl ablate --level LEVEL --modes off``. A level is **accepted** when ``off`` collapses
(:data:`tirl.ablation_stats.COLLAPSE_RULE`) in at least two thirds of its seeds (2 of 3) and, when the runs
log the attribution keys (``void/share_*``, issue 23 item 1), the spikes sat in void rows before the reward
fell in a majority of the collapsed runs (:attr:`tirl.ablation.RunResult.spikes_in_void`). When no run logs
them the mechanism column says "mechanism not measured" and the level is accepted on the collapses alone.
The accepted level is the first (mildest) one accepted; ``tirl ablate --level NAME`` then runs the test there.

The default ladder (:data:`tirl.ablation.DOSE_LEVELS`, cumulative, each a real option a user has):

=====================  =====================================================================================
``mismatch``           ``generation.dtype=bfloat16 algo.tis_cap=none``: a bf16 generator, fp32 trainer, no TIS
``mismatch-ood``       + ``env.ood_rate=0.3 env.eval_ood_rate=0.3 algo.dual_clip=none``: odd tool output on 30%
                       of calls (in the evaluation too), no dual clip
``mismatch-ood-long``  + ``algo.grad_clip=0 algo.loss_agg=seq_mean env.chain_min=4 env.chain_max=8
                       env.max_turns=10 generation.max_total_tokens=1024``: no grad clip, per-sequence weights,
                       chains of 4-8 tool calls
=====================  =====================================================================================

Not covered: levels outside the list (give ``--set`` overrides to ``tirl ablate`` instead), and any
claim that a collapse at an accepted level is the seed's disease when the mechanism was not measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.ablation import DOSE_LEVELS, AblationPlan, RunResult, run_ablation
from tirl.ablation_stats import COLLAPSE_RULE
from tirl.fileio import write_text

ACCEPT_SHARE = 2 / 3  # off must collapse in at least this share of the seeds (2 of 3)
NOT_MEASURED = "mechanism not measured"


@dataclass(frozen=True, slots=True)
class DoseLevel:
    """The verdict on one stress level."""

    level: str
    stress: tuple[str, ...]
    runs: int
    collapses: int
    mechanism: str  # "spikes in void tokens" | "spikes in valid tokens" | NOT_MEASURED
    accepted: bool


def judge_level(level: str, stress: Sequence[str], results: Sequence[RunResult]) -> DoseLevel:
    """The :class:`DoseLevel` of one level's ``off`` runs (the acceptance rule of the module docstring)."""
    collapses = [r for r in results if r.collapsed]
    enough = len(collapses) >= math.ceil(ACCEPT_SHARE * len(results)) and bool(results)
    measured = [r.spikes_in_void for r in (collapses or results) if r.spikes_in_void is not None]
    if not measured:
        mechanism, in_void = NOT_MEASURED, True
    else:
        in_void = sum(measured) * 2 > len(measured)
        mechanism = "spikes in void tokens" if in_void else "spikes in valid tokens"
    return DoseLevel(level, tuple(stress), len(results), len(collapses), mechanism, enough and in_void)


def run_dose(
    seeds: Sequence[int],
    steps: int,
    out: Path,
    *,
    levels: Sequence[str] = tuple(DOSE_LEVELS),
    split: str = "heldout",
    extra: Sequence[str] = (),
    echo: Callable[[str], None] = print,
) -> list[DoseLevel]:
    """Run every level (``off`` x ``seeds``) under ``out/LEVEL``; writes ``dose.json`` and ``dose.md`` after each."""
    verdicts: list[DoseLevel] = []
    for level in levels:
        plan = AblationPlan(
            modes=("off",), seeds=tuple(seeds), steps=steps, split=split, extra=tuple(extra), level=level
        )
        echo(f"dose level {level}: {' '.join(DOSE_LEVELS[level])}")
        results = run_ablation(plan, out / level, echo=echo)
        verdicts.append(judge_level(level, plan.stress, results))
        write_dose(verdicts, out)
    return verdicts


def accepted_level(verdicts: Sequence[DoseLevel]) -> str | None:
    """The first (mildest) accepted level, or None."""
    return next((v.level for v in verdicts if v.accepted), None)


def dose_json(verdicts: Sequence[DoseLevel]) -> dict[str, Any]:
    """The ``--dose --json`` object."""
    return {
        "dose": [
            {
                "level": v.level,
                "stress": list(v.stress),
                "runs": v.runs,
                "collapsed": v.collapses,
                "mechanism": v.mechanism,
                "accepted": v.accepted,
            }
            for v in verdicts
        ],
        "accepted_level": accepted_level(verdicts),
        "collapse_rule": COLLAPSE_RULE,
        "paired": True,
    }


def dose_table(verdicts: Sequence[DoseLevel]) -> str:
    """The dose-finding table (markdown) and the accepted level."""
    rows = [
        f"| `{v.level}` | {', '.join(f'`{o}`' for o in DOSE_LEVELS[v.level])} | {v.collapses} of {v.runs} "
        f"| {v.mechanism} | {'yes' if v.accepted else 'no'} |"
        for v in verdicts
    ]
    level = accepted_level(verdicts)
    verdict = (
        f"accepted level: `{level}` (run `tirl ablate --level {level}`)"
        if level
        else "no level accepted: `off` did not collapse in 2 of 3 seeds at any level"
    )
    return (
        "| level | overrides (on top of the stress configuration) | `off` collapses | mechanism | accepted |\n"
        "|---|---|---|---|---|\n" + "\n".join(rows) + f"\n\ncollapse: {COLLAPSE_RULE}\n\n{verdict}\n"
    )


def write_dose(verdicts: Sequence[DoseLevel], out: Path) -> None:
    """``dose.json`` and ``dose.md`` in ``out``."""
    write_text(out / "dose.json", json.dumps(dose_json(verdicts), indent=1) + "\n")
    write_text(out / "dose.md", dose_table(verdicts))


__all__ = [
    "ACCEPT_SHARE",
    "NOT_MEASURED",
    "DoseLevel",
    "accepted_level",
    "dose_json",
    "dose_table",
    "judge_level",
    "run_dose",
    "write_dose",
]
