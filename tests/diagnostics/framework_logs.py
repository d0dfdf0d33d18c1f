"""Training logs written the way verl, SimpleTIR and wandb write them (the fixtures of the log readers).

Each writer follows the framework's own code, read with the code-search tools, not tirl's writer:

* ``write_verl_file_log`` mirrors ``verl/utils/tracking.py`` ``FileLogger.log``: one line per
  ``Tracking.log(data, step)`` call, ``{"step": step, "data": data}`` — ``json.dumps`` in v0.6.0
  (``NaN`` written as ``NaN``), ``orjson.dumps(..., OPT_SERIALIZE_NUMPY)`` on main (compact, ``NaN`` written
  as ``null``), and an ``elapsed_seconds`` field in the newest version (verl's
  ``tests/utils/test_tracking_file_logger.py``). ``verl/trainer/ppo/ray_trainer.py`` logs the validation
  metrics before training as their own line at step 0, then one line per step with
  ``training/global_step`` and ``training/epoch``.
* ``verl_step_metrics`` uses the key names of ``verl/trainer/ppo/metric_utils.py`` (``critic/score/mean``,
  ``response_length/max``, ``num_turns/mean``…), ``verl/workers/actor/dp_actor.py`` (``actor/entropy``,
  ``actor/pg_clipfrac``, ``actor/grad_norm``…) and the rollout-correction helper: ``mismatch/rollout_is_*``
  in v0.6.0 (``verl/trainer/ppo/mismatch_helper.py``), ``rollout_corr/rollout_is_*`` later
  (``verl/trainer/ppo/rollout_corr_helper.py``).
* ``simpletir_step_metrics`` uses ``recipe/simpletir/simpletir_ray_trainer.py`` of SimpleTIR
  (``env/void_turn_ratio = 1 - mean(void_turn_mask)`` over trajectories, ``env/num_turns/mean``,
  ``batch/effective_batch_size = min(valid prompt groups, train_batch_size)``) and its vendored
  ``verl/workers/actor/dp_actor.py`` (``actor/entropy_loss``; no rollout IS ratio). SimpleTIR logs to wandb.
* ``write_wandb_chart_csv`` writes a wandb line-chart "Export panel data → CSV": a ``Step`` column and per
  run ``RUN - METRIC``, ``RUN - METRIC__MIN``, ``RUN - METRIC__MAX`` (the layout shown in wandb/wandb issues
  #5349 and #6474 and in public scripts that read such exports). With ``bucket`` > 1 the chart is
  downsampled the way the UI draws it: one point per bucket at its first step, the bucket mean as the value
  and its extremes in ``__MIN``/``__MAX``.

The *numbers* come from the seeded generators of ``diag_synth`` (a symptom injected at a known step); only
the layout and key names are the frameworks'.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from diag_synth import BATCH

GROUP = 8  # rollout.n: trajectories per prompt


def verl_step_metrics(row: dict[str, Any], epoch: int = 0, rollout_prefix: str = "mismatch") -> dict[str, Any]:
    """One verl training step's metrics from a ``diag_synth`` row (``rollout_prefix``: mismatch, rollout_corr)."""
    step = row["step"]
    nan = float("nan")

    def v(key: str) -> float:
        x = row.get(key)
        return nan if x is None else float(x)

    return {
        "training/global_step": step,
        "training/epoch": epoch,
        "actor/entropy": v("train/entropy"),
        "actor/pg_loss": v("train/loss"),
        "actor/pg_clipfrac": v("train/clip_frac"),
        "actor/ppo_kl": 0.001,
        "actor/pg_clipfrac_lower": 0.0,
        "actor/grad_norm": v("train/grad_norm"),
        "actor/lr": 1e-6,
        "critic/score/mean": v("reward/mean"),
        "critic/rewards/mean": v("reward/mean"),
        "response_length/mean": v("rollout/mean_seq_len"),
        "response_length/max": v("rollout/max_seq_len"),
        "response_length/min": 12.0,
        "response_length/clip_ratio": 0.0,
        "prompt_length/mean": 180.0,
        "num_turns/min": 2,
        "num_turns/max": 6,
        "num_turns/mean": v("rollout/turns_mean"),
        f"{rollout_prefix}/rollout_is_mean": v("train/is_ratio_mean"),
        f"{rollout_prefix}/rollout_is_max": v("train/is_ratio_max"),
        f"{rollout_prefix}/rollout_is_min": v("train/is_ratio_min"),
        f"{rollout_prefix}/rollout_is_std": 0.05,
        f"{rollout_prefix}/rollout_is_eff_sample_size": 0.97,
        "timing_s/gen": 12.5,
        "timing_s/step": v("time/step_s"),
    }


def write_verl_file_log(path: Path, rows: list[dict[str, Any]], version: str = "0.6.0") -> Path:
    """A verl ``file`` logger JSONL (``version`` ``0.6.0``: json, mismatch/; ``main``: orjson-like, rollout_corr/)."""
    prefix = "mismatch" if version == "0.6.0" else "rollout_corr"
    lines = [{"step": 0, "data": {"val-core/gsm8k/reward/mean@1": 0.41}}]  # validation before training
    lines += [{"step": r["step"], "data": verl_step_metrics(r, rollout_prefix=prefix)} for r in rows]
    with path.open("w", encoding="utf-8") as fh:
        for i, line in enumerate(lines):
            if version == "0.6.0":
                fh.write(json.dumps(line) + "\n")  # NaN stays NaN
            else:
                data = {k: (None if isinstance(x, float) and math.isnan(x) else x) for k, x in line["data"].items()}
                out = {"step": line["step"], "elapsed_seconds": round(30.0 * i, 3), "data": data}
                fh.write(json.dumps(out, separators=(",", ":")) + "\n")
    return path


def simpletir_step_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """One SimpleTIR step's wandb metrics from a ``diag_synth`` tirl row."""
    valid, void = row.get("filter/valid_trajectories"), row.get("filter/void_trajectories")
    ratio = None if valid is None or void is None else void / (valid + void)
    return {
        "actor/entropy_loss": row.get("train/entropy"),
        "actor/pg_loss": row.get("train/loss"),
        "actor/pg_clipfrac": row.get("train/clip_frac"),
        "actor/ppo_kl": 0.001,
        "actor/grad_norm": row.get("train/grad_norm"),
        "critic/score/mean": row.get("reward/mean"),
        "response_length/mean": row.get("rollout/mean_seq_len"),
        "response_length/max": row.get("rollout/max_seq_len"),
        "env/num_turns/mean": row.get("rollout/turns_mean"),
        "env/num_turns/max": 5.0,
        "env/finish_ratio": 1.0,
        "env/void_turn_ratio": ratio,
        # prompt groups kept by rejection sampling, capped at train_batch_size: not a trajectory count
        "batch/effective_batch_size": BATCH // GROUP,
        "batch/solve_all": 1,
    }


def write_wandb_chart_csv(
    path: Path, metric: str, runs: dict[str, list[tuple[int, float | None]]], bucket: int = 1
) -> Path:
    """One chart's CSV export: ``Step`` then ``RUN - METRIC`` / ``__MIN`` / ``__MAX`` per run."""
    header = ["Step"]
    for run in runs:
        header += [f"{run} - {metric}", f"{run} - {metric}__MIN", f"{run} - {metric}__MAX"]
    table: dict[int, list[str]] = {}
    for k, (_, points) in enumerate(runs.items()):
        for start in range(0, len(points), bucket):
            chunk = [(s, x) for s, x in points[start : start + bucket] if x is not None]
            if not chunk:
                continue
            xs = [x for _, x in chunk]
            cells = table.setdefault(chunk[0][0], [""] * (3 * len(runs)))
            cells[3 * k : 3 * k + 3] = [repr(sum(xs) / len(xs)), repr(min(xs)), repr(max(xs))]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for step in sorted(table):
            w.writerow([step, *table[step]])
    return path


def chart_exports(tmp: Path, runs: dict[str, list[dict[str, Any]]], metrics: list[str], bucket: int = 1) -> list[Path]:
    """One chart export per metric, each holding every run (SimpleTIR-style metric rows with a ``step``)."""
    paths = []
    for i, metric in enumerate(metrics):
        series = {run: [(r["step"], r.get(metric)) for r in rows] for run, rows in runs.items()}
        paths.append(write_wandb_chart_csv(tmp / f"wandb_export_{i}.csv", metric, series, bucket))
    return paths


def trl_step_metrics(row: dict[str, Any], plugin: bool = True) -> dict[str, Any]:
    """One TRL ``GRPOTrainer.log`` payload (trl/trainer/grpo_trainer.py, 1.16) from a ``diag_synth`` tirl row.

    ``sampling/importance_sampling_ratio/*`` is logged with ``vllm_importance_sampling_correction``;
    ``plugin``: tirl's ``VoidFilteredGRPOTrainer`` adds ``void/trajectories`` and ``void/ratio``.
    """
    valid, void = row.get("filter/valid_trajectories"), row.get("filter/void_trajectories")
    out: dict[str, Any] = {
        "loss": row.get("train/loss"),
        "grad_norm": row.get("train/grad_norm"),
        "learning_rate": 1e-6,
        "num_tokens": 1000.0 * row["step"],
        "completions/mean_length": row.get("rollout/mean_seq_len"),
        "completions/min_length": 12.0,
        "completions/max_length": row.get("rollout/max_seq_len"),
        "completions/clipped_ratio": 0.0,
        "rewards/correct/mean": row.get("reward/mean"),
        "rewards/correct/std": 0.4,
        "reward": row.get("reward/mean"),
        "reward_std": 0.4,
        "frac_reward_zero_std": 0.1,
        "sampling/sampling_logp_difference/mean": 0.01,
        "sampling/importance_sampling_ratio/min": row.get("train/is_ratio_min"),
        "sampling/importance_sampling_ratio/mean": row.get("train/is_ratio_mean"),
        "sampling/importance_sampling_ratio/max": row.get("train/is_ratio_max"),
        "kl": 0.0,
        "entropy": row.get("train/entropy"),
        "clip_ratio/low_mean": 0.0,
        "clip_ratio/high_mean": 0.0,
        "clip_ratio/region_mean": row.get("train/clip_frac"),
    }
    if plugin and valid is not None and void is not None:
        out["void/trajectories"] = float(void)
        out["void/ratio"] = void / (valid + void) if valid + void else 0.0
    return out


def write_trl_trainer_state(path: Path, rows: list[dict[str, Any]], plugin: bool = True) -> Path:
    """A ``trainer_state.json`` as transformers writes it: ``Trainer.log`` appends ``{**logs, "epoch", "step"}``
    to ``state.log_history`` (TRL's metrics averaged over ``logging_steps``, NaN-free values or None), the
    end-of-training summary row follows, and ``TrainerState.save_to_json`` dumps the dataclass with
    ``indent=2, sort_keys=True``.
    """
    history = [{**trl_step_metrics(r, plugin), "epoch": r["step"] / len(rows), "step": r["step"]} for r in rows]
    history.append({"epoch": 1.0, "step": rows[-1]["step"], "total_flos": 0.0, "train_loss": 0.1,
                    "train_runtime": 99.0, "train_samples_per_second": 1.0, "train_steps_per_second": 0.1})  # fmt: skip
    state = {"best_metric": None, "epoch": 1.0, "global_step": rows[-1]["step"], "log_history": history,
             "logging_steps": 1, "max_steps": rows[-1]["step"], "trial_name": None}  # fmt: skip
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def skyrl_step_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """One SkyRL ``tracker.log(all_metrics, step)`` payload (skyrl/train/trainer.py) from a ``diag_synth`` row:
    ``policy/`` + the worker's reduced status (``loss_metrics/`` + the off-policy ``is_ratio_*``), the
    generator's ``generate/*`` and ``reward/*``, and ``trainer/global_step``.
    """
    return {
        "trainer/epoch": 0,
        "trainer/global_step": row["step"],
        "policy/policy_loss": row.get("train/loss"),
        "policy/policy_entropy": row.get("train/entropy"),
        "policy/grad_norm": row.get("train/grad_norm"),
        "policy/policy_lr": 1e-6,
        "policy/loss_metrics/clip_ratio": row.get("train/clip_frac"),
        "policy/loss_metrics/is_ratio_mean": row.get("train/is_ratio_mean"),
        "policy/loss_metrics/is_ratio_max": row.get("train/is_ratio_max"),
        "policy/loss_metrics/is_ratio_min": row.get("train/is_ratio_min"),
        "generate/min_num_tokens": 12,
        "generate/max_num_tokens": row.get("rollout/max_seq_len"),
        "generate/avg_num_tokens": row.get("rollout/mean_seq_len"),
        "reward/avg_raw_reward": row.get("reward/mean"),
        "reward/avg_pass_at_8": 0.6,
    }
