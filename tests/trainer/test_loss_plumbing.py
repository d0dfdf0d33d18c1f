"""Every loss setting of ``[algo]`` reaches the loss the update computes (issue 16, item 8).

A mutation check found that hard-wiring ``clip_high=algo.clip_low``,
``dual_clip=None`` or ``kl_coef=0`` in ``update.loss_config`` failed no test.
Here each setting gets a non-default value distinct from every other one, and
the test reads the :class:`LossConfig` that ``policy_loss`` is actually called
with inside a real update; a trainer step with ``kl_coef > 0`` must log a
non-zero KL.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from trainer_fakes import ScriptedStrategy, make_cfg, task_fn

import tirl.trainer.update as update_mod
from tirl.algorithms.losses import LossConfig
from tirl.config import load_config
from tirl.models.chat_format import SimpleChatFormat

NON_DEFAULT = {
    "clip_low": 0.13,
    "clip_high": 0.37,
    "dual_clip": 4.5,
    "loss_agg": "seq_mean",
    "kl_coef": 0.21,
    "kl_estimator": "k3+",
}


def test_the_table_covers_every_loss_setting() -> None:
    names = {f.name for f in dataclasses.fields(LossConfig)}
    assert names == set(NON_DEFAULT), "a new LossConfig field needs a non-default value in NON_DEFAULT"
    defaults = LossConfig()
    for name, value in NON_DEFAULT.items():
        assert getattr(defaults, name) != value, name


@pytest.mark.parametrize("unset_dual", [False, True])
def test_every_setting_reaches_policy_loss_inside_the_update(tiny, monkeypatch, unset_dual: bool) -> None:
    values = dict(NON_DEFAULT, dual_clip=None) if unset_dual else dict(NON_DEFAULT)
    algo = load_config(None, [f"algo.{k}={v}" for k, v in values.items()] + ["algo.minibatches=1"]).algo
    seen: list[LossConfig] = []
    real = update_mod.policy_loss

    def spy(*args, **kwargs):
        seen.append(args[4])
        return real(*args, **kwargs)

    monkeypatch.setattr(update_mod, "policy_loss", spy)
    model, tok = tiny
    strategy = ScriptedStrategy(model, SimpleChatFormat(tok))
    batch = _collect(strategy)
    trajs = [t for g in batch.groups for t in g.trajectories][:4]
    up = update_mod.PolicyUpdater(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        algo=algo,
        pad_id=0,
        ref_model=copy.deepcopy(model),
    )
    up.update(trajs, torch.tensor([1.0, -1.0, 0.5, -0.5]), seed=0)
    assert seen, "policy_loss was never called"
    for cfg in seen:
        assert dataclasses.asdict(cfg) == values


def _collect(strategy: ScriptedStrategy):
    import asyncio

    from tirl.rollout.base import RolloutRequest

    return asyncio.run(strategy.collect(RolloutRequest(tasks=task_fn(1, 1), group_size=4)))


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "k3+"])
async def test_a_step_with_kl_coef_logs_nonzero_kl(tiny, tmp_path: Path, estimator: str) -> None:
    from tirl.trainer.learner import build_learner
    from tirl.trainer.trainer import Trainer

    model, tok = tiny
    ref = copy.deepcopy(model).requires_grad_(False)

    def build(kl_coef: float, name: str) -> Trainer:
        cfg = make_cfg("trainer.steps=1", f"algo.kl_coef={kl_coef}", f"algo.kl_estimator={estimator}")
        return Trainer(
            cfg=cfg,
            learner=build_learner(cfg, copy.deepcopy(model), tok, ref_model=ref),
            tokenizer=tok,
            strategy=ScriptedStrategy(model, SimpleChatFormat(tok)),
            tasks=task_fn,
            run_dir=tmp_path / name,
            progress=False,
        )

    (with_kl,) = await build(0.5, "kl").run()
    assert with_kl["train/optimizer_steps"] == 2  # the second mini-batch runs at moved weights: KL > 0
    assert abs(with_kl["train/kl"]) > 1e-9
    (without,) = await build(0.0, "nokl").run()
    assert without["train/kl"] == 0.0
