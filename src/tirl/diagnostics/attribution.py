"""Where a run's spikes sit: in void turns (the seed's disease; the filter helps) or in valid ones (it cannot).

Reads the attribution series of a training log (tirl's ``void/*`` keys, :mod:`tirl.trainer.attribution`;
the generator-side ones that tirl's verl patch writes, :func:`tirl.integrations.verl.drop_void_trajectories`)
on the *spike steps* that :mod:`tirl.diagnostics.training` hands it: steps with an IS-ratio spike or a
grad-norm spike (the IS-ratio rule applied to the log grad norm). A token above the dual clip alone does not
make a spike step: real runs have a few on most steps (the issue-23 audit: 1.4-2.6 per 1,000 tokens above 3).

The rule (thresholds: :class:`~tirl.diagnostics.thresholds.AttributionThresholds`), over the spike steps
that carry ``void/share_tokens`` and at least one spike share:

* ``base``: the mean of ``void/share_tokens`` (the void rows' share of the tokens);
* ``spike``: the mean over those steps of each step's spike share — the mean of whichever of
  ``void/share_ratio_outliers``, ``void/share_ratio_dual_clip`` and ``void/share_grad_norm`` the step has,
  else its ``void/share_lowprob_tokens`` (verl logs only the generator side);
* ``spikes_in_void`` when ``spike >= base + margin`` and ``spike >= lift * base`` (void rows hold clearly more
  of the spikes than of the tokens);
* ``spikes_in_valid`` when ``spike <= base`` and ``1 - spike >= valid_majority`` (the void rows hold no more
  than their share and most of the spikes sit in valid rows);
* neither otherwise (the evidence is inconclusive: nothing is reported), or with fewer than ``min_steps``
  spike steps that carry the keys.

Not covered: attribution inside a step (which turn of a void row), and runs whose logs carry no ``void/*``
keys (verl without tirl's patch, TRL, SkyRL): there is no attribution finding then.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from tirl.diagnostics.adapters import MetricsLog
from tirl.diagnostics.thresholds import AttributionThresholds

RATIO_SHARES = ("void_share_outliers", "void_share_dual", "void_share_grad")  # canonical series (adapters.py)
FALLBACK_SHARE = "void_share_lowprob"


@dataclass(frozen=True, slots=True)
class SpikeAttribution:
    """The attribution verdict of one log: its kind, the spike steps it read, and the numbers."""

    kind: str  # "spikes_in_void" | "spikes_in_valid"
    steps: tuple[int, ...]
    evidence: dict[str, Any] = field(default_factory=dict)


def _step_spike(log: MetricsLog, i: int) -> float | None:
    """The spike share of step ``i``: the mean of its ratio/gradient shares, else its low-prob share."""
    values: list[float] = []
    for name in RATIO_SHARES:
        v = (log.get(name) or [None] * len(log))[i]
        if v is not None:
            values.append(v)
    if values:
        return statistics.fmean(values)
    low = log.get(FALLBACK_SHARE)
    return low[i] if low is not None else None


def step_shares(log: MetricsLog, i: int) -> dict[str, float | None]:
    """Step ``i``'s void token share and spike share, for the evidence of a seed verdict at that step ({}: none).

    A ``void_leak`` says a void turn went into the loss; where the log measures it, these say whether the
    step's spikes really sat in void rows.
    """
    tok = (log.get("void_share_tokens") or [None] * len(log))[i]
    if tok is None:
        return {}
    spike = _step_spike(log, i)
    return {"void_token_share": round(tok, 4), "void_spike_share": None if spike is None else round(spike, 4)}


def _mean(log: MetricsLog, name: str, idx: list[int]) -> float | None:
    s = log.get(name) or [None] * len(log)
    vals = [v for v in (s[i] for i in idx) if v is not None]
    return round(statistics.fmean(vals), 4) if vals else None


def attribute_spikes(log: MetricsLog, spike_idx: list[int], th: AttributionThresholds) -> SpikeAttribution | None:
    """The verdict over the spike steps ``spike_idx`` (indices into ``log``), or None; see the module doc."""
    tokens = log.get("void_share_tokens")
    if tokens is None:
        return None
    pairs: list[tuple[int, float, float]] = []  # (index, token share, spike share) of the usable spike steps
    for i in sorted(set(spike_idx)):
        tok, spk = tokens[i], _step_spike(log, i)
        if tok is not None and spk is not None:
            pairs.append((i, tok, spk))
    if len(pairs) < th.min_steps:
        return None
    used = [i for i, _, _ in pairs]
    base = statistics.fmean(t for _, t, _ in pairs)
    spike = statistics.fmean(s for _, _, s in pairs)
    evidence: dict[str, Any] = {
        "spike_steps": len(used),
        "void_token_share": round(base, 4),
        "void_spike_share": round(spike, 4),
        "lift": round(spike / base, 3) if base > 0 else None,
        "void_share_ratio_outliers": _mean(log, "void_share_outliers", used),
        "void_share_ratio_dual_clip": _mean(log, "void_share_dual", used),
        "void_share_grad_norm": _mean(log, "void_share_grad", used),
        "void_share_lowprob_tokens": _mean(log, "void_share_lowprob", used),
        "min_logprob_void": _mean(log, "min_lp_void", used),
        "min_logprob_valid": _mean(log, "min_lp_valid", used),
    }
    steps = tuple(log.steps[i] for i in used)
    if spike >= base + th.margin and spike >= th.lift * base:
        return SpikeAttribution("spikes_in_void", steps, evidence)
    if spike <= base and 1.0 - spike >= th.valid_majority:
        return SpikeAttribution("spikes_in_valid", steps, evidence)
    return None
