"""A real `tirl train` run (tiny random model, 2 steps) logs the ``void/*`` attribution keys everywhere.

The tiny random model writes only void turns, so under ``filter.mode=off`` every row is void: the token and
trajectory shares are 1, ``void/min_logprob_valid`` is None (no valid row: null in metrics.jsonl, no
TensorBoard point), and the keys are in metrics.jsonl and in the TensorBoard event files.
"""

from __future__ import annotations

import copy
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model, tirl_in_process

from tirl.trainer.logging import read_metrics

KEYS = (
    "void/share_trajectories",
    "void/share_tokens",
    "void/share_lowprob_tokens",
    "void/share_ratio_outliers",
    "void/share_ratio_dual_clip",
    "void/share_grad_norm",
    "void/min_logprob_void",
    "void/min_logprob_valid",
)


def test_two_step_run_logs_the_attribution_keys_in_jsonl_and_tensorboard(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "tiny")
    run = tmp_path / "run"
    res = tirl_in_process("train", "--model", str(model), "--steps", "2", "--run-dir", str(run), *TINY_TRAIN_ARGS)
    assert res.returncode == 0, res.stderr
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert set(KEYS) <= set(row), set(KEYS) - set(row)
        assert row["void/share_trajectories"] == 1.0 and row["void/share_tokens"] == 1.0  # every row is void
        assert row["void/min_logprob_valid"] is None  # no valid row: null, not 0
        assert row["void/min_logprob_void"] < 0
    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"void/share_trajectories", "void/share_tokens", "void/min_logprob_void"} <= tags
    assert "void/min_logprob_valid" not in tags  # None is not written as a point
    assert [e.step for e in acc.Scalars("void/share_tokens")] == [1, 2]


async def test_every_filter_mode_attributes_the_void_rows_before_they_leave(make_trainer, tmp_path: Path) -> None:
    """The same scripted step (2 of 8 trajectories void) under off, mask, drop and penalize: the void rows'
    share of rows and tokens and their lowest log-prob are the same whether they stay, are masked, dropped or
    come back as penalty copies (which are not counted twice)."""
    seen: dict[str, dict] = {}
    start: dict | None = None
    for mode in ("off", "mask", "drop", "penalize"):
        trainer = make_trainer(
            "trainer.steps=1", f"filter.mode={mode}", "filter.void_penalty=0.5", run_dir=tmp_path / mode
        )
        if start is None:
            start = copy.deepcopy(trainer.model.state_dict())
        trainer.model.load_state_dict(start)  # the same policy (and so the same sampled log-probs) for each mode
        rows = await trainer.run()
        assert rows[0]["filter/void_trajectories"] == 2, mode
        seen[mode] = rows[0]
    for mode, row in seen.items():
        assert row["void/share_trajectories"] == 0.25, mode
        assert row["void/share_tokens"] == seen["off"]["void/share_tokens"], mode
        assert 0 < row["void/share_tokens"] < 1
        assert row["void/min_logprob_void"] == seen["off"]["void/min_logprob_void"], mode
        assert row["void/min_logprob_valid"] == seen["off"]["void/min_logprob_valid"], mode
    assert seen["drop"]["void/share_grad_norm"] > 0  # a withheld row's off advantage is not zero here
