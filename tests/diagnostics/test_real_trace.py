"""`diagnose pipeline` on traces written by tirl's own pipeline strategy + PipelineTracer (fake envs, real asyncio).

Each scenario makes one stage clearly slow (sleeps), runs one collect with the
real pipeline and trace writer, and checks that the verdict names that stage.
The trace of a real `tirl train` run (tiny random model) is judged in full: every rule ran.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model

from tirl.cli import main
from tirl.config import RolloutConfig
from tirl.diagnostics.pipeline import diagnose_trace_file
from tirl.envs.base import EvalResult, StepResult, Task
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy
from tirl.rollout.trace import BusyMeter
from tirl.types import Message, Role, TerminationReason, Trajectory


class SleepyEnv:
    name = "sleepy"

    def __init__(self, task: Task) -> None:
        self.task = task

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        await asyncio.sleep(task.data["init_s"])
        return [Message(role=Role.USER, content=task.prompt)]

    async def step(self, action: Message) -> StepResult:
        return StepResult(observation=[Message(role=Role.TOOL, content="ok")])

    async def evaluate(self) -> EvalResult:
        await asyncio.sleep(self.task.data["eval_s"])
        return EvalResult(reward=1.0, correct=True)

    async def close(self) -> None:
        await asyncio.sleep(0)


class SleepyRunner:
    def __init__(self, meter: BusyMeter) -> None:
        self.meter = meter

    async def __call__(self, env: SleepyEnv, task: Task, initial: list[Message], traj: Trajectory) -> None:
        traj.messages = list(initial)
        with self.meter.busy():
            await asyncio.sleep(task.data["gen_s"])
        traj.messages.append(Message(role=Role.ASSISTANT, content="\\boxed{1}"))
        traj.termination = TerminationReason.ANSWERED


SCENARIOS = {
    # slow stage: (init_s, gen_s, eval_s), workers (init, run, eval)
    "initializer": ((0.04, 0.0, 0.0), (1, 4, 2)),
    "runner": ((0.0, 0.04, 0.0), (2, 1, 2)),
    "evaluator": ((0.0, 0.0, 0.04), (2, 4, 1)),
}


@pytest.mark.parametrize("slow", list(SCENARIOS))
async def test_verdict_names_the_slow_stage_on_a_real_trace(slow: str, tmp_path: Path) -> None:
    (init_s, gen_s, eval_s), (iw, rw, ew) = SCENARIOS[slow]
    cfg = RolloutConfig(
        strategy="pipeline", init_workers=iw, run_workers=rw, eval_workers=ew,
        run_queue_size=32, eval_queue_size=32, trace_interval_s=0.01,
    )  # fmt: skip
    meter = BusyMeter()
    path = tmp_path / "pipeline_trace.jsonl"
    strategy = make_strategy(cfg, SleepyEnv, SleepyRunner(meter), trace_path=path, generator_busy=meter)
    work = [Task(id=f"t{i}", prompt="p", data={"init_s": init_s, "gen_s": gen_s, "eval_s": eval_s}) for i in range(6)]
    try:
        batch = await strategy.collect(RolloutRequest(tasks=work, group_size=4))
    finally:
        await strategy.close()
    assert sum(len(g.trajectories) for g in batch.groups) == 24
    diag = diagnose_trace_file(path)
    assert diag.evidence["snapshots"] >= 20
    assert diag.verdict == slow, diag.evidence
    # the pipeline records what each queue can hold and the pool sizes, and the verdict uses them
    first = json.loads(path.read_text().splitlines()[0])
    caps = {k: first[k] for k in ("init_queue_cap", "run_queue_cap", "eval_queue_cap")}
    assert caps == {"init_queue_cap": 24, "run_queue_cap": 32, "eval_queue_cap": 32}
    assert (first["init_workers"], first["run_workers"], first["eval_workers"]) == (iw, rw, ew)
    assert diag.evidence["capacity_known"] is True


@pytest.mark.slow
def test_the_trace_of_a_real_train_run_is_judged_with_every_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tirl train` writes the capacities, the blocked counts and gpu_util (the hf generator's busy time).

    A tiny run's collect ends within one default trace interval (0.25 s), leaving only the drained end of each
    collect: ``cannot_judge``. At 2 ms the trace sees the collects at work, and the verdict lists nothing unchecked.
    """
    model = save_tiny_model(tmp_path / "tiny")
    run_dir = tmp_path / "run"
    args = ["train", "--model", str(model), "--steps", "2", "--run-dir", str(run_dir), *TINY_TRAIN_ARGS]
    assert main([*args, "--set", "rollout.trace_interval_s=0.002"]) == 0
    capsys.readouterr()
    assert main(["diagnose", "pipeline", str(run_dir), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    ev = got["evidence"]
    assert got["verdict"] != "cannot_judge" and "cannot_judge" not in ev, ev
    assert got["not_checked"] == {}, got["not_checked"]
    assert ev["capacity_known"] is True and ev["generator_busy_frac"] is not None and ev["snapshots"] >= 12
    assert main(["diagnose", "pipeline", str(run_dir)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"verdict {got['verdict']}"), first  # nothing after the verdict's name
