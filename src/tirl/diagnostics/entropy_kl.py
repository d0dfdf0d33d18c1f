"""Entropy collapse and KL blow-up: the policy stopped exploring, or ran away from its reference.

Two verdicts of ``tirl diagnose training`` beyond the seed's void-turn table, read from the canonical
``entropy`` (mean token entropy of the policy, nats) and ``kl`` (KL to the reference policy) series of
:mod:`tirl.diagnostics.adapters`; the numbers are :class:`~tirl.diagnostics.thresholds.PolicyThresholds`
(``th.policy``) and the rolling ``window`` of :class:`~tirl.diagnostics.thresholds.TrainingThresholds`:

* ``entropy_collapse``: at step *i* the entropy is at most ``1 - entropy_drop`` of a reference level and stays
  there (the median of the step and the next ``sustain - 1`` known values, at least one of them, is too), while
  the mean reward over those steps rose by less than ``reward_rise`` over the reference steps' reward. The
  reference is the median of the known entropies in the ``window`` steps before *i* (a fast fall: the kind
  that collapses in a few steps), or, where the entropy is at or below ``entropy_floor``, the median of the
  run's first ``early_steps`` values (a slow slide to a near-deterministic policy). A fall that the reward
  matches is the policy sharpening on what it learned (tirl's real 30-step runs: 0.08 -> 0.02 nats while the
  reward rose 0.4 -> 0.9), not a collapse. One finding per collapse: its onset step and every step after it
  that stays below the onset's bar.
* ``kl_blowup``: the KL to the reference reaches ``kl_max``, or is at least ``kl_factor`` times the median of
  the known values in the ``window`` steps before and at least ``kl_jump_floor`` (KL starts at 0, so the
  factor alone would flag any first step). Consecutive steps are one finding.

:func:`policy_not_checked` says when a rule could not run: no entropy (or one value), no KL, or a KL that is 0
at every step — tirl logs ``train/kl`` as 0 when ``algo.kl_coef=0`` loads no reference model, and verl logs
``actor/kl_loss`` as 0 without ``use_kl_loss`` (and a policy that never moved, e.g. all-zero advantages, has a
true 0), so a constant 0 is "nothing to judge", never "no blow-up". Without a
reward the collapse rule runs in part: every large fall is a finding, weighed against nothing (listed).

Not covered: a collapse in the log's last step alone (nothing after it to show that it stayed), rewards on a
scale far from 0..1 (``reward_rise`` is in the reward's own units), and a KL that grows slowly to just under
``kl_max``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from tirl.diagnostics.adapters import MetricsLog
from tirl.diagnostics.finding import Finding
from tirl.diagnostics.thresholds import TrainingThresholds

#: verdict kind -> its one-line summary (``SUMMARY`` of :mod:`tirl.diagnostics.training` includes these)
SUMMARY: dict[str, str] = {
    "kl_blowup": "the KL to the reference policy reached a high level or jumped many times above the steps before",
    "entropy_collapse": "the policy's entropy fell to a small fraction of its level while the reward did not rise",
}
#: verdict kind -> what to check first, in tirl's config keys (other frameworks: :mod:`tirl.diagnostics.advice`)
CHECK_FIRST: dict[str, str] = {
    "kl_blowup": "the step size and the pull back to the reference: raise algo.kl_coef (0 loads no reference "
    "at all), lower algo.lr or lengthen algo.warmup_steps, keep algo.grad_clip; a void_leak at the same steps "
    "means garbage tokens drove the KL (the void filter first)",
    "entropy_collapse": "exploration: lower algo.lr, raise algo.clip_high (clip-higher lets unlikely tokens "
    "gain) and keep algo.kl_coef > 0 to hold the policy near its start; check generation.temperature "
    "(below 1.0 the sampled distribution, and the entropy logged, are narrower). tirl has no entropy bonus: "
    "entropy is logged, not optimised",
}


def _known(values: Sequence[float | None], lo: int, hi: int) -> list[tuple[int, float]]:
    return [(j, v) for j in range(max(0, lo), min(len(values), hi)) if (v := values[j]) is not None]


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _median(pairs: list[tuple[int, float]]) -> float | None:
    return statistics.median(v for _, v in pairs) if pairs else None


def _held(values: Sequence[float | None], i: int, bar: float, sustain: int) -> bool:
    """Whether step ``i`` and the median of it and the next ``sustain - 1`` known values are at or below ``bar``."""
    after = [v for _, v in _known(values, i + 1, len(values))][: max(sustain - 1, 1)]
    now = values[i]
    return now is not None and bool(after) and now <= bar and statistics.median([now, *after]) <= bar


def _entropy_reference(
    entropy: Sequence[float | None], i: int, th: TrainingThresholds
) -> tuple[float, list[tuple[int, float]], str] | None:
    """The level step ``i`` is compared with, its steps and which test (``fast`` or ``floor``); None: no level."""
    p = th.policy
    value = entropy[i]
    if value is None:
        return None
    before = _known(entropy, i - th.window, i)
    level = _median(before)
    if level is not None and level > 0 and value <= (1 - p.entropy_drop) * level:
        return level, before, "fast"
    early = _known(entropy, 0, i)[: p.early_steps]
    early_level = _median(early)
    if value <= p.entropy_floor and early_level is not None and value <= (1 - p.entropy_drop) * early_level:
        return early_level, early, "floor"
    return None


def _reward_rise(log: MetricsLog, ref: list[tuple[int, float]], now: list[int]) -> tuple[float | None, ...]:
    """The mean reward over the reference steps and over ``now``, and the rise (None where unknown)."""
    reward = log.get("reward")
    if reward is None:
        return None, None, None
    before = [v for j, _ in ref if (v := reward[j]) is not None]
    after = [v for j in now if (v := reward[j]) is not None]
    if not before or not after:
        return None, None, None
    b, a = statistics.median(before), statistics.median(after)
    return b, a, a - b


def entropy_findings(log: MetricsLog, th: TrainingThresholds) -> list[Finding]:
    """The ``entropy_collapse`` findings (see the module docstring), in step order."""
    entropy = log.get("entropy")
    if entropy is None:
        return []
    p, out, i = th.policy, [], 1
    while i < len(entropy):
        ref = _entropy_reference(entropy, i, th)
        if ref is None:
            i += 1
            continue
        level, ref_steps, test = ref
        bar = (1 - p.entropy_drop) * level if test == "fast" else min(p.entropy_floor, (1 - p.entropy_drop) * level)
        if not _held(entropy, i, bar, p.sustain):
            i += 1
            continue
        end = i
        while end + 1 < len(entropy) and (entropy[end + 1] is None or entropy[end + 1] <= bar):  # type: ignore[operator]
            end += 1
        idx = [j for j, _ in _known(entropy, i, end + 1)]
        window = idx[: p.sustain]
        r_before, r_after, rise = _reward_rise(log, ref_steps, window)
        if rise is None or rise < p.reward_rise:
            value = entropy[i]
            evidence = {
                "entropy": _r(value),
                "entropy_before": _r(level),
                "reference_steps": [log.steps[ref_steps[0][0]], log.steps[ref_steps[-1][0]]],
                "fall": _r(1 - value / level, 3) if value is not None else None,
                "entropy_lowest": _r(min(v for j in idx if (v := entropy[j]) is not None)),
                "test": test,
                "reward_before": _r(r_before),
                "reward_after": _r(r_after),
            }
            if rise is None:
                evidence["note"] = "no reward at these steps: the fall was not weighed against the reward"
            out.append(Finding("entropy_collapse", log.steps[i], tuple(log.steps[j] for j in idx), evidence))
        i = end + 1
    return out


def kl_measured(log: MetricsLog) -> bool:
    """Whether the log holds a KL to the reference that is not 0 at every known step."""
    return any(v for v in log.get("kl") or [] if v is not None)


def kl_findings(log: MetricsLog, th: TrainingThresholds) -> list[Finding]:
    """The ``kl_blowup`` findings (see the module docstring): consecutive flagged steps are one finding."""
    kl = log.get("kl")
    if kl is None or not kl_measured(log):
        return []
    p = th.policy
    flagged: list[tuple[int, dict[str, object]]] = []
    for i, value in enumerate(kl):
        if value is None:
            continue
        level = _median(_known(kl, i - th.window, i))
        jump = level is not None and value >= p.kl_jump_floor and value >= p.kl_factor * max(level, 0.0)
        if value >= p.kl_max or jump:
            test = "level" if value >= p.kl_max else "jump"
            ratio = value / level if level is not None and level > 0 else None
            flagged.append((i, {"kl": _r(value), "kl_before": _r(level), "kl_factor": _r(ratio, 1), "test": test}))
    out: list[Finding] = []
    start = 0
    while start < len(flagged):
        end = start
        while end + 1 < len(flagged) and _adjacent(kl, flagged[end][0], flagged[end + 1][0]):
            end += 1
        run = flagged[start : end + 1]
        evidence = dict(run[0][1])
        if len(run) > 1:
            evidence["kl_peak"] = _r(max(kl[j] or 0.0 for j, _ in run))
        out.append(Finding("kl_blowup", log.steps[run[0][0]], tuple(log.steps[j] for j, _ in run), evidence))
        start = end + 1
    return out


def _adjacent(values: Sequence[float | None], a: int, b: int) -> bool:
    """Whether no known value lies between indices ``a`` and ``b`` (a skipped step does not break a run)."""
    return all(values[j] is None for j in range(a + 1, b))


def policy_not_checked(log: MetricsLog) -> dict[str, str]:
    """Verdict kind -> why its rule could not run (``"only in part: …"`` where it ran without the reward)."""
    out: dict[str, str] = {}
    entropy = sum(v is not None for v in log.get("entropy") or [])
    if entropy == 0:
        out["entropy_collapse"] = "the log has no policy entropy"
    elif entropy < 2:
        out["entropy_collapse"] = "needs 2 steps with an entropy, the log has 1 step"
    elif not any(v is not None for v in log.get("reward") or []):
        out["entropy_collapse"] = "only in part: the log has no reward, so a fall was not weighed against it"
    if log.get("kl") is None or all(v is None for v in log.get("kl") or []):
        out["kl_blowup"] = "the log has no KL to the reference policy"
    elif not kl_measured(log):
        out["kl_blowup"] = (
            "the KL to the reference is 0 at every step: not measured (tirl logs train/kl as 0 when "
            "algo.kl_coef=0 loads no reference; verl's actor/kl_loss is 0 without actor.use_kl_loss), or a policy "
            "that never moved"
        )
    return out
