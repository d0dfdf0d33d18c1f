"""Reading per-step training metrics from tirl, verl and SimpleTIR logs (JSONL or a wandb CSV export).

Every format is mapped onto one set of *canonical* series (``is_max``,
``valid``, ``void``, ``max_len``…) so the symptom rules in
:mod:`tirl.diagnostics.training` are written once. The key tables below are
the whole adapter: add a framework by adding its names.

* ``tirl``: the trainer's own keys (``train/is_ratio_max``, ``filter/valid_trajectories``…).
* ``verl``: ``actor/grad_norm``, ``rollout_corr/rollout_is_max`` (``mismatch/rollout_is_max`` in
  v0.6.0), ``response_length/max``, ``actor/entropy`` (``actor/entropy_loss`` in older releases),
  ``num_turns/mean``… (verl has no void filter, so valid/void counts are unknown).
* ``simpletir``: verl's keys plus ``env/void_turn_ratio`` (the share of trajectories with a void
  turn, read as the void share) and ``env/num_turns/mean``. Its ``batch/effective_batch_size``
  counts prompt groups, not trajectories, so no valid or void *count* is derived from it.

Files: tirl's ``metrics.jsonl``; any JSONL with one flat or nested object per
step; verl's ``file`` logger (``{"step": N, "data": {...}}`` per line); a
wandb CSV export (:mod:`tirl.diagnostics.wandb_csv`: each run of a multi-run
export is its own log, ``__MIN``/``__MAX`` bucket columns keep spikes that
downsampling would hide). Several files of one run (one chart export per
metric) are joined on the step.

Missing values (``null``, ``NaN``, an empty CSV cell, a skipped step) become
``None`` and are tolerated downstream.

Not covered: TensorBoard event files (export them to CSV first), a JSONL file
with several runs interleaved, and metric names that contain ``" - "`` in a
wandb export.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tirl.diagnostics.wandb_csv import read_wandb_csv
from tirl.errors import InputError
from tirl.jsonl import read_jsonl

LogFormat = Literal["tirl", "verl", "simpletir"]
FORMATS: tuple[str, ...] = ("auto", "tirl", "verl", "simpletir")

STEP_KEYS: tuple[str, ...] = ("step", "_step", "Step", "training/global_step", "global_step", "trainer/global_step")

# canonical name -> the keys that carry it in each format, first present wins
_TIRL: dict[str, tuple[str, ...]] = {
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
    "max_len": ("rollout/max_seq_len",),
    "mean_len": ("rollout/mean_seq_len",),
    "turns_mean": ("rollout/turns_mean",),
    "reward": ("reward/mean",),
    "step_s": ("time/step_s",),
}
# verl (verl/trainer/ppo/metric_utils.py, verl/workers/actor/dp_actor.py): the rollout-correction keys are
# ``rollout_corr/`` in current verl and ``mismatch/`` in v0.6.0; ``actor/entropy_loss`` in older releases
# (and SimpleTIR's vendored copy); ``num_turns/mean`` from verl's agent loop.
_VERL: dict[str, tuple[str, ...]] = {
    "grad_norm": ("actor/grad_norm",),
    "clip_frac": ("actor/pg_clipfrac",),
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "loss": ("actor/pg_loss",),
    "max_len": ("response_length/max",),
    "mean_len": ("response_length/mean",),
    "is_max": ("rollout_corr/rollout_is_max", "mismatch/rollout_is_max"),
    "is_min": ("rollout_corr/rollout_is_min", "mismatch/rollout_is_min"),
    "is_mean": ("rollout_corr/rollout_is_mean", "mismatch/rollout_is_mean"),
    "turns_mean": ("num_turns/mean", "env/num_turns/mean"),
    "reward": ("critic/score/mean",),
    "step_s": ("timing_s/step",),
}
# SimpleTIR (recipe/simpletir/simpletir_ray_trainer.py): ``env/void_turn_ratio`` is the share of trajectories
# with a void turn. ``batch/effective_batch_size`` counts prompt *groups* kept by rejection sampling, not
# trajectories, so it is not a valid count and is not read.
_SIMPLETIR: dict[str, tuple[str, ...]] = {**_VERL, "void_ratio": ("env/void_turn_ratio",)}
KEY_TABLES: dict[str, dict[str, tuple[str, ...]]] = {"tirl": _TIRL, "verl": _VERL, "simpletir": _SIMPLETIR}

# The keys each format must have for a diagnosis (at least one IS-ratio extreme, or a filter count).
NEEDED: dict[str, tuple[str, ...]] = {
    "tirl": ("train/is_ratio_max", "filter/valid_trajectories", "filter/void_trajectories", "rollout/max_seq_len"),
    "verl": ("rollout_corr/rollout_is_max (or mismatch/rollout_is_max)", "response_length/max", "actor/grad_norm"),
    "simpletir": ("env/void_turn_ratio", "response_length/max", "actor/grad_norm"),
}
_SIGNATURE: dict[str, tuple[str, ...]] = {
    "simpletir": ("env/void_turn_ratio",),
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

    def get(self, name: str) -> list[float | None] | None:
        """The canonical series ``name``, or ``None`` when the log does not have it."""
        return self.series.get(name)

    def __len__(self) -> int:
        return len(self.steps)


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None if value is None else float(value)
    if isinstance(value, int | float):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, str):
        s = value.strip()
        if not s:
            return None
        try:
            f = float(s)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """Unwrap a line of verl's ``file`` logger, ``{"step": N, "data": {...}}`` (+ ``elapsed_seconds`` lately)."""
    data = obj.get("data")
    if isinstance(data, dict) and "step" in obj and set(obj) <= {"step", "data", "elapsed_seconds"}:
        return {"step": obj["step"], **data}
    return obj


def _read_jsonl_rows(p: Path) -> list[dict[str, Any]]:
    """Rows read with the one JSONL reader (:func:`tirl.jsonl.read_jsonl`); a killed run's torn last line is skipped."""
    lines = read_jsonl(p, torn_tail=True, objects=True, fix="write one JSON object per step")
    return [_flatten(_unwrap(obj)) for _, obj in lines]


def _is_csv(p: Path) -> bool:
    return p.suffix.lower() == ".csv"


def _existing(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InputError(str(p), None, "file not found", "check the path of the training log")
    return p


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The raw per-step rows of one JSONL or CSV file (CSV if the name ends in ``.csv``), runs not separated."""
    p = _existing(path)
    if _is_csv(p):
        return [row for rows in read_wandb_csv(p).values() for row in rows]
    return _read_jsonl_rows(p)


def read_runs(path: str | Path) -> dict[str | None, list[dict[str, Any]]]:
    """The rows of each run in one file: a wandb CSV may hold several; a JSONL file is one run (``None``)."""
    p = _existing(path)
    if _is_csv(p):
        return dict(read_wandb_csv(p))
    return {None: _read_jsonl_rows(p)}


def detect_format(keys: set[str]) -> str | None:
    """The format whose signature keys are present (SimpleTIR before verl, since it extends it)."""
    for fmt in ("simpletir", "tirl", "verl"):
        if any(k in keys for k in _SIGNATURE[fmt]):
            return fmt
    return None


def _needed_text() -> str:
    return "; ".join(f"{fmt}: {', '.join(keys)}" for fmt, keys in NEEDED.items())


def _found_text(keys: set[str]) -> str:
    shown = sorted(keys)
    more = f" (+{len(shown) - 25} more)" if len(shown) > 25 else ""
    return ", ".join(shown[:25]) + more if shown else "none"


def _merge_by_step(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows of several files of one run (e.g. one wandb chart export per metric), joined on the step."""
    if len(parts) == 1:
        return parts[0]
    merged: dict[float, dict[str, Any]] = {}
    for rows in parts:
        for i, row in enumerate(rows):
            step_key = next((k for k in STEP_KEYS if _number(row.get(k)) is not None), None)
            step = _number(row.get(step_key)) if step_key else float(i)
            assert step is not None
            target = merged.setdefault(step, {"step": step})
            target.update({k: v for k, v in row.items() if v not in ("", None) or k not in target})
    return [merged[k] for k in sorted(merged)]


def _value(row: dict[str, Any], key: str, canon: str) -> float | None:
    """One canonical value; from a wandb export, the bucket extreme that keeps a spike (``_EXTREME``)."""
    extreme = _EXTREME.get(canon)
    if extreme is not None and (v := _number(row.get(key + extreme))) is not None:
        return v
    v = _number(row.get(key))
    if v is None:
        lo, hi = _number(row.get(key + "__MIN")), _number(row.get(key + "__MAX"))
        v = (lo + hi) / 2 if lo is not None and hi is not None else None
    return v


def metrics_from_rows(rows: list[dict[str, Any]], path: str, fmt: str = "auto", run: str | None = None) -> MetricsLog:
    """Map the rows of one run onto canonical series; raises :class:`InputError` if unusable."""
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
            f"cannot recognise the log format; keys found: {_found_text(keys)}",
            f"the keys needed are — {_needed_text()}",
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
            f"the {chosen} log has none of the keys a diagnosis needs; keys found: {_found_text(keys)}",
            f"the keys needed for {chosen} are {', '.join(NEEDED[chosen])}",
        )
    step_key = next((k for k in STEP_KEYS if k in keys), None)
    steps: list[int] = []
    for i, row in enumerate(rows):
        s = _number(row.get(step_key)) if step_key else None
        steps.append(int(s) if s is not None else (steps[-1] + 1 if steps else i))
    series = {canon: [_value(row, key, canon) for row in rows] for canon, key in present.items()}
    _derive(series)
    return MetricsLog(path=path, format=chosen, steps=steps, series=series, rows=rows, keys=sorted(keys), run=run)


def load_logs(paths: list[str | Path] | list[Path], fmt: str = "auto", run: str | None = None) -> list[MetricsLog]:
    """Every run in ``paths`` (several files are parts of the same runs, joined on the step), or only ``run``.

    A wandb export that draws several runs gives one log per run, in the order of its columns.
    """
    if not paths:
        raise InputError("training log", None, "no file given", "pass a metrics JSONL or a wandb CSV export")
    by_run: dict[str | None, list[list[dict[str, Any]]]] = {}
    for path in paths:
        for name, rows in read_runs(path).items():
            by_run.setdefault(name, []).append(rows)
    label = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} more)"
    if run is not None:
        if run not in by_run:
            names = ", ".join(repr(r) for r in by_run if r is not None) or "none (the files name no run)"
            raise InputError(label, None, f"no run named {run!r}; runs found: {names}", "pass one of them to --run")
        by_run = {run: by_run[run]}
    return [metrics_from_rows(_merge_by_step(parts), label, fmt, name) for name, parts in by_run.items()]


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
    if ratio is None and valid is not None and void is not None:
        series["void_ratio"] = [
            (d / (v + d)) if v is not None and d is not None and (v + d) > 0 else None
            for v, d in zip(valid, void, strict=True)
        ]
