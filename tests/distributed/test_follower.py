"""``tirl train --nproc 2`` through the real follower equals ``--nproc 1``.

Rank 1 is ``python -m tirl.distributed.follower``.

The run uses settings a follower could get wrong: ``generation.temperature=0.7`` (log-probs of
``softmax(logits / 0.7)``), a reference model (``algo.kl_coef`` > 0) and two mini-batches. Rank 0 rolls out
exactly as the one-process run does (same seeds), so the first step's update must be the same: its loss, its
gradient norm, its token statistics (entropy is taken at the temperature) and the weights it leaves.

Mutant check (done by hand when this test was written): making the follower train at temperature 1.0
(``dataclasses.replace`` of ``cfg.generation`` in :func:`tirl.distributed.follower.serve`) fails this test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model, with_sets

from tirl.cli import main
from tirl.trainer.logging import read_metrics

ONE_STEP = [
    # a random model writes void turns only: their penalty rows carry the signal
    *with_sets(TINY_TRAIN_ARGS, "filter.mode=penalize"),
    "--steps", "1",
    "--set", "generation.temperature=0.7",
    "--set", "algo.minibatches=2",
    "--set", "algo.lr=1e-3",
    "--set", "filter.void_penalty=1.0",
    # one episode at a time: the sampler's seeds come from one stream in request order, and that order must not
    # depend on how fast the envs answer (Ray env hosts answer at varying speed)
    "--set", "rollout.init_workers=1", "--set", "rollout.run_workers=1", "--set", "rollout.eval_workers=1",
]  # fmt: skip
COMPARED = ("train/loss", "train/grad_norm", "train/entropy", "train/kl", "train/is_ratio_max", "train/loss_tokens")


def run_once(model_dir: Path, run_dir: Path, *extra: str) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """One ``tirl train`` step; its metrics row and the weights of its checkpoint."""
    assert main(["train", "--model", str(model_dir), "--run-dir", str(run_dir), *ONE_STEP, *extra]) == 0
    (row,) = read_metrics(run_dir)
    weights: dict[str, torch.Tensor] = {}
    for f in sorted((run_dir / "checkpoints" / "step-1" / "model").glob("*.safetensors")):
        weights.update(load_file(str(f)))
    assert weights, "no checkpoint weights"
    return row, weights


def assert_same_step(one: tuple[dict, dict], two: tuple[dict, dict], start: dict[str, torch.Tensor]) -> None:
    """The same update in both runs: metrics to 1e-4 relative, weights and their change to 1e-4 / 1e-6."""
    (row1, w1), (row2, w2) = one, two
    assert row2["dist/world_size"] == 2 and row1["dist/world_size"] == 1
    assert row1["train/optimizer_steps"] == row2["train/optimizer_steps"] == 2
    for key in COMPARED:
        assert row2[key] == pytest.approx(row1[key], rel=1e-4, abs=1e-7), key
    assert w1.keys() == w2.keys()
    moved = 0.0
    for name, p in w1.items():
        torch.testing.assert_close(w2[name], p, rtol=1e-4, atol=1e-6)
        if name in start:
            moved = max(moved, float((p - start[name]).abs().max()))
    assert moved > 1e-5  # the step really changed the weights


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


@pytest.mark.slow
def test_nproc_2_through_the_real_follower_equals_nproc_1(model_dir: Path, tmp_path: Path) -> None:
    """Two tiny runs of one step each (about 10 s each on an idle 2-core machine)."""
    start = {}
    for f in model_dir.glob("*.safetensors"):
        start.update(load_file(str(f)))
    one = run_once(model_dir, tmp_path / "one")
    two = run_once(model_dir, tmp_path / "two", "--nproc", "2")
    assert (tmp_path / "two" / "ranks" / "rank-1.log").is_file()  # rank 1 was a follower process
    assert_same_step(one, two, start)
