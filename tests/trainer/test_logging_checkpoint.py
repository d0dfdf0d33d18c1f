import json
import random

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainer_fakes import SMALL

from tirl.models.tiny import build_tiny_model
from tirl.trainer.checkpoint import latest_checkpoint, list_checkpoints, resume_point, save_checkpoint
from tirl.trainer.logging import REQUIRED_METRICS, RunLogger, read_metrics
from tirl.types import Message, Role, Trajectory


def _tb_scalars(tb_dir) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_metrics_jsonl_and_tensorboard_event_files_agree(tmp_path) -> None:
    log = RunLogger(tmp_path)
    log.log_step(1, {"train/loss": 0.5, "reward/mean": 0.25, "train/grad_norm": float("nan")})
    log.log_step(2, {"train/loss": 0.25, "reward/mean": 0.5})
    traj = Trajectory(id="a", messages=[Message(role=Role.USER, content="hi")], reward=1.0)
    log.log_trajectories(2, [traj])
    log.close()
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert set(REQUIRED_METRICS) <= set(rows[0])
    assert rows[0]["train/grad_norm"] is None  # NaN is not JSON: logged as null
    assert rows[1]["train/is_ratio_max"] is None  # not measured: null, but present
    tb = _tb_scalars(tmp_path / "tb")
    assert tb["train/loss"] == [(1, 0.5), (2, 0.25)]
    assert tb["reward/mean"] == [(1, 0.25), (2, 0.5)]
    assert "train/grad_norm" not in tb
    line = json.loads((tmp_path / "trajectories.jsonl").read_text())
    assert line["id"] == "a" and line["info"]["step"] == 2 and line["reward"] == 1.0


def test_resume_cuts_logs_back_to_the_checkpoint_step(tmp_path) -> None:
    log = RunLogger(tmp_path)
    for step in (1, 2, 3):
        log.log_step(step, {"train/loss": float(step)})
    log.close()
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 4, "train/lo')  # torn line of a killed process
    log = RunLogger(tmp_path, resume_step=2)
    log.log_step(3, {"train/loss": 30.0})
    log.close()
    assert [(r["step"], r["train/loss"]) for r in read_metrics(tmp_path)] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    assert _tb_scalars(tmp_path / "tb")["train/loss"] == [(1, 1.0), (2, 2.0), (3, 30.0)]  # purge_step


def test_resumed_event_file_sorts_after_the_one_it_continues(tmp_path) -> None:
    """TensorBoard reads event files in name order; a resumed writer's file must come last.

    The old file is renamed to a stamp one second ahead with a counter that
    sorts late as text: a writer opened without waiting would sort before it,
    and the reader would apply the old steps after the purge.
    """
    import time

    log = RunLogger(tmp_path)
    for step in (1, 2, 3):
        log.log_step(step, {"train/loss": float(step)})
    log.close()
    (old,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    ahead = old.with_name(f"events.out.tfevents.{int(time.time()) + 1:010d}.host.1.99")
    old.rename(ahead)
    log = RunLogger(tmp_path, resume_step=2)
    log.log_step(3, {"train/loss": 30.0})
    log.close()
    assert sorted(p.name for p in (tmp_path / "tb").iterdir())[0] == ahead.name
    assert _tb_scalars(tmp_path / "tb")["train/loss"] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_checkpoint_roundtrip_is_atomic_and_restores_state(tmp_path) -> None:
    model, tok = build_tiny_model(SMALL, seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[5, 6, 7]])).logits.sum().backward()
    opt.step()
    (tmp_path / "checkpoints" / ".tmp-step-9-123").mkdir(parents=True)  # a save killed mid-write
    random.seed(5)
    ck = save_checkpoint(tmp_path, 3, model=model, tokenizer=tok, optimizer=opt, state={"policy_version": 3})
    expected = random.random()
    assert latest_checkpoint(tmp_path).step == 3
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    assert (ck.model_dir / "config.json").is_file() and (ck.model_dir / "tokenizer.json").is_file()
    opt2 = torch.optim.AdamW(model.parameters(), lr=1e-3)
    point = resume_point(tmp_path)
    assert point is not None and point.checkpoint.step == 3
    random.seed(99)
    point.training.load_into(opt2)
    point.training.rng.restore()
    assert random.random() == expected
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert torch.equal(s1[0]["exp_avg"], s2[0]["exp_avg"])
    assert ck.state["policy_version"] == 3


def test_keeps_the_newest_checkpoints(tmp_path) -> None:
    model, tok = build_tiny_model(SMALL, seed=1)
    opt = torch.optim.AdamW(model.parameters())
    for step in range(1, 6):
        save_checkpoint(tmp_path, step, model=model, tokenizer=tok, optimizer=opt, keep_last=2)
    assert [c.step for c in list_checkpoints(tmp_path)] == [4, 5]


@pytest.mark.parametrize("torn", ["state.json"])
def test_incomplete_checkpoint_directory_is_ignored(tmp_path, torn: str) -> None:
    (tmp_path / "checkpoints" / "step-7").mkdir(parents=True)
    assert latest_checkpoint(tmp_path) is None
