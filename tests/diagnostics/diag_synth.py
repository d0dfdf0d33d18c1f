"""Realistic noisy training logs and pipeline traces from a seeded RNG (healthy, or with one symptom injected).

The healthy log imitates a GRPO run of a tool-using model: 64 trajectories a
step, a void rate drifting from ~6 % to ~3 % (binomial noise), an entropy sliding 0.9 -> 0.6 while the
reward rises 0.2 -> 0.65, a KL to the reference rising 0.001 -> 0.02, log-normal
IS-ratio extremes with occasional heavy-tail bumps, grad-norm bumps *without*
an IS spike, lone long trajectories *without* an IS spike, and a few skipped
steps that log nulls. Injections change only the numbers the symptom is
about.
"""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path
from typing import Any

BATCH = 64
DRIFT_RISE = 0.2
DRIFT_STEPS = 30
TIRL_KEYS = (
    "rollout/trajectories",
    "filter/valid_trajectories",
    "filter/void_trajectories",
    "filter/resampled",
    "train/is_ratio_min",
    "train/is_ratio_max",
    "train/is_ratio_mean",
    "train/clip_frac",
    "train/grad_norm",
    "train/loss",
    "train/entropy",
    "rollout/max_seq_len",
    "rollout/mean_seq_len",
    "rollout/turns_mean",
    "reward/mean",
    "time/step_s",
    "train/kl",
)


def _binom(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


FAILED_ENDS = ("init_failed", "timeout", "error", "eval_failed", "cancelled")


def rollout_counts(
    rng: random.Random | None, faults: float = 0.0, eval_failed: int = 0, eval_broken: int = 0
) -> dict[str, Any]:
    """The fault keys tirl's trainer writes for a step of ``BATCH`` episodes (``RolloutStats.metrics``, the
    failure ``rollout/termination/*`` and ``rollout/eval_failure/*`` of ``rollout_metrics``).

    ``BATCH`` episodes ran well; the failed ones come on top. ``faults``: the probability that an episode fails,
    drawn from ``rng`` (half ran past the runner's limit,
    half failed its evaluation after a timed-out retry); ``eval_failed`` more episodes fail evaluation with two
    timed-out attempts each; ``eval_broken`` episodes are scored 0 by a broken evaluation (``timed_out``).
    """
    run_to = _binom(rng, BATCH, faults / 2) if rng and faults else 0
    ev_f = (_binom(rng, BATCH, faults / 2) if rng and faults else 0) + eval_failed
    row: dict[str, Any] = {
        "rollout/failed": run_to + ev_f,
        **{f"rollout/termination/{why}": 0.0 for why in FAILED_ENDS},
        "rollout/termination/timeout": float(run_to),
        "rollout/termination/eval_failed": float(ev_f),
        "rollout/init_attempts": float(BATCH + run_to + ev_f),
        "rollout/init_retries": 0.0,
        "rollout/init_timeouts": 0.0,
        "rollout/run_attempts": float(BATCH + run_to + ev_f),
        "rollout/run_timeouts": float(run_to),
        "rollout/eval_attempts": float(BATCH + 2 * ev_f),
        "rollout/eval_retries": float(ev_f),
        "rollout/eval_timeouts": float(2 * ev_f),
    }
    if eval_broken:
        row["rollout/eval_failure/timed_out"] = float(eval_broken)
    return row


def tirl_log(
    n: int = 200,
    seed: int = 0,
    inject: str | None = None,
    at: tuple[int, ...] = (120,),
    is_sigma: float = 0.1,
    tail: float = 0.0,
    void_p: tuple[float, float] = (0.06, 0.03),
    faults: float = 0.0,
) -> list[dict[str, Any]]:
    """Per-step rows with tirl's keys; ``inject`` in void_leak, late_filter, detector_inactive, empty_batch,
    void_drift, rollout_faults.

    ``is_sigma`` is the log-scale noise of the IS-ratio extremes; ``tail`` the probability of an extra
    ``3 * is_sigma`` Gaussian kick on ``is_max`` (heavier tails than the default log-normal). The void
    probability goes linearly from ``void_p[0]`` to ``void_p[1]``; ``void_drift`` adds a ramp of
    +``DRIFT_RISE`` over ``DRIFT_STEPS`` steps from ``at[0]`` on, which then stays. The rollout's fault keys
    (:func:`rollout_counts`) come from a second RNG, so the other series do not depend on ``faults``: failed
    episodes are added to the trajectories sampled (the valid and void counts stay as they are).
    ``rollout_faults``: from ``at[0]`` on, 5 steps in which 20 episodes failed evaluation and 4 more were scored
    0 by a broken one.
    """
    rng = random.Random(seed)
    fault_rng = random.Random(seed * 7919 + 17) if faults else None
    rows: list[dict[str, Any]] = []
    skipped = set(rng.sample(range(5, n), min(3, max(0, n - 5))))
    for step in range(n):
        frac = step / n
        p = void_p[0] + (void_p[1] - void_p[0]) * frac
        if inject == "void_drift" and step >= at[0]:
            p += DRIFT_RISE * min(1.0, (step - at[0]) / DRIFT_STEPS)
        void = _binom(rng, BATCH, p)
        if inject == "detector_inactive":
            void = 0
        valid = BATCH - void
        kick = rng.gauss(0, 3 * is_sigma) if tail and rng.random() < tail else 0.0
        is_max = math.exp(rng.gauss(math.log(1.5), is_sigma) + kick)
        if rng.random() < 0.04:
            is_max *= 1.35  # heavy tail: ordinary, not a spike
        is_min = math.exp(rng.gauss(math.log(0.6), is_sigma))
        grad = math.exp(rng.gauss(math.log(0.6), 0.2))
        if rng.random() < 0.03:
            grad *= rng.uniform(3, 6)  # a grad-norm bump without an IS spike: noise
        max_len = int(rng.gauss(1400 + 300 * frac, 90))
        if rng.random() < 0.02:
            max_len = int(max_len * 1.6)  # a lone long trajectory without an IS spike
        bad = inject == "rollout_faults" and at[0] <= step < at[0] + 5
        counts = rollout_counts(fault_rng, faults, 20 if bad else 0, 4 if bad else 0)
        row: dict[str, Any] = {
            "step": step,
            "rollout/trajectories": BATCH + counts["rollout/failed"],
            "filter/valid_trajectories": valid,
            "filter/void_trajectories": void,
            "filter/resampled": 0,
            "train/is_ratio_min": is_min,
            "train/is_ratio_max": is_max,
            "train/is_ratio_mean": math.exp(rng.gauss(0, 0.005)),
            "train/clip_frac": abs(rng.gauss(0.02, 0.006)),
            "train/grad_norm": grad,
            "train/loss": rng.gauss(0.0, 0.02),
            "train/entropy": 0.9 - 0.3 * frac + rng.gauss(0, 0.02),
            "rollout/max_seq_len": max_len,
            "rollout/mean_seq_len": int(max_len * 0.45 + rng.gauss(0, 20)),
            "rollout/turns_mean": 2.6 + rng.gauss(0, 0.15),
            "reward/mean": 0.2 + 0.45 * frac + rng.gauss(0, 0.04),
            "time/step_s": 30 + rng.gauss(0, 2),
            # KL to the reference: rises slowly from ~0.001 (no RNG draw, so the other series stay as they were)
            "train/kl": 0.001 + 0.02 * frac + 0.002 * abs(math.sin(1.7 * step)),
            **counts,
        }
        if step in at:
            if inject == "void_leak":
                row["train/is_ratio_max"] = is_max * 22
                row["train/is_ratio_min"] = is_min * 0.1
                row["rollout/max_seq_len"] = 4096
                row["train/grad_norm"] = grad * 12
            elif inject == "late_filter":
                row["filter/void_trajectories"] = void + 18
                row["filter/valid_trajectories"] = valid - 18
                row["train/is_ratio_max"] = is_max * 15
                row["train/grad_norm"] = grad * 9
            elif inject == "empty_batch":
                row.update(dict.fromkeys(TIRL_KEYS[4:12]))  # no update: nulls
                row["filter/valid_trajectories"] = 0
                row["filter/void_trajectories"] = BATCH
                row["filter/resampled"] = 2
        if step in skipped and step not in at:
            row.update(dict.fromkeys(TIRL_KEYS))
        rows.append(row)
    return rows


VERL_MAP = {
    "train/grad_norm": "actor/grad_norm",
    "train/clip_frac": "actor/pg_clipfrac",
    "train/entropy": "actor/entropy",
    "train/kl": "actor/kl_loss",
    "rollout/max_seq_len": "response_length/max",
    "rollout/mean_seq_len": "response_length/mean",
    "train/is_ratio_max": "rollout_corr/rollout_is_max",
    "train/is_ratio_min": "rollout_corr/rollout_is_min",
    "train/is_ratio_mean": "rollout_corr/rollout_is_mean",
    "reward/mean": "critic/score/mean",
}


def as_verl(rows: list[dict[str, Any]], simpletir: bool = False) -> list[dict[str, Any]]:
    """The same run with verl's (or SimpleTIR's) key names."""
    out = []
    for row in rows:
        new: dict[str, Any] = {"training/global_step": row["step"]}
        for src, dst in VERL_MAP.items():
            new[dst] = row.get(src)
        if simpletir:
            v, d = row.get("filter/valid_trajectories"), row.get("filter/void_trajectories")
            new["batch/effective_batch_size"] = v
            new["env/void_turn_ratio"] = None if v is None or d is None else d / (v + d)
        out.append(new)
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_wandb_csv(path: Path, rows: list[dict[str, Any]], run: str = "grpo-7b") -> Path:
    """A wandb "export CSV": a Step column, "<run> - <key>" headers, __MIN/__MAX aggregate columns."""
    keys = [k for k in rows[0] if k != "training/global_step"]
    header = ["Step"]
    for k in keys:
        header += [f"{run} - {k}", f"{run} - {k}__MIN", f"{run} - {k}__MAX"]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for r in rows:
            line = [r["training/global_step"]]
            for k in keys:
                v = r.get(k)
                cell = "" if v is None else v
                line += [cell, cell, cell]
            w.writerow(line)
    return path


CAPS = {"init": 64, "run": 32, "eval": 32}  # the request, run_queue_size, eval_queue_size
WORKERS = {"init": 4, "run": 16, "eval": 4}


def trace(kind: str, seed: int = 0, n: int = 400, dt: float = 0.25, caps: bool = True) -> list[dict[str, Any]]:
    """Pipeline snapshots for a bottleneck ``kind`` (a verdict name), with noise and cumulative counts.

    ``healthy_busy`` is the case of issue 15: a few items in every queue, none rising, the generator 93 %
    busy. ``caps=False`` leaves out the capacities and pool sizes, as traces written before tirl recorded
    them (and the batch schedules' traces).
    """
    rng = random.Random(seed)
    rows = []
    done = {"init": 0, "run": 0, "eval": 0}

    def noisy(mean: float) -> int:
        return max(0, round(rng.gauss(mean, max(0.6, 0.15 * mean))))

    for i in range(n):
        t = round(i * dt + (30.0 if i >= n // 2 else 0.0), 3)  # an update gap between two collects
        frac = i / n
        init_b, run_b, eval_b = 4, 16, 4
        init_bl = run_bl = 0
        util = min(1.0, max(0.0, rng.gauss(0.93, 0.03)))
        if kind == "healthy":
            iq, rq, eq = noisy(0.3), noisy(0.6), noisy(0.2)
        elif kind == "healthy_busy":
            iq, rq, eq = noisy(3), noisy(3), noisy(3)
        elif kind == "initializer":
            iq, rq, eq = noisy(24), noisy(0.3), noisy(0.2)
            run_b, util = noisy(5), rng.uniform(0.3, 0.5)
        elif kind == "runner":
            # run_queue full (size 32), initializers blocked: backpressure, the design working
            iq, rq, eq = noisy(20), min(32, noisy(30)), noisy(0.3)
            init_bl = 4 if rng.random() < 0.8 else 3
        elif kind == "evaluator":
            iq, rq, eq = noisy(0.5), noisy(1.0), noisy(2 + 26 * frac)
        elif kind == "overall":
            iq, rq, eq = noisy(30), noisy(20), noisy(16)
        elif kind == "starved":
            iq, rq, eq = noisy(0.1), noisy(0.2), noisy(0.1)
            run_b, util = noisy(2), max(0.0, rng.gauss(0.2, 0.05))
        elif kind == "overall_rising":  # every queue fills up over the trace, the generator 93 % busy
            iq, rq, eq = noisy(2 + 40 * frac), min(32, noisy(2 + 40 * frac)), min(32, noisy(2 + 40 * frac))
            run_bl, init_bl = (12, 4) if frac > 0.7 else (0, 0)
        elif kind == "evaluator_backpressure":
            iq, rq, eq = noisy(20), min(32, noisy(30)), min(32, noisy(31))
            run_bl, init_bl = 12, 4
        else:
            raise ValueError(kind)
        done["init"] += rng.randint(0, 2)
        done["run"] += rng.randint(0, 2)
        done["eval"] += rng.randint(0, 2)
        row: dict[str, Any] = {f"{s}_queue_cap": c for s, c in CAPS.items()} if caps else {}
        row.update({f"{s}_workers": c for s, c in WORKERS.items()} if caps else {})
        rows.append(
            {
                **row,
                "t": t,
                "step": 0 if i < n // 2 else 1,
                "strategy": "pipeline",
                "init_queue": iq,
                "run_queue": rq,
                "eval_queue": eq,
                "gpu_util": round(util, 4),
                "init_busy": init_b,
                "run_busy": run_b,
                "eval_busy": eval_b,
                "init_blocked": init_bl,
                "run_blocked": run_bl,
                "init_done": done["init"],
                "run_done": done["run"],
                "eval_done": done["eval"],
                "live_envs": 20,
            }
        )
    return rows


# The runs of issue 10 (the built-in job, 30 steps, 8 prompts x 8 episodes, resampling of emptied groups),
# mirrored from the numbers measured there; the row keys are those tirl's trainer writes
# (src/tirl/trainer/trainer.py rollout_metrics, src/tirl/filters/void_turn.py FilterStats.metrics).
ISSUE10_KINDS = ("drop_collapse", "drop_slow", "off_spike", "mask_wander")


def _void_share_issue10(kind: str, step: int) -> float:
    if kind == "drop_collapse":  # seed 1 at lr 1e-4: 14 -> 23 -> 143 of 152 void between steps 19 and 25
        if step < 19:
            return 0.08 + 0.1 * step / 19
        return {19: 0.2, 20: 0.22, 21: 0.25, 22: 0.27, 23: 0.55, 24: 0.8}.get(step, 0.93)
    if kind == "drop_slow":  # seed 0 at lr 1e-4: void share 9 % -> 26 %, held out 0.825 -> 0.800
        return 0.09 + 0.17 * step / 29
    if kind == "off_spike":  # lr 3e-4, filter off: void share ~10 % rising to 18 %
        return 0.1 + 0.08 * step / 29
    if kind == "mask_wander":  # a share that moves around and ends lower: 17 % falling to 8 %
        return 0.17 - 0.09 * step / 29 + 0.03 * math.sin(step / 2.5)
    raise ValueError(kind)


def issue10_run(kind: str, seed: int = 0, steps: int = 30, cap: int = 1024) -> list[dict[str, Any]]:
    """A 30-step tirl metrics log shaped like one of the runs measured in issue 10 (``ISSUE10_KINDS``).

    ``drop_collapse``: void share creeping up, then 143 of 152 trajectories void from step 25 with resampling at
    its limit, an IS-ratio spike with the void jump at step 23, reward to 0. ``drop_slow``: 9 % -> 26 %.
    ``off_spike``: noisy IS ratios, a spike of 37 at step 5 where the longest trajectory hit the length cap
    (``cap``) and the valid count did not drop. ``mask_wander``: a share that moves around and falls.
    """
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for step in range(1, steps + 1):
        share = _void_share_issue10(kind, step)
        sampled = BATCH
        void = _binom(rng, BATCH, share)
        resampled = 0
        if kind.startswith("drop") and share > 0.5:  # groups emptied: resampling at its limit
            resampled = 88
            sampled += resampled
            void += _binom(rng, resampled, share)
        valid = sampled - void
        noisy = kind == "off_spike"
        is_max = math.exp(rng.gauss(math.log(2.0 if noisy else 1.4), 0.35 if noisy else 0.08))
        max_len = min(cap, int(rng.gauss(700, 90)))
        if noisy and rng.random() < 0.2:
            max_len = cap  # an off run hits the cap now and then
        if kind == "off_spike" and step == 5:
            is_max, max_len = 37.0, cap
        if kind == "drop_collapse" and step == 23:
            is_max = 9.5
        if kind == "drop_collapse" and step > 23:
            is_max = math.exp(rng.gauss(math.log(2.5), 0.3))
        reward = 0.8 * (1 - share) + rng.gauss(0, 0.03)
        if kind == "drop_collapse" and step >= 25:
            reward = max(0.0, rng.gauss(0.02, 0.02))
        rows.append(
            {
                "step": step,
                "rollout/trajectories": sampled,
                "filter/valid_trajectories": valid if kind != "off_spike" else sampled - void,
                "filter/void_trajectories": void,
                "filter/void_ratio": void / sampled,
                "filter/resampled": resampled,
                "train/is_ratio_min": math.exp(rng.gauss(math.log(0.7), 0.08)),
                "train/is_ratio_max": is_max,
                "train/is_ratio_mean": 1.0,
                "train/clip_frac": abs(rng.gauss(0.02, 0.006)),
                "train/grad_norm": math.exp(rng.gauss(math.log(0.5), 0.2)),
                "rollout/max_seq_len": max_len,
                "rollout/mean_seq_len": int(max_len * 0.5),
                "rollout/turns_mean": 2.0 + rng.gauss(0, 0.05),
                "reward/mean": reward,
            }
        )
    return rows
