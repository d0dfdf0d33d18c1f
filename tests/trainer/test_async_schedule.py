"""K=0 is the old alternation exactly; K=1 samples step s+1 before update s (scripted rollouts, tiny model)."""

from __future__ import annotations

import torch

from tirl.types import Trajectory


async def _reference_loop(trainer, steps: int) -> list[dict]:
    """The loop before asynchronous RL: one train_step after the other."""
    rows = []
    for step in range(1, steps + 1):
        metrics, _ = await trainer.train_step(step)
        rows.append(metrics)
    return rows


def _versions(trainer) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for line in (trainer.run_dir / "trajectories.jsonl").read_text().splitlines():
        t = Trajectory.from_dict(__import__("json").loads(line))
        out.setdefault(int(t.info["step"]), set()).add(t.policy_version)
    return out


async def test_k0_equals_the_old_loop_and_k1_samples_one_version_behind(make_trainer, tmp_path) -> None:
    torch.manual_seed(0)
    k0 = make_trainer("trainer.steps=3", "algo.kl_coef=0", run_dir=tmp_path / "k0")
    start = {n: p.detach().clone() for n, p in k0.model.state_dict().items()}  # the fixture's model is shared
    rows = await k0.run()
    after_k0 = {n: p.detach().clone() for n, p in k0.model.state_dict().items()}
    k0.model.load_state_dict(start)
    torch.manual_seed(0)
    ref = make_trainer("trainer.steps=3", "algo.kl_coef=0", run_dir=tmp_path / "ref")
    ref_rows = await _reference_loop(ref, 3)
    assert not any(k.startswith("async/") for r in rows for k in r)
    keys = ("train/loss", "train/grad_norm", "reward/mean", "policy/version", "filter/valid_trajectories")
    assert [[r[k] for k in keys] for r in rows] == [[r.get(k) for k in keys] for r in ref_rows]
    for n, p in ref.model.state_dict().items():
        assert torch.equal(p, after_k0[n]), n
    assert k0.policy_version == 3
    assert _versions(k0) == {1: {0}, 2: {1}, 3: {2}}  # on-policy: step s samples version s-1

    k0.model.load_state_dict(start)
    torch.manual_seed(0)
    k1 = make_trainer("trainer.steps=3", "algo.kl_coef=0", "rollout.max_staleness=1", run_dir=tmp_path / "k1")
    rows1 = await k1.run()
    assert [r["async/step_lag"] for r in rows1] == [0, 1, 1]
    assert [r["async/version_lag_max"] for r in rows1] == [0, 1, 1]
    assert _versions(k1) == {1: {0}, 2: {0}, 3: {1}}  # one step off: step s samples version s-2
    assert rows1[0]["train/loss"] == rows[0]["train/loss"]  # step 1 is the same in both
