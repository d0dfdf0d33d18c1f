"""Property: for random mixes of valid, void and failed episodes, the update gets exactly the right rows.

Drawn per step: the filter mode (``drop`` or ``mask``), ``min_valid_per_group``
and, per episode, one of correct / wrong / void / failed. The reference below
is written from the rule, in plain Python, and compared with what a real
:class:`Trainer` step hands to :meth:`PolicyUpdater.update` (captured, not run):

- failed episodes never reach the update; void ones reach it only under
  ``mask``, with ``loss_weight`` 0;
- a group is used when its usable (non-void, non-failed) count reaches
  ``min_valid_per_group``; no resampling here (``max_resample_rounds=0``);
- the advantages are exactly ``group_advantages`` of the kept subset (so a
  void trajectory sits in its group's statistics under ``mask`` and not under
  ``drop``);
- no update at all when nothing is kept or every advantage is zero.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainer_fakes import ANSWER, CORRECT, VOID, Reply, ScriptedStrategy, make_cfg

from tirl.algorithms.advantages import group_advantages
from tirl.envs.base import Task
from tirl.models.chat_format import SimpleChatFormat
from tirl.trainer.update import UpdateStats
from tirl.types import TerminationReason

KINDS = ("correct", "wrong", "void", "failed")
GROUP = 4


def _reply(kind: str) -> Reply:
    if kind == "correct":
        return Reply([CORRECT, ANSWER], 1.0)
    if kind == "wrong":
        return Reply(["\\boxed{5}"], 0.0)
    if kind == "void":
        return Reply([VOID], 0.0, TerminationReason.VOID)
    return Reply([CORRECT], 0.0, TerminationReason.ERROR)


def _expected(plan: list[list[str]], mode: str, min_valid: int) -> tuple[list[str], list[float]] | None:
    """Kept ids and their advantages by the rule; None when the step must not update."""
    ids: list[str] = []
    rewards: list[float] = []
    gids: list[int] = []
    used = 0
    for g, kinds in enumerate(plan):
        usable = sum(k in ("correct", "wrong") for k in kinds)
        if usable < min_valid:
            continue
        for i, k in enumerate(kinds):
            if k == "failed" or (k == "void" and mode == "drop"):
                continue
            ids.append(f"t{g}-{i}")
            rewards.append(1.0 if k == "correct" else 0.0)
            gids.append(used)
        used += 1
    if not ids:
        return None
    adv = group_advantages(torch.tensor(rewards), torch.tensor(gids), estimator="grpo", std_normalize=True)
    if float(adv.abs().max()) == 0.0:
        return None
    return ids, adv.tolist()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plan=st.lists(st.lists(st.sampled_from(KINDS), min_size=GROUP, max_size=GROUP), min_size=1, max_size=4),
    mode=st.sampled_from(["drop", "mask"]),
    min_valid=st.integers(1, 3),
)
def test_update_receives_exactly_the_kept_rows_and_their_group_advantages(
    tiny, tmp_path: Path, plan: list[list[str]], mode: str, min_valid: int
) -> None:
    from tirl.trainer.learner import build_learner
    from tirl.trainer.trainer import Trainer

    model, tok = tiny

    def script(task: Task, i: int, call: int) -> Reply:
        return _reply(plan[int(task.id[1:])][i])

    def tasks(step: int, n: int) -> list[Task]:
        return [Task(id=f"t{k}", prompt=f"Compute {k}.", answer="4") for k in range(n)]

    cfg = make_cfg(
        f"filter.mode={mode}",
        f"filter.min_valid_per_group={min_valid}",
        "filter.max_resample_rounds=0",
        f"trainer.prompts_per_step={len(plan)}",
        f"algo.group_size={GROUP}",
    )
    trainer = Trainer(
        cfg=cfg,
        learner=build_learner(cfg, model, tok),
        tokenizer=tok,
        strategy=ScriptedStrategy(model, SimpleChatFormat(tok), script=script),
        tasks=tasks,
        run_dir=tmp_path / "run",
        progress=False,
    )
    seen: list[tuple[list, torch.Tensor]] = []

    def capture(trajs, adv, *, seed, **kw):
        seen.append((list(trajs), adv.clone()))
        return UpdateStats()

    trainer.updater.update = capture  # type: ignore[method-assign]
    asyncio.run(trainer.train_step(1))
    want = _expected(plan, mode, min_valid)
    if want is None:
        assert seen == []
        return
    ((got_trajs, got_adv),) = seen
    ids = [t.id.split("-c")[0] + "-" + t.id.rsplit("-", 1)[1] for t in got_trajs]
    assert ids == want[0]
    assert got_adv.tolist() == want[1]
    for t in got_trajs:
        kind = plan[int(t.group[1:])][int(t.id.rsplit("-", 1)[1])]
        assert kind != "failed"
        assert t.void == (kind == "void")
        assert t.loss_weight == (0.0 if kind == "void" else 1.0)
