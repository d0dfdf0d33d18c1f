"""The tuning of every diagnostic verdict rule, in one place.

Each rule is described in its own module, which names these fields:
:mod:`tirl.diagnostics.training` (the void-turn symptoms), :mod:`tirl.diagnostics.attribution` (where the
spikes sit), :mod:`tirl.diagnostics.drift`
(void drift) and :mod:`tirl.diagnostics.pipeline` (the bottleneck stage). The defaults
were checked on seeded synthetic logs and traces (``tests/diagnostics/measure_rates.py``,
``docs/diagnostics.md``); a caller passes its own instance to ``diagnose_training``,
``find_drift`` or ``diagnose_pipeline`` to change them. Not covered: reading them from a file
or the command line (``tirl diagnose`` always uses the defaults).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DriftThresholds:
    """Tuning of the drift test (checked on seeded logs: ``tests/diagnostics/measure_rates.py``)."""

    min_window: int = 5
    max_window: int = 20
    min_rise: float = 0.08
    rise_z: float = 4.0
    trend_z: float = 3.5
    sustained_frac: float = 0.5
    onset_frac: float = 0.25
    onset_noise: float = 2.0
    noise_floor: float = 0.01


@dataclass(frozen=True, slots=True)
class AttributionThresholds:
    """Tuning of the spike-attribution verdicts (:mod:`tirl.diagnostics.attribution`).

    ``spikes_in_void``: the void rows' mean share of the spikes is at least ``margin`` above *and* ``lift``
    times their mean share of the tokens; ``spikes_in_valid``: at most their token share, with at least
    ``valid_majority`` of the spikes in valid rows; both need ``min_steps`` spike steps with the keys.
    """

    min_steps: int = 2
    margin: float = 0.15
    lift: float = 1.5
    valid_majority: float = 0.5


@dataclass(frozen=True, slots=True)
class TrainingThresholds:
    """Tuning of the symptom rules (defaults were checked on seeded noisy logs in the tests)."""

    window: int = 20
    min_points: int = 8
    is_z: float = 6.0
    is_factor: float = 2.0
    is_big_z: float = 3.0
    is_big_factor: float = 8.0
    is_abs: float = 10.0
    len_z: float = 3.0
    drop_z: float = 4.0
    inactive_steps: int = 25
    drift: DriftThresholds = field(default_factory=DriftThresholds)
    attribution: AttributionThresholds = field(default_factory=AttributionThresholds)


@dataclass(frozen=True, slots=True)
class PipelineThresholds:
    """Tuning of the pipeline rules (fractions of capacity and of time; ``rise_items`` is a noise floor).

    ``min_snapshots``: the fewest snapshots a trace is judged on (fewer: ``cannot_judge``). The rising rule
    compares the mean of the first third of the snapshots with the last third's: below two snapshots a third,
    each "mean" is one reading and one noisy snapshot makes a rise. With six, "non-empty ``busy_frac`` of the
    time" is four snapshots of six, no longer "every snapshot" (as it is of two).
    """

    min_snapshots: int = 6
    high_frac: float = 0.25
    busy_frac: float = 0.6
    idle_util: float = 0.5
    blocked_frac: float = 0.3
    rise_frac: float = 0.15
    rise_items: float = 2.0
    gap_factor: float = 3.0
