"""What the ``void/*`` attribution metrics (tirl.trainer.attribution) cost per update, on the main job's model.

One process, the shipped ``tiny-chain`` model, the default config (``algo.minibatches=2``, the default
workers), a synthetic step the size of the main job's (64 rows of 200-512 tokens, loss on alternate 40-token
runs, every ``--void-every``-th row void). For each ``--reps``: the update with attribution off
(``AttributionRows(attributed=0)``: no row attributed, nothing withheld) and on, alternating, so machine load
hits both alike; under ``drop`` the void rows are withheld (scored without a gradient) instead of trained.
Besides the wall time of each update, the seconds spent inside the attribution code itself are counted (a
figure that load inflates far less than the difference of two noisy update times).

    python benchmarks/bench_attribution.py [--reps 3] [--void-every 10] [--json]

Not covered: a GPU, and the real rollouts of a run (the token view is synthetic; its sizes are the main
job's: ``rollout/mean_seq_len`` ~310, ``train/loss_tokens`` ~7,700 in a 3-step ``tirl train``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch

import tirl
import tirl.trainer.attribution as attribution
import tirl.trainer.update as update
from tirl.config import load_config
from tirl.trainer.learner import build_learner
from tirl.types import Trajectory

SPENT = {"s": 0.0}


def _timed(fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT["s"] += time.perf_counter() - t0

    return wrapper


def _step(void_every: int) -> tuple[list[Trajectory], torch.Tensor]:
    rng = random.Random(0)
    trajs = []
    for i in range(64):
        n = rng.randint(200, 512)
        mask = [0] * 60 + [1 if (k // 40) % 2 == 0 else 0 for k in range(n - 60)]
        t = Trajectory(
            id=str(i),
            messages=[],
            token_ids=[rng.randrange(5, 100) for _ in range(n)],
            loss_mask=mask,
            logprobs=[(-rng.expovariate(1.0) if m else 0.0) for m in mask],
            reward=float(i % 2),
        )
        t.void = i % void_every == 0
        trajs.append(t)
    return trajs, torch.tensor([(-1.0) ** i for i in range(64)])


def main() -> None:
    """Print the per-update figures (``--json``: one JSON line)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--void-every", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(tirl.__file__).parent / "assets" / "tiny-chain"
    cfg = load_config(None, [])
    torch.set_num_threads(cfg.trainer.threads)
    model = AutoModelForCausalLM.from_pretrained(path).float()
    learner = build_learner(cfg, model, AutoTokenizer.from_pretrained(path))
    update.PolicyUpdater._attribute = _timed(update.PolicyUpdater._attribute)  # type: ignore[method-assign]
    attribution.WithheldScorer.__init__ = _timed(attribution.WithheldScorer.__init__)  # type: ignore[method-assign]
    attribution.WithheldScorer.attribute = _timed(attribution.WithheldScorer.attribute)  # type: ignore[method-assign]
    trajs, adv = _step(args.void_every)
    kept = [i for i, t in enumerate(trajs) if not t.void]
    back = [t for t in trajs if t.void]
    out: dict[str, Any] = {"rows": len(trajs), "void_rows": len(back), "threads": torch.get_num_threads()}
    for mode in ("off", "drop"):
        rows, advs = (trajs, adv) if mode == "off" else ([trajs[i] for i in kept], adv[kept])
        on_rows = attribution.AttributionRows() if mode == "off" else attribution.AttributionRows(
            len(rows), back, torch.full((len(back),), -0.5)
        )  # fmt: skip
        wall: dict[str, list[float]] = {"off": [], "on": []}
        inside: list[float] = []
        for rep in range(args.reps):
            for which in ("off", "on"):
                SPENT["s"] = 0.0
                t0 = time.perf_counter()
                attr = on_rows if which == "on" else attribution.AttributionRows(attributed=0)
                learner.updater.update(rows, advs, seed=rep, attribution=attr)
                wall[which].append(time.perf_counter() - t0)
                if which == "on":
                    inside.append(SPENT["s"])
        med_off, med_on = statistics.median(wall["off"]), statistics.median(wall["on"])
        out[mode] = {
            "update_s_without": [round(x, 2) for x in wall["off"]],
            "update_s_with": [round(x, 2) for x in wall["on"]],
            "attribution_s": [round(x, 3) for x in inside],
            "attribution_share": round(statistics.median(inside) / med_on, 4),
            "wall_overhead": round(med_on / med_off - 1, 4),
        }
    learner.updater.close()
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
