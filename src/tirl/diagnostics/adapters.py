"""Reading per-step training metrics from tirl, verl and SimpleTIR logs (JSONL or a wandb CSV export).

Every format is mapped onto one set of *canonical* series (``is_max``,
``valid``, ``void``, ``max_len``…) so the symptom rules in
:mod:`tirl.diagnostics.training` are written once. The key tables below are
the whole adapter: add a framework by adding its names.

* ``tirl``: the trainer's own keys (``train/is_ratio_max``, ``filter/valid_trajectories``…).
* ``verl``: ``actor/grad_norm``, ``rollout_corr/rollout_is_max``, ``response_length/max``…
  (verl has no void filter, so valid/void counts are unknown).
* ``simpletir``: verl's keys plus ``env/void_turn_ratio`` and ``batch/effective_batch_size``
  (the valid count); the void count is derived as ``ratio / (1 - ratio) * valid``.

Missing values (``null``, ``NaN``, an empty CSV cell, a skipped step) become
``None`` and are tolerated downstream. A wandb CSV export is read as is:
the ``Step``/``_step`` column is the step, ``"<run> - <key>"`` headers lose
the run prefix, and ``__MIN``/``__MAX`` aggregate columns are ignored.

Not covered: TensorBoard event files (export them to CSV first) and logs
with several runs interleaved in one file.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tirl.errors import InputError

LogFormat = Literal["tirl", "verl", "simpletir"]
FORMATS: tuple[str, ...] = ("auto", "tirl", "verl", "simpletir")

STEP_KEYS: tuple[str, ...] = ("step", "_step", "Step", "training/global_step", "global_step", "trainer/global_step")

# canonical name -> key in each format
_TIRL: dict[str, str] = {
    "trajectories": "rollout/trajectories",
    "valid": "filter/valid_trajectories",
    "void": "filter/void_trajectories",
    "resampled": "filter/resampled",
    "is_min": "train/is_ratio_min",
    "is_max": "train/is_ratio_max",
    "is_mean": "train/is_ratio_mean",
    "clip_frac": "train/clip_frac",
    "grad_norm": "train/grad_norm",
    "loss": "train/loss",
    "entropy": "train/entropy",
    "max_len": "rollout/max_seq_len",
    "mean_len": "rollout/mean_seq_len",
    "turns_mean": "rollout/turns_mean",
    "reward": "reward/mean",
    "step_s": "time/step_s",
}
_VERL: dict[str, str] = {
    "grad_norm": "actor/grad_norm",
    "clip_frac": "actor/pg_clipfrac",
    "entropy": "actor/entropy",
    "loss": "actor/pg_loss",
    "max_len": "response_length/max",
    "mean_len": "response_length/mean",
    "is_max": "rollout_corr/rollout_is_max",
    "is_min": "rollout_corr/rollout_is_min",
    "is_mean": "rollout_corr/rollout_is_mean",
    "reward": "critic/score/mean",
    "step_s": "timing_s/step",
}
_SIMPLETIR: dict[str, str] = {**_VERL, "void_ratio": "env/void_turn_ratio", "valid": "batch/effective_batch_size"}
KEY_TABLES: dict[str, dict[str, str]] = {"tirl": _TIRL, "verl": _VERL, "simpletir": _SIMPLETIR}

# The keys each format must have for a diagnosis (at least one IS-ratio extreme, or a filter count).
NEEDED: dict[str, tuple[str, ...]] = {
    "tirl": ("train/is_ratio_max", "filter/valid_trajectories", "filter/void_trajectories", "rollout/max_seq_len"),
    "verl": ("rollout_corr/rollout_is_max", "response_length/max", "actor/grad_norm"),
    "simpletir": (
        "rollout_corr/rollout_is_max",
        "response_length/max",
        "env/void_turn_ratio",
        "batch/effective_batch_size",
    ),
}
_SIGNATURE: dict[str, tuple[str, ...]] = {
    "simpletir": ("env/void_turn_ratio", "batch/effective_batch_size"),
    "tirl": ("filter/valid_trajectories", "filter/void_trajectories", "train/is_ratio_max", "train/grad_norm"),
    "verl": ("actor/grad_norm", "rollout_corr/rollout_is_max", "response_length/max", "actor/pg_clipfrac"),
}
_USABLE = ("is_max", "is_min", "valid", "void", "void_ratio")


@dataclass(frozen=True, slots=True)
class MetricsLog:
    """A per-step training log in canonical series, plus the raw rows (for evidence windows)."""

    path: str
    format: str
    steps: list[int]
    series: dict[str, list[float | None]]
    rows: list[dict[str, Any]] = field(repr=False)
    keys: list[str] = field(default_factory=list, repr=False)

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


def _read_jsonl_rows(p: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with p.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                if not line.endswith("\n"):
                    break  # a torn last line of a killed run
                raise InputError(
                    str(p), number, f"not valid JSON ({exc.msg})", "each line must be one JSON object"
                ) from None
            if not isinstance(obj, dict):
                raise InputError(str(p), number, "a line is not a JSON object", "write one object per step")
            rows.append(_flatten(obj))
    return rows


def _csv_header(name: str) -> str | None:
    if name.endswith(("__MIN", "__MAX")):
        return None
    if " - " in name:
        name = name.split(" - ", 1)[1]
    return name.strip()


def _read_csv_rows(p: Path) -> list[dict[str, Any]]:
    with p.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            return []
        names = [_csv_header(h) for h in header]
        rows: list[dict[str, Any]] = []
        for values in reader:
            if not any(v.strip() for v in values):
                continue
            row: dict[str, Any] = {}
            for name, value in zip(names, values, strict=False):
                if name is not None and (name not in row or row[name] in ("", None)):
                    row[name] = value
            rows.append(row)
    return rows


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The raw per-step rows of a JSONL or CSV file (CSV if the name ends in ``.csv``)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(str(p), None, "file not found", "check the path of the training log")
    if p.suffix.lower() == ".csv":
        return _read_csv_rows(p)
    return _read_jsonl_rows(p)


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


def load_metrics(path: str | Path, fmt: str = "auto") -> MetricsLog:
    """Read a training log and map it onto canonical series; raises :class:`InputError` if unusable."""
    p = Path(path)
    rows = read_rows(p)
    if not rows:
        raise InputError(str(p), None, "the log has no rows", "point at a metrics JSONL or a wandb CSV export")
    keys: set[str] = set()
    for row in rows:
        keys.update(row)
    if fmt not in FORMATS:
        raise InputError(str(p), None, f"unknown format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    chosen = detect_format(keys) if fmt == "auto" else fmt
    if chosen is None:
        raise InputError(
            str(p),
            None,
            f"cannot recognise the log format; keys found: {_found_text(keys)}",
            f"the keys needed are — {_needed_text()}",
        )
    table = KEY_TABLES[chosen]
    present = {canon: key for canon, key in table.items() if key in keys}
    if not any(c in present for c in _USABLE):
        raise InputError(
            str(p),
            None,
            f"the {chosen} log has none of the keys a diagnosis needs; keys found: {_found_text(keys)}",
            f"the keys needed for {chosen} are {', '.join(NEEDED[chosen])}",
        )
    step_key = next((k for k in STEP_KEYS if k in keys), None)
    steps: list[int] = []
    for i, row in enumerate(rows):
        s = _number(row.get(step_key)) if step_key else None
        steps.append(int(s) if s is not None else (steps[-1] + 1 if steps else i))
    series: dict[str, list[float | None]] = {
        canon: [_number(row.get(key)) for row in rows] for canon, key in present.items()
    }
    _derive(series)
    return MetricsLog(path=str(p), format=chosen, steps=steps, series=series, rows=rows, keys=sorted(keys))


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
