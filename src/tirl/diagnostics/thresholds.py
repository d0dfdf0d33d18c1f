"""The tuning of every diagnostic verdict rule, in one place.

Each rule is described in its own module, which names these fields:
:mod:`tirl.diagnostics.training` (the void-turn symptoms), :mod:`tirl.diagnostics.attribution` (where the
spikes sit), :mod:`tirl.diagnostics.drift` (void drift), :mod:`tirl.diagnostics.entropy_kl` (entropy collapse,
KL blow-up), :mod:`tirl.diagnostics.rollout_faults` (episodes the rollout lost) and
:mod:`tirl.diagnostics.pipeline` (the bottleneck stage). The defaults
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
class PolicyThresholds:
    """Tuning of the entropy-collapse and KL blow-up rules (:mod:`tirl.diagnostics.entropy_kl`).

    ``entropy_collapse``: the mean token entropy falls to at most ``1 - entropy_drop`` of its reference level and
    stays there (the step and the median of the next ``sustain - 1`` known values), while the mean reward rose
    by less than ``reward_rise`` (in the reward's own units; tirl's are 0..1) over the same steps. The reference
    is the level of the ``window`` steps before (a fast fall), or the median of the run's first
    ``early_steps`` values when the entropy ends at or below ``entropy_floor`` nats per token (a slow slide to
    near-determinism). ``kl_blowup``: the KL to the reference reaches ``kl_max``, or at least ``kl_factor``
    times the median of the ``window`` steps before and at least ``kl_jump_floor``.

    Checked on tirl's three real 30-step logs (entropy 0.08 -> 0.02 nats while the reward rose 0.4 -> 0.9: no
    finding) and seeded synthetic logs (``tests/diagnostics/test_entropy_kl.py``).
    """

    entropy_drop: float = 0.8
    entropy_floor: float = 0.01
    early_steps: int = 3
    sustain: int = 3
    reward_rise: float = 0.1
    kl_max: float = 1.0
    kl_factor: float = 10.0
    kl_jump_floor: float = 0.1


@dataclass(frozen=True, slots=True)
class FaultThresholds:
    """Tuning of the ``rollout_faults`` rule (:mod:`tirl.diagnostics.rollout_faults`).

    A step is faulty when at least ``min_count`` of its episodes, and at least ``share`` of its sampled
    trajectories, failed or were scored 0 by a broken evaluation; ``steps`` consecutive faulty steps are a
    finding. ``min_count`` keeps a small batch (8 episodes: one failure is 12 %) from a finding by one flaky
    episode a step. Checked on tirl's three real 30-step logs (no failure: no finding) and on seeded healthy
    logs with 2 % of the episodes failing at random (``tests/diagnostics/measure_rates.py``: no finding).
    """

    share: float = 0.1
    min_count: int = 2
    steps: int = 3


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
    policy: PolicyThresholds = field(default_factory=PolicyThresholds)
    faults: FaultThresholds = field(default_factory=FaultThresholds)


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
