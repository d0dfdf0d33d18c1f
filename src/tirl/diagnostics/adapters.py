"""Reading per-step training metrics from tirl, verl and SimpleTIR logs (JSONL or a wandb CSV export).

Every format is mapped onto one set of *canonical* series (``is_max``,
``valid``, ``void``, ``max_len``…) so the symptom rules in
:mod:`tirl.diagnostics.training` are written once. The key tables below are
the whole adapter: add a framework by adding its names.

* ``tirl``: the trainer's own keys (``train/is_ratio_max``, ``filter/valid_trajectories``…; ``train/entropy`` and
  ``train/kl``, the KL to the reference, which is 0 at every step when ``algo.kl_coef=0`` loads no reference).
* ``tirl``: the rollout's fault counts where the log has them (``rollout/failed``, ``rollout/termination/<reason>``
  of the failure reasons, ``rollout/{init,run,eval}_timeouts``, ``rollout/{init,eval}_retries``;
  :mod:`tirl.diagnostics.rollout_faults` also reads ``rollout/eval_failure/<reason>`` from the rows).
* ``tirl``, ``verl``, ``simpletir``: the attribution keys ``void/share_*`` and ``void/min_logprob_*`` where the
  log has them (tirl writes all; tirl's verl patch the generator side; :mod:`tirl.diagnostics.attribution`).
* ``verl``: ``actor/grad_norm``, ``rollout_corr/rollout_is_max`` (``mismatch/rollout_is_max`` in
  v0.6.0), ``response_length/max``, ``actor/entropy`` (``actor/entropy_loss`` in older releases),
  the KL to the reference ``actor/kl_loss`` (``actor.use_kl_loss``) or ``actor/reward_kl_penalty``
  (``algorithm.use_kl_in_reward``; not ``actor/ppo_kl``, which is old-vs-new policy), ``num_turns/mean``…
  (verl has no void filter, so valid/void counts are unknown).
* ``simpletir``: verl's keys plus ``env/void_turn_ratio`` (the share of trajectories with a void
  turn, read as the void share) and ``env/num_turns/mean``. Its ``batch/effective_batch_size``
  counts prompt groups, not trajectories, so no valid or void *count* is derived from it.
* ``trl``: TRL's ``GRPOTrainer`` (``trl/trainer/grpo_trainer.py``, 1.16): ``grad_norm``, ``loss``,
  ``entropy``, ``kl`` (``beta > 0``), ``reward``, ``completions/max_length``, ``clip_ratio/region_mean``, the IS
  ratio of ``vllm_importance_sampling_correction`` (``sampling/importance_sampling_ratio/max``), and the void
  keys of tirl's ``VoidFilteredGRPOTrainer`` (``void/trajectories``, ``void/ratio``); bare as in
  ``trainer_state.json``'s ``log_history`` or with transformers' wandb ``train/`` prefix. TRL averages
  each key over the ``logging_steps`` it logs at once, so with ``logging_steps > 1`` an IS-ratio *max*
  is a mean of maxima and a spike is damped (log every step to diagnose).
* ``skyrl``: SkyRL's trainer (``skyrl/train/trainer.py``): ``policy/grad_norm``,
  ``policy/loss_metrics/is_ratio_max`` (off-policy correction on), ``policy/policy_entropy``, ``policy/policy_kl``
  (the KL loss to the reference),
  ``generate/max_num_tokens``, ``reward/avg_raw_reward`` and ``trainer/global_step`` (SkyRL has no
  void filter, so valid/void counts are unknown).

Files: tirl's ``metrics.jsonl``; any JSONL with one flat or nested object per
step; TRL's ``trainer_state.json`` (its ``log_history``: training rows only, the final summary and
``eval_`` rows left out); verl's ``file`` logger (``{"step": N, "data": {...}}`` per line); a
wandb CSV export (:mod:`tirl.diagnostics.wandb_csv`: each run of a multi-run
export is its own log, ``__MIN``/``__MAX`` bucket columns keep spikes that
downsampling would hide). Several files of one run (one chart export per
metric) are joined on the step. Reading, the step column, the cell check and
the join are :mod:`tirl.diagnostics.log_rows`: a bad step (missing, ``"x"``,
negative, a step logged twice with different values), a metric cell that is
not a number (``"big"``, ``true``, a list) and files that disagree on a step
are errors naming the file and line; a torn last JSONL line is skipped with
a note (:attr:`MetricsLog.notes`).

Missing values (``null``, ``NaN``, an empty CSV cell, a skipped step) become
``None`` and are tolerated downstream; a log in which every value the format
reads is missing is refused (nothing to diagnose). Non-finite and extreme values: an
``Infinity`` IS-ratio max (or grad norm) is the worst spike a log can hold (it
reads as the largest float), never "missing"; a value a series cannot hold (a
void share of 1e308, a negative count, ``-Infinity``) reads as missing; other
values beyond ±1e15 are clamped there, so no finite number overflows the
rules' arithmetic and refuses the log. Not covered: an IS-ratio *min* of 0
(the worst downward spike) reads as missing, like every ratio <= 0.

TensorBoard event files (an ``events.out.tfevents.*`` file, or a directory holding them: a run's ``tb/``, a
``--logdir`` with one run per sub-directory) are read by :mod:`tirl.diagnostics.tb_events` into the same rows,
under the same key tables (TensorBoard tags are the logged metric names).

Not covered: a JSONL file
with several runs interleaved (refused where two rows of one step disagree),
and metric names that contain ``" - "`` in a wandb export.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tirl.diagnostics.log_rows import (
    STEP_KEYS,
    FileRows,
    check_cells,
    file_steps,
    merge_by_step,
    raw_number,
    read_file_runs,
)
from tirl.diagnostics.tb_events import event_files, is_event_file, read_tensorboard
from tirl.errors import InputError, cut
from tirl.jsonl import other_reader

LogFormat = Literal["tirl", "verl", "simpletir", "trl", "skyrl"]
FORMATS: tuple[str, ...] = ("auto", "tirl", "verl", "simpletir", "trl", "skyrl")

__all__ = [
    "FORMATS", "KEY_TABLES", "KNOWN_KEYS", "NEEDED", "STEP_KEYS", "MetricsLog",
    "detect_format", "load_logs", "load_metrics", "metrics_from_rows", "read_log_runs", "read_rows",
]  # fmt: skip

# The attribution keys (tirl.trainer.attribution): tirl writes them all; tirl's verl patch writes the generator
# side (trajectories, tokens, low-prob tokens, min log-probs), verl itself none.
_ATTRIBUTION: dict[str, tuple[str, ...]] = {
    "void_share_trajs": ("void/share_trajectories",),
    "void_share_tokens": ("void/share_tokens",),
    "void_share_lowprob": ("void/share_lowprob_tokens",),
    "void_share_outliers": ("void/share_ratio_outliers",),
    "void_share_dual": ("void/share_ratio_dual_clip",),
    "void_share_grad": ("void/share_grad_norm",),
    "min_lp_void": ("void/min_logprob_void",),
    "min_lp_valid": ("void/min_logprob_valid",),
}
#: the termination reasons of a failed episode (tirl.types.TerminationReason.is_failure), in the stage order
FAILED_ENDS: tuple[str, ...] = ("init_failed", "timeout", "error", "eval_failed", "cancelled")
# The rollout's own fault counts (tirl.rollout.batch_stats, tirl.trainer.trainer.rollout_metrics): how the
# episodes that failed ended, and the stage attempts that timed out or were retried (tirl.diagnostics.rollout_faults).
_ROLLOUT_FAULTS: dict[str, tuple[str, ...]] = {
    **{f"end_{why}": (f"rollout/termination/{why}",) for why in FAILED_ENDS},
    **{f"{stage}_timeouts": (f"rollout/{stage}_timeouts",) for stage in ("init", "run", "eval")},
    **{f"{stage}_retries": (f"rollout/{stage}_retries",) for stage in ("init", "eval")},
    "eval_attempts": ("rollout/eval_attempts",),
}
# canonical name -> the keys that carry it in each format, first present wins
_TIRL: dict[str, tuple[str, ...]] = {
    **_ATTRIBUTION,
    "trajectories": ("rollout/trajectories",),
    "valid": ("filter/valid_trajectories",),
    "void": ("filter/void_trajectories",),
    "void_ratio": ("filter/void_ratio",),
    "resampled": ("filter/resampled",),
    "failed": ("rollout/failed",),
    "is_min": ("train/is_ratio_min",),
    "is_max": ("train/is_ratio_max",),
    "is_mean": ("train/is_ratio_mean",),
    "clip_frac": ("train/clip_frac",),
    "grad_norm": ("train/grad_norm",),
    "loss": ("train/loss",),
    "entropy": ("train/entropy",),
    "kl": ("train/kl",),
    "max_len": ("rollout/max_seq_len",),
    "mean_len": ("rollout/mean_seq_len",),
    "turns_mean": ("rollout/turns_mean",),
    "reward": ("reward/mean",),
    "step_s": ("time/step_s",),
    **_ROLLOUT_FAULTS,
}
# verl (verl/trainer/ppo/metric_utils.py, verl/workers/actor/dp_actor.py): the rollout-correction keys are
# ``rollout_corr/`` in current verl and ``mismatch/`` in v0.6.0; ``actor/entropy_loss`` in older releases
# (and SimpleTIR's vendored copy); ``num_turns/mean`` from verl's agent loop.
_VERL: dict[str, tuple[str, ...]] = {
    "grad_norm": ("actor/grad_norm",),
    "clip_frac": ("actor/pg_clipfrac",),
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "kl": ("actor/kl_loss", "actor/reward_kl_penalty"),
    "loss": ("actor/pg_loss",),
    "max_len": ("response_length/max",),
    "mean_len": ("response_length/mean",),
    "is_max": ("rollout_corr/rollout_is_max", "mismatch/rollout_is_max"),
    "is_min": ("rollout_corr/rollout_is_min", "mismatch/rollout_is_min"),
    "is_mean": ("rollout_corr/rollout_is_mean", "mismatch/rollout_is_mean"),
    "turns_mean": ("num_turns/mean", "env/num_turns/mean"),
    "reward": ("critic/score/mean",),
    "step_s": ("timing_s/step",),
    **_ATTRIBUTION,
}
# SimpleTIR (recipe/simpletir/simpletir_ray_trainer.py): ``env/void_turn_ratio`` is the share of trajectories
# with a void turn. ``batch/effective_batch_size`` counts prompt *groups* kept by rejection sampling, not
# trajectories, so it is not a valid count and is not read.
_SIMPLETIR: dict[str, tuple[str, ...]] = {**_VERL, "void_ratio": ("env/void_turn_ratio",)}


def _bare_or_train(*names: str) -> tuple[str, ...]:
    """A TRL key as ``log_history`` writes it, then as transformers' wandb callback does (``train/`` prefix)."""
    return (*names, *(f"train/{n}" for n in names))


# TRL 1.16 (trl/trainer/grpo_trainer.py ``self._metrics[mode][...]``) and tirl's VoidFilteredGRPOTrainer.
_TRL: dict[str, tuple[str, ...]] = {
    "is_max": _bare_or_train("sampling/importance_sampling_ratio/max"),
    "is_min": _bare_or_train("sampling/importance_sampling_ratio/min"),
    "is_mean": _bare_or_train("sampling/importance_sampling_ratio/mean"),
    "void": _bare_or_train("void/trajectories"),
    "void_ratio": _bare_or_train("void/ratio"),
    "grad_norm": _bare_or_train("grad_norm"),
    "loss": _bare_or_train("loss"),
    "entropy": _bare_or_train("entropy"),
    "kl": _bare_or_train("kl"),
    "clip_frac": _bare_or_train("clip_ratio/region_mean"),
    "max_len": _bare_or_train("completions/max_length"),
    "mean_len": _bare_or_train("completions/mean_length"),
    "reward": _bare_or_train("reward"),
}
# SkyRL (skyrl/train/trainer.py: ``policy/`` + the worker's status, ``loss_metrics/`` + the off-policy metrics).
_SKYRL: dict[str, tuple[str, ...]] = {
    "is_max": ("policy/loss_metrics/is_ratio_max",),
    "is_min": ("policy/loss_metrics/is_ratio_min",),
    "is_mean": ("policy/loss_metrics/is_ratio_mean",),
    "grad_norm": ("policy/grad_norm",),
    "loss": ("policy/policy_loss",),
    "entropy": ("policy/policy_entropy",),
    "kl": ("policy/policy_kl",),
    "clip_frac": ("policy/loss_metrics/clip_ratio",),
    "max_len": ("generate/max_num_tokens",),
    "mean_len": ("generate/avg_num_tokens",),
    "turns_mean": ("generate/avg_num_turns",),
    "reward": ("reward/avg_raw_reward",),
}
KEY_TABLES: dict[str, dict[str, tuple[str, ...]]] = {
    "tirl": _TIRL, "verl": _VERL, "simpletir": _SIMPLETIR, "trl": _TRL, "skyrl": _SKYRL,
}  # fmt: skip

# The keys each format must have for a diagnosis (at least one IS-ratio extreme, or a filter count).
NEEDED: dict[str, tuple[str, ...]] = {
    "tirl": ("train/is_ratio_max", "filter/valid_trajectories", "filter/void_trajectories", "rollout/max_seq_len"),
    "verl": ("rollout_corr/rollout_is_max (or mismatch/rollout_is_max)", "response_length/max", "actor/grad_norm"),
    "simpletir": ("env/void_turn_ratio", "response_length/max", "actor/grad_norm"),
    "trl": (
        "sampling/importance_sampling_ratio/max (vllm_importance_sampling_correction=True)",
        "void/ratio (tirl.integrations.trl.VoidFilteredGRPOTrainer)",
        "completions/max_length",
    ),
    "skyrl": ("policy/loss_metrics/is_ratio_max (an off-policy correction on)", "generate/max_num_tokens"),
}
_SIGNATURE: dict[str, tuple[str, ...]] = {
    "simpletir": ("env/void_turn_ratio",),
    "trl": _bare_or_train("frac_reward_zero_std", "completions/max_length", "clip_ratio/region_mean", "void/ratio"),
    "skyrl": ("policy/loss_metrics/is_ratio_max", "generate/max_num_tokens", "reward/avg_raw_reward"),
    "tirl": ("filter/valid_trajectories", "filter/void_trajectories", "train/is_ratio_max", "train/grad_norm"),
    "verl": (
        "actor/grad_norm",
        "rollout_corr/rollout_is_max",
        "mismatch/rollout_is_max",
        "response_length/max",
        "actor/pg_clipfrac",
    ),
}
_USABLE = ("is_max", "is_min", "valid", "void", "void_ratio")
# wandb's bucket aggregate that keeps a spike visible: the largest value for upper extremes, the smallest for lower.
_EXTREME: dict[str, str] = {"is_max": "__MAX", "max_len": "__MAX", "is_min": "__MIN"}


@dataclass(frozen=True, slots=True)
class MetricsLog:
    """A per-step training log in canonical series, plus the raw rows (for evidence windows)."""

    path: str
    format: str
    steps: list[int]
    series: dict[str, list[float | None]]
    rows: list[dict[str, Any]] = field(repr=False)
    keys: list[str] = field(default_factory=list, repr=False)
    run: str | None = None
    notes: tuple[str, ...] = ()  # for the user, e.g. a torn last line that was skipped

    def get(self, name: str) -> list[float | None] | None:
        """The canonical series ``name``, or ``None`` when the log does not have it."""
        return self.series.get(name)

    def __len__(self) -> int:
        return len(self.steps)


# What each canonical series can physically hold: a value outside is not a measurement and reads as missing
# (a void share of 1e308 or -3, a negative count), so no extreme finite number reaches the arithmetic.
_HUGE = 1e15
_DOMAIN: dict[str, tuple[float, float]] = {
    "trajectories": (0.0, _HUGE),
    "valid": (0.0, _HUGE),
    "void": (0.0, _HUGE),
    "resampled": (0.0, _HUGE),
    "void_ratio": (0.0, 1.0),
    "clip_frac": (0.0, 1.0),
    "entropy": (0.0, _HUGE),
    "is_min": (0.0, math.inf),
    "is_max": (0.0, math.inf),
    "is_mean": (0.0, math.inf),
    "grad_norm": (0.0, math.inf),
    "max_len": (0.0, _HUGE),
    "mean_len": (0.0, _HUGE),
    "turns_mean": (0.0, _HUGE),
    "step_s": (0.0, _HUGE),
    "failed": (0.0, _HUGE),
    **dict.fromkeys(_ROLLOUT_FAULTS, (0.0, _HUGE)),
    **{name: (0.0, 1.0) for name in _ATTRIBUTION if name.startswith("void_share")},
    "min_lp_void": (-_HUGE, 0.0),
    "min_lp_valid": (-_HUGE, 0.0),
}
# Upper extremes whose +inf is the worst spike there can be (an overflowed ratio or gradient), never "missing":
# they read as the largest float, so the log-scale rules see the biggest jump a log can hold.
_INF_IS_WORST = frozenset({"is_max", "grad_norm"})


def _canonical(value: Any, canon: str) -> float | None:
    """One raw value as series ``canon`` reads it, in the float range the rules compute with.

    +inf is the worst spike for ``_INF_IS_WORST``; values outside ``_DOMAIN`` are missing; others are clamped.
    """
    f = raw_number(value)
    if f is None or math.isnan(f):
        return None
    if f == math.inf and canon in _INF_IS_WORST:
        return sys.float_info.max
    if math.isinf(f):
        return None
    lo, hi = _DOMAIN.get(canon, (-_HUGE, _HUGE))
    if canon not in _DOMAIN and abs(f) > _HUGE:  # a loss or reward of 1e308: clamped, still an extreme
        return math.copysign(_HUGE, f)
    return f if lo <= f <= hi else None


def read_log_runs(path: str | Path) -> dict[str | None, FileRows]:
    """The rows of each run in one log: TensorBoard event files (a file or a directory of them), else a file."""
    p = Path(path)
    files = event_files(p) if p.is_dir() else None  # listed once: read_tensorboard takes them
    if is_event_file(p) or files:
        return {name: _training_steps(part) for name, part in read_tensorboard(p, files).items()}
    return read_file_runs(p)


def _training_steps(part: FileRows) -> FileRows:
    """The rows that hold a key some adapter reads: an event step with only ``eval/*`` tags is no training step."""
    kept = [i for i, row in enumerate(part.rows) if any(key in KNOWN_KEYS for key in row)]
    return FileRows(part.path, [part.rows[i] for i in kept], [part.positions[i] for i in kept], part.notes)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The raw per-step rows of one log (:func:`read_log_runs`), runs not separated."""
    return [row for part in read_log_runs(path).values() for row in part.rows]


def detect_format(keys: set[str]) -> str | None:
    """The format whose signature keys are present.

    SimpleTIR before verl, since it extends it; TRL before tirl, since transformers' wandb callback writes
    TRL's ``grad_norm`` as ``train/grad_norm``.
    """
    for fmt in ("simpletir", "trl", "skyrl", "tirl", "verl"):
        if any(k in keys for k in _SIGNATURE[fmt]):
            return fmt
    return None


def _needed_text() -> str:
    return "; ".join(f"{fmt}: {', '.join(keys)}" for fmt, keys in NEEDED.items())


def found_text(keys: set[str]) -> str:
    shown = sorted(keys)
    more = f" (+{len(shown) - 25} more)" if len(shown) > 25 else ""
    return ", ".join(cut(k) for k in shown[:25]) + more if shown else "none"


def _value(row: dict[str, Any], key: str, canon: str) -> float | None:
    """One canonical value; from a wandb export, the bucket extreme that keeps a spike (``_EXTREME``)."""
    extreme = _EXTREME.get(canon)
    if extreme is not None and (v := _canonical(row.get(key + extreme), canon)) is not None:
        return v
    v = _canonical(row.get(key), canon)
    if v is None:
        lo, hi = _canonical(row.get(key + "__MIN"), canon), _canonical(row.get(key + "__MAX"), canon)
        v = lo / 2 + hi / 2 if lo is not None and hi is not None else None  # halves: no overflow at the float max
    return v


def metrics_from_rows(
    rows: list[dict[str, Any]],
    steps: list[int],
    path: str,
    fmt: str = "auto",
    run: str | None = None,
    notes: tuple[str, ...] = (),
) -> MetricsLog:
    """Map the rows of one run (at ``steps``) onto canonical series; raises :class:`InputError` if unusable.

    Unusable: no rows, an unknown format, none of the keys a diagnosis needs, or no value at all in the keys
    the format reads (every one null, ``NaN`` or empty: nothing to diagnose).
    """
    if not rows:
        raise InputError(path, None, "the log has no rows", "point at a metrics JSONL or a wandb CSV export")
    keys: set[str] = set()
    for row in rows:
        keys.update(k.removesuffix("__MIN").removesuffix("__MAX") for k in row)
    if fmt not in FORMATS:
        raise InputError(path, None, f"unknown format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    chosen = detect_format(keys) if fmt == "auto" else fmt
    where = path if run is None else f"{path} (run {run!r})"
    if chosen is None:
        raise InputError(
            where,
            None,
            f"cannot recognise the log format; keys found: {found_text(keys)}",
            other_reader(keys, path) or f"the keys needed are — {_needed_text()}",
        )
    present = {
        canon: key
        for canon, names in KEY_TABLES[chosen].items()
        if (key := next((n for n in names if n in keys), None))
    }
    if not any(c in present for c in _USABLE):
        raise InputError(
            where,
            None,
            f"the {chosen} log has none of the keys a diagnosis needs; keys found: {found_text(keys)}",
            f"the keys needed for {chosen} are {', '.join(NEEDED[chosen])}",
        )
    series = {canon: [_value(row, key, canon) for row in rows] for canon, key in present.items()}
    _derive(series)
    if all(v is None for values in series.values() for v in values):
        raise InputError(
            where,
            None,
            f"none of the {len(present)} keys the {chosen} format reads has a value in the log's {len(rows)} "
            "rows (all null, NaN or empty): nothing to diagnose",
            "point at the log of a run that logged its metrics",
        )
    return MetricsLog(
        path=path, format=chosen, steps=steps, series=series, rows=rows, keys=sorted(keys), run=run, notes=notes
    )


# Every key an adapter reads: their cells must be numbers (log_rows.check_cells), and files must agree on them.
KNOWN_KEYS: frozenset[str] = frozenset(k for table in KEY_TABLES.values() for names in table.values() for k in names)


def load_logs(paths: list[str | Path] | list[Path], fmt: str = "auto", run: str | None = None) -> list[MetricsLog]:
    """Every run in ``paths`` (several files are parts of the same runs, joined on the step), or only ``run``.

    A wandb export that draws several runs gives one log per run, in the order of its columns. Each file's
    steps and metric cells are checked, and the files of a run must agree on each step
    (:mod:`tirl.diagnostics.log_rows`); a problem raises :class:`InputError` naming the file and line.
    """
    if not paths:
        raise InputError("training log", None, "no file given", "pass a metrics JSONL or a wandb CSV export")
    by_run: dict[str | None, list[FileRows]] = {}
    for path in paths:
        for name, part in read_log_runs(path).items():
            by_run.setdefault(name, []).append(part)
    label = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} more)"
    if run is not None:
        if run not in by_run:
            names = ", ".join(repr(r) for r in by_run if r is not None)
            if not names:  # the fix said "pass one of them" with none to pass
                raise InputError(label, None, f"no run named {run!r}: the files name no run (one run each)",
                                 "leave --run out")  # fmt: skip
            raise InputError(label, None, f"no run named {run!r}; runs found: {names}", "pass one of them to --run")
        by_run = {run: by_run[run]}
    if not by_run:  # an empty CSV names no run at all: not zero logs diagnosed as nothing
        raise InputError(label, None, "the log has no rows", "point at a metrics JSONL or a wandb CSV export")
    logs = []
    for name, parts in by_run.items():
        for part in parts:
            check_cells(part, KNOWN_KEYS)
        steps, rows = merge_by_step(((part, file_steps(part)) for part in parts), KNOWN_KEYS)
        notes = tuple(note for part in parts for note in part.notes)
        logs.append(metrics_from_rows(rows, steps, label, fmt, name, notes))
    return logs


def load_metrics(path: str | Path, fmt: str = "auto", run: str | None = None) -> MetricsLog:
    """Read one run's training log; an export with several runs needs ``run``."""
    logs = load_logs([path], fmt, run)
    if len(logs) > 1:
        names = ", ".join(repr(log.run) for log in logs)
        raise InputError(str(path), None, f"the export holds {len(logs)} runs: {names}", "pick one with --run NAME")
    return logs[0]


def _derive(series: dict[str, list[float | None]]) -> None:
    """Fill void counts and void ratios from each other where one is missing."""
    valid, void, ratio = series.get("valid"), series.get("void"), series.get("void_ratio")
    if void is None and valid is not None and ratio is not None:
        derived: list[float | None] = []
        for v, r in zip(valid, ratio, strict=True):
            if v is None or r is None or r >= 1.0:
                derived.append(None)  # an all-void batch has valid 0: the void count is not recoverable
            else:
                derived.append(round(r / (1.0 - r) * v, 6))
        series["void"] = derived
    if valid is None and void is not None and ratio is not None:  # TRL's plug-in logs the void count and share
        series["valid"] = [
            round(d * (1.0 - r) / r, 6) if d is not None and r is not None and r > 0 else None
            for d, r in zip(void, ratio, strict=True)
        ]
    if ratio is None and valid is not None and void is not None:
        series["void_ratio"] = [
            (d / (v + d)) if v is not None and d is not None and (v + d) > 0 else None
            for v, d in zip(valid, void, strict=True)
        ]
