import json
import logging

import pytest
import torch
from trainer_fakes import ANSWER, CORRECT, VOID, Reply, TerminationReason

from tirl.trainer.logging import REQUIRED_METRICS, read_metrics


async def test_step_drops_void_before_advantages_and_logs_required_metrics(make_trainer) -> None:
    trainer = make_trainer()
    seen = {}
    real_update = trainer.updater.update

    def spy(trajs, adv, *, seed, **kw):
        seen["ids"] = [t.id for t in trajs]
        seen["adv"] = adv.clone()
        return real_update(trajs, adv, seed=seed, **kw)

    trainer.updater.update = spy
    rows = await trainer.run()
    assert [r["step"] for r in rows] == [1, 2]
    for key in REQUIRED_METRICS:
        assert key in rows[0], key
    r = rows[0]
    assert r["rollout/trajectories"] == 8
    assert r["filter/void_trajectories"] == 2 and r["filter/valid_trajectories"] == 6
    assert r["filter/resampled"] == 0
    # void trajectories (index 3 of each group) never reach the update
    assert seen["ids"] and not any(i.endswith("-3") for i in seen["ids"])
    # group of 3 valid: rewards [1, 0, 1] -> GRPO advantages with the void one absent
    a = seen["adv"][:3]
    assert a.tolist() == pytest.approx([1 / 3**0.5, -2 / 3**0.5, 1 / 3**0.5], abs=1e-4)
    assert r["train/skipped_updates"] == 0 and r["train/optimizer_steps"] == 2
    assert r["train/grad_norm"] > 0
    assert r["policy/version"] == 0 and rows[1]["policy/version"] == 1
    # two mini-batches: the second is scored after an update, so the ratio is not identically 1
    assert r["train/is_ratio_max"] != pytest.approx(1.0, abs=1e-7) or r["train/is_ratio_min"] != pytest.approx(
        1.0, abs=1e-7
    )
    on_disk = read_metrics(trainer.run_dir)
    assert [x["step"] for x in on_disk] == [1, 2]
    lines = (trainer.run_dir / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["info"]["step"] == 1


async def test_mask_mode_keeps_void_in_group_statistics_with_zero_loss(make_trainer) -> None:
    trainer = make_trainer("filter.mode=mask")
    seen = {}
    real_update = trainer.updater.update

    def spy(trajs, adv, *, seed, **kw):
        seen["trajs"] = trajs
        seen["adv"] = adv.clone()
        return real_update(trajs, adv, seed=seed, **kw)

    trainer.updater.update = spy
    metrics, _ = await trainer.train_step(1)
    assert metrics["filter/void_trajectories"] == 2
    assert len(seen["trajs"]) == 8  # void ones stay in the groups (SimpleTIR's masking)
    assert seen["trajs"][3].loss_weight == 0.0
    # rewards [1,0,1,0] with the void one (reward 0) in the mean/std
    assert seen["adv"][:4].tolist() == pytest.approx([0.866, -0.866, 0.866, -0.866], abs=1e-3)


async def test_resamples_groups_left_short_then_trains(make_trainer) -> None:
    def script(task, i, call):
        if call == 1 and task.id.endswith("t0"):
            return Reply([VOID], 0.0, TerminationReason.VOID)  # the whole first group is void
        return Reply([CORRECT, ANSWER], float(i % 2))

    trainer = make_trainer(script=script)
    metrics, sampled = await trainer.train_step(1)
    assert metrics["filter/resampled"] == 4 and metrics["filter/resample_rounds"] == 1
    assert metrics["filter/void_trajectories"] == 4
    assert metrics["rollout/trajectories"] == 12 == len(sampled)
    assert metrics["filter/groups_used"] == 2
    assert metrics["train/skipped_step"] == 0
    assert trainer.strategy.requests[1].tasks[0].id == "s1-t0"


async def test_resampled_episodes_get_ids_and_seeds_unique_within_the_step(make_trainer) -> None:
    """A resample request of task C (index 2) must not reuse task A's ``s5-t0-g0`` id or its seed."""
    from tirl.rollout.pipeline import make_episodes

    def script(task, i, call):
        if call == 1 and task.id.endswith("t2"):
            return Reply([VOID], 0.0, TerminationReason.VOID)  # only the third task's group is short
        return Reply([CORRECT, ANSWER], float(i % 2))

    trainer = make_trainer("trainer.prompts_per_step=3", script=script)
    await trainer.train_step(5)
    first, again = trainer.strategy.requests
    assert again.tasks[0].id == "s5-t2" and again.task_indices == (2,) and again.round == 1
    episodes = [ep for req in (first, again) for ep in make_episodes(req)]
    ids = [ep.traj.id for ep in episodes]
    seeds = [ep.seed for ep in episodes]
    assert len(set(ids)) == len(ids) == 16 and len(set(seeds)) == len(seeds)
    assert [ep.traj.id for ep in make_episodes(again)] == [f"s5-t2-g{k}" for k in range(4, 8)]


async def test_all_void_batch_is_skipped_with_a_warning_never_a_crash(make_trainer, caplog) -> None:
    trainer = make_trainer(script=lambda task, i, call: Reply([VOID], 0.0, TerminationReason.VOID))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with caplog.at_level(logging.WARNING, logger="tirl.trainer"):
        rows = await trainer.run()
    assert "skipped" in caplog.text
    assert [r["step"] for r in rows] == [1, 2]
    r = rows[0]
    assert r["train/skipped_step"] == 1 and r["train/loss"] is None and r["train/is_ratio_max"] is None
    assert r["filter/valid_trajectories"] == 0 and r["filter/void_trajectories"] == 24  # 8 + 2 rounds x 8
    assert r["filter/resampled"] == 16
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


async def test_failed_trajectories_are_excluded_and_counted(make_trainer) -> None:
    def script(task, i, call):
        if i == 0:
            return Reply([CORRECT], 0.0, TerminationReason.EVAL_FAILED)
        return Reply([CORRECT, ANSWER], float(i % 2))

    trainer = make_trainer(script=script)
    metrics, _ = await trainer.train_step(1)
    assert metrics["filter/failed_trajectories"] == 2
    assert metrics["filter/valid_trajectories"] == 6
    assert metrics["rollout/failed"] == 2


async def test_nan_loss_skips_the_update_and_records_it(make_trainer) -> None:
    trainer = make_trainer()
    with torch.no_grad():
        trainer.model.model.norm.weight.fill_(float("nan"))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics, _ = await trainer.train_step(1)
    assert metrics["train/skipped_updates"] >= 1
    assert metrics["train/optimizer_steps"] == 0
    after = list(trainer.model.parameters())
    assert all(
        torch.equal(
            a,
            b,
        )
        or (a.isnan() == b.isnan()).all()
        for a, b in zip(before, after, strict=True)
    )


async def test_tis_weights_are_truncated_when_generator_logprobs_differ(make_trainer) -> None:
    # the generator reports log-probs 1.0 lower than the trainer's: weight exp(1) truncated at the cap 2
    trainer = make_trainer("algo.tis_cap=2.0", shift=-1.0)
    metrics, _ = await trainer.train_step(1)
    assert metrics["train/tis_weight_mean"] == pytest.approx(2.0, abs=1e-4)
    assert metrics["train/gen_logprob_gap_max"] == pytest.approx(1.0, abs=1e-3)


async def test_equal_rewards_give_no_update_and_leave_weights_alone(make_trainer) -> None:
    trainer = make_trainer(script=lambda task, i, call: Reply([CORRECT, ANSWER], 1.0))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics, _ = await trainer.train_step(1)
    assert metrics["train/no_signal"] == 1 and metrics["train/optimizer_steps"] == 0
    assert metrics["filter/valid_trajectories"] == 8
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


async def test_a_group_with_one_usable_trajectory_of_two_is_resampled(make_trainer) -> None:
    """``filter.min_valid_per_group=2``: a group of 2 with one void trajectory is short and asks again."""

    def script(task, i, call):
        if call == 1 and task.id.endswith("t0") and i == 1:
            return Reply([VOID], 0.0, TerminationReason.VOID)  # t0: 1 usable of 2; t1: 2 of 2
        return Reply([CORRECT, ANSWER], float(i % 2))

    trainer = make_trainer("algo.group_size=2", "filter.min_valid_per_group=2", script=script)
    metrics, sampled = await trainer.train_step(1)
    first, again = trainer.strategy.requests
    assert [t.id for t in first.tasks] == ["s1-t0", "s1-t1"]
    assert [t.id for t in again.tasks] == ["s1-t0"] and again.task_indices == (0,) and again.round == 1
    assert metrics["filter/resample_rounds"] == 1 and metrics["filter/resampled"] == 2 == len(sampled) - 4
    assert metrics["filter/groups_used"] == 2 and metrics["filter/groups_dropped"] == 0


async def test_equal_rewards_still_update_when_a_kl_term_pulls(make_trainer) -> None:
    """The zero-advantage skip is only for a zero gradient: with KL against a different reference it is not."""
    from trainer_fakes import SMALL

    from tirl.models.tiny import build_tiny_model

    ref, _ = build_tiny_model(SMALL, seed=1)  # other weights than the policy (seed 0): the KL gradient is not 0
    ref.requires_grad_(False)
    same = lambda task, i, call: Reply([CORRECT, ANSWER], 1.0)  # noqa: E731
    trainer = make_trainer("algo.kl_coef=0.5", script=same, ref_model=ref)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics, _ = await trainer.train_step(1)
    assert metrics["train/no_signal"] == 0 and metrics["train/optimizer_steps"] >= 1
    assert metrics["train/advantage_abs_mean"] == 0.0  # the update ran on KL alone
    assert trainer.policy_version == 1
    assert not all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


@pytest.mark.parametrize("clip", [0.05, 0.0])
async def test_grad_clip_bounds_the_step_and_zero_turns_it_off(make_trainer, clip: float) -> None:
    """With plain SGD at lr 1 the weight change is exactly the (clipped) gradient: its norm is the clip."""
    trainer = make_trainer(
        f"algo.grad_clip={clip}", "algo.minibatches=1", "algo.warmup_steps=0", "trainer.prompts_per_step=1"
    )
    trainer.updater.optimizer = torch.optim.SGD(list(trainer.model.parameters()), lr=1.0)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics, _ = await trainer.train_step(1)
    assert metrics["train/optimizer_steps"] == 1
    raw = metrics["train/grad_norm"]  # the norm before clipping
    deltas = [p.detach() - b for p, b in zip(trainer.model.parameters(), before, strict=True)]
    moved = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(d) for d in deltas])).item()
    assert raw > 0.5  # far above the clip, so clipping has something to do
    assert moved == pytest.approx(clip if clip > 0 else raw, rel=1e-3)


@pytest.mark.parametrize("normalize", [True, False])
def test_std_normalize_divides_the_group_advantages_by_their_spread(make_trainer, normalize: bool) -> None:
    from tirl.types import Group, Message, Role, Trajectory

    trainer = make_trainer(f"algo.std_normalize={str(normalize).lower()}")
    trajs = [
        Trajectory(id=f"t{i}", group="g", messages=[Message(role=Role.USER, content="q")], reward=r)
        for i, r in enumerate([1.0, 0.0, 0.0, 0.0])
    ]
    _, adv = trainer.advantages([Group(id="g", trajectories=trajs)])
    centred = [0.75, -0.25, -0.25, -0.25]
    if normalize:  # divided by the group's standard deviation (0.43-0.5, depending on the estimator)
        scale = adv[0].item() / 0.75
        assert 1.9 < scale < 2.4 and adv.tolist() == pytest.approx([c * scale for c in centred], rel=1e-5)
    else:
        assert adv.tolist() == pytest.approx(centred, abs=1e-7)


async def test_the_learning_rate_of_the_last_optimiser_step_is_logged(make_trainer) -> None:
    """``train/lr`` follows the linear warm-up: after optimiser step k of W it is lr * min(1, k / W)."""
    trainer = make_trainer("algo.lr=1e-3", "algo.warmup_steps=4", "algo.minibatches=2", "trainer.prompts_per_step=2")
    seen = []
    for step in (1, 2):
        metrics, _ = await trainer.train_step(step)
        assert metrics["train/optimizer_steps"] == 2
        seen.append(metrics["train/lr"])
    assert seen == pytest.approx([1e-3 * 2 / 4, 1e-3 * 4 / 4])  # optimiser steps 2 and 4 of the warm-up
