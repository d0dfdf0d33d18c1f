"""The outputs of ``tirl ablate``: per-mode statistics against ``off``, the table, the JSON, the plot.

:func:`compare` pairs every mode's run with ``off``'s run of the same seed (the seeds are paired: see
:mod:`tirl.ablation`) and computes, per mode (:class:`ModeStats`):

* the collapse count (:data:`tirl.ablation_stats.COLLAPSE_RULE`) and Fisher's exact two-sided p-value of
  it against ``off``'s count;
* the paired accuracy difference (mode − ``off``, after training) with a seeded percentile bootstrap 95%
  CI (None below 5 pairs);
* the mean area under the training-reward curve and the Wilcoxon signed-rank p-value of the paired
  differences;
* the attribution figures (``void/share_*``) pooled over the mode's runs, None when no run logged them.

:func:`best_mode` ranks only on a CI: a mode is best when its accuracy difference CI lies wholly above 0
(the largest mean difference among such modes); ``off`` is best when every other mode's CI lies wholly
below 0; otherwise there is no best mode and the table says so. No ranking is printed without a CI.

Not covered: correction for testing several modes against ``off`` (the p-values are per comparison).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tirl.ablation import BASELINE, BOOTSTRAP_SEED, RATIO_SPIKE, RunResult
from tirl.ablation_stats import COLLAPSE_RULE, bootstrap_ci, excludes_zero, fisher_exact, wilcoxon_signed_rank
from tirl.diagnostics.plotting import pyplot
from tirl.fileio import atomic_write, write_text


@dataclass(frozen=True, slots=True)
class ModeStats:
    """One mode's figures and its statistics against ``off`` (None where there is no ``off`` to pair with)."""

    mode: str
    runs: int
    collapses: int
    accuracy_mean: float
    auc_mean: float
    pairs: int  # seeds with both this mode's and off's run
    collapse_p: float | None
    acc_diff_vs_off: float | None
    acc_diff_ci: tuple[float, float] | None
    auc_p: float | None
    mechanism: dict[str, float] | None


def _pooled(runs: Sequence[RunResult]) -> dict[str, float] | None:
    keys = sorted({k for r in runs for k in r.mechanism})
    if not keys:
        return None
    return {k: statistics.fmean(r.mechanism[k] for r in runs if k in r.mechanism) for k in keys}


def compare(results: Sequence[RunResult]) -> list[ModeStats]:
    """Per mode, in the order of ``results``, the statistics of the module docstring."""
    base = {r.seed: r for r in results if r.mode == BASELINE}
    base_collapses = sum(r.collapsed for r in base.values())
    out: list[ModeStats] = []
    for mode in dict.fromkeys(r.mode for r in results):
        runs = [r for r in results if r.mode == mode]
        collapses = sum(r.collapsed for r in runs)
        paired = [(r, base[r.seed]) for r in runs if r.seed in base]
        against = bool(paired) and mode != BASELINE
        acc = [r.accuracy_after - b.accuracy_after for r, b in paired]
        auc = [r.reward_auc - b.reward_auc for r, b in paired]
        out.append(
            ModeStats(
                mode=mode,
                runs=len(runs),
                collapses=collapses,
                accuracy_mean=statistics.fmean(r.accuracy_after for r in runs),
                auc_mean=statistics.fmean(r.reward_auc for r in runs),
                pairs=len(paired),
                collapse_p=fisher_exact(collapses, len(runs), base_collapses, len(base)) if against else None,
                acc_diff_vs_off=statistics.fmean(acc) if against else None,
                acc_diff_ci=bootstrap_ci(acc, seed=BOOTSTRAP_SEED) if against else None,
                auc_p=wilcoxon_signed_rank(auc) if against else None,
                mechanism=_pooled(runs),
            )
        )
    return out


def best_mode(stats: Sequence[ModeStats]) -> str | None:
    """The mode the CI rule picks (module docstring), or None when no CI separates a mode from ``off``."""
    others = [s for s in stats if s.mode != BASELINE]
    above = [s for s in others if excludes_zero(s.acc_diff_ci) and (s.acc_diff_vs_off or 0.0) > 0]
    if above:
        return max(above, key=lambda s: s.acc_diff_vs_off or 0.0).mode
    below = [s for s in others if excludes_zero(s.acc_diff_ci) and (s.acc_diff_vs_off or 0.0) < 0]
    if others and len(below) == len(others) and any(s.mode == BASELINE for s in stats):
        return BASELINE
    return None


def summary_json(
    results: Sequence[RunResult], *, stress: Sequence[str] = (), stats: Sequence[ModeStats] | None = None
) -> dict[str, Any]:
    """The one-line ``--json`` object: per mode the per-seed lists, the collapse count and the statistics."""
    by_mode = {s.mode: s for s in (compare(results) if stats is None else stats)}
    modes: dict[str, Any] = {}
    for r in results:
        m = modes.setdefault(
            r.mode,
            {"accuracy_after": [], "is_ratio_max": [], "grad_norm_max": [], "void_ratio_end": [], "collapsed": 0},
        )
        m["accuracy_after"].append(r.accuracy_after)
        m["is_ratio_max"].append(r.is_ratio_max)
        m["grad_norm_max"].append(r.grad_norm_max)
        m["void_ratio_end"].append(r.void_ratio_end)
        m["collapsed"] += int(r.collapsed)
    for mode, m in modes.items():
        s = by_mode[mode]
        m["collapse_p"] = s.collapse_p
        m["acc_diff_vs_off"] = s.acc_diff_vs_off
        m["acc_diff_ci"] = list(s.acc_diff_ci) if s.acc_diff_ci is not None else None
        m["reward_auc"] = s.auc_mean
        m["auc_p"] = s.auc_p
        m["mechanism"] = s.mechanism
    seeds = len({r.seed for r in results})
    turns = statistics.fmean(r.turns_mean for r in results) if results else 0.0
    return {
        "seeds": seeds,
        "turns_mean": turns,
        "modes": modes,
        "paired": True,
        "collapse_rule": COLLAPSE_RULE,
        "stress": list(stress),
    }


def _spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.3f}"
    return f"{mean:.3f} ± {statistics.stdev(values):.3f}"


def _p(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _diff(s: ModeStats) -> str:
    if s.acc_diff_vs_off is None:
        return "—"
    ci = "no CI (< 5 pairs)" if s.acc_diff_ci is None else f"[{s.acc_diff_ci[0]:+.3f}, {s.acc_diff_ci[1]:+.3f}]"
    return f"{s.acc_diff_vs_off:+.3f} {ci}"


def markdown_table(results: Sequence[RunResult], *, label: str = "held-out") -> str:
    """The README table: one row per mode, with its paired statistics against ``off``, then the rule's verdict."""
    stats = {s.mode: s for s in compare(results)}
    head = (
        f"| mode | {label} accuracy after (mean ± std) | per seed | Δ accuracy vs `off` [95% CI] "
        "| collapses (Fisher p vs `off`) | reward AUC (Wilcoxon p vs `off`) | max IS ratio "
        f"| steps with ratio > {RATIO_SPIKE:g} | void share start → end |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for mode, s in stats.items():
        rs = [r for r in results if r.mode == mode]
        acc = [r.accuracy_after for r in rs]
        lines.append(
            f"| `{mode}` | {_spread(acc)} | {' / '.join(f'{a:.3f}' for a in acc)} | {_diff(s)} "
            f"| {s.collapses} of {s.runs} (p {_p(s.collapse_p)}) | {s.auc_mean:.3f} (p {_p(s.auc_p)}) "
            f"| {max(r.is_ratio_max for r in rs):.2f} | {sum(r.ratio_spike_steps for r in rs)} "
            f"| {statistics.fmean(r.void_ratio_start for r in rs):.0%} → "
            f"{statistics.fmean(r.void_ratio_end for r in rs):.0%} |"
        )
    before = sorted({round(r.accuracy_before, 3) for r in results})
    best = best_mode(list(stats.values()))
    verdict = (
        f"best mode (95% CI of the paired accuracy difference vs `off` excludes 0): `{best}`"
        if best is not None
        else "no best mode: no 95% CI of the paired accuracy difference vs `off` excludes 0"
    )
    return (
        head
        + "\n".join(lines)
        + f"\n\n{label} accuracy before (per seed's draw): {', '.join(f'{b:.3f}' for b in before)}; "
        + f"collapse: {COLLAPSE_RULE}; seeds paired (trainer.seed = env.seed)\n\n{verdict}\n"
    )


def figure(results: Sequence[RunResult]) -> Any:
    """Three panels: accuracy after per mode and seed; training reward and max IS ratio per step (whole steps)."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    modes = list(dict.fromkeys(r.mode for r in results))
    colours = {m: f"C{i}" for i, m in enumerate(modes)}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for i, m in enumerate(modes):
        accs = [r.accuracy_after for r in results if r.mode == m]
        axes[0].scatter([i] * len(accs), accs, color=colours[m])
    axes[0].set_xticks(range(len(modes)), modes)
    axes[0].set_title("accuracy after (per seed)")
    for r in results:
        label = r.mode if r.seed == results[0].seed else None
        for ax, series in ((axes[1], r.reward), (axes[2], r.is_ratio)):
            ys = [math.nan if v is None else v for v in series]
            ax.plot(range(1, len(ys) + 1), ys, color=colours[r.mode], label=label)
    axes[1].set_title("training reward per step")
    axes[1].axhline(0.05, color="red", linestyle=":", linewidth=1)
    axes[2].set_title("max IS ratio per step")
    axes[2].set_yscale("log")
    axes[2].axhline(RATIO_SPIKE, color="red", linestyle=":", linewidth=1)
    for ax in axes[1:]:
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 1.2, 1.4 ticks on 2 steps
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot(results: Sequence[RunResult], path: Path) -> Path:
    """:func:`figure`, saved as a PNG at ``path`` (whole or not at all: the previous one stays if saving fails)."""
    plt = pyplot()

    fig = figure(results)
    try:
        with atomic_write(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=80)
    finally:
        plt.close(fig)
    return path


def write_outputs(
    results: Sequence[RunResult], out: Path, *, stress: Sequence[str] = (), label: str = "held-out"
) -> dict[str, Any]:
    """``ablation.json`` (every run), ``ablation.md`` (the table) and ``ablation.png`` in ``out``."""
    stats = compare(results)
    data = summary_json(results, stress=stress, stats=stats)
    runs = [{**asdict(r), "collapsed": r.collapsed, "reward_auc": r.reward_auc} for r in results]
    full = {**data, "best_mode": best_mode(stats), "runs": runs}
    write_text(out / "ablation.json", json.dumps(full, indent=1) + "\n")
    write_text(out / "ablation.md", markdown_table(results, label=label))
    plot(results, out / "ablation.png")
    return data


__all__ = ["ModeStats", "best_mode", "compare", "figure", "markdown_table", "plot", "summary_json", "write_outputs"]
