"""``tirl train --env swe-lite``: the SWE job's defaults reach a real run.

Real parts: ``tirl train`` (in this process), the pipeline, the swe-lite env on its curriculum
(``env.difficulty=2`` from the env's preset), real workspaces, the sandbox and the pytest judge. The policy is
a tiny random model (the shipped warm start is covered by tests/models/test_builtin_swe_model.py), the caps
are cut so that one step of 2 x 2 episodes runs in seconds, and there is no evaluation before and after (200
held-out episodes). About 60 s on the 2-core machine at load 16 (the judge runs per episode).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.tiny_run import tirl_in_process

from tirl.models.tiny import TinyModelSpec, build_tiny_model, save_policy

QUICK = [
    "--set", "trainer.prompts_per_step=2",
    "--set", "algo.group_size=2",
    "--set", "env.max_turns=2",
    "--set", "generation.max_new_tokens=16",
    "--set", "generation.max_total_tokens=1200",
    "--set", "filter.mode=off",
    "--set", "algo.kl_coef=0.01",
    "--set", "trainer.threads=1",
    "--set", "trainer.eval_before_after=false",
    "--no-progress",
]  # fmt: skip


@pytest.mark.slow
def test_one_step_of_the_swe_job_runs_the_curriculum_through_the_judge(tmp_path: Path) -> None:
    spec = TinyModelSpec(hidden_size=32, layers=1, heads=2, kv_heads=2, intermediate_size=64, max_positions=1280)
    model, tok = build_tiny_model(spec, seed=0)
    model_dir = save_policy(model, tok, tmp_path / "tiny")
    run_dir = tmp_path / "run"
    done = tirl_in_process("train", "--env", "swe-lite", "--steps", "1", "--model", str(model_dir),
                           "--run-dir", str(run_dir), *QUICK)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["env"]["name"] == "swe-lite" and saved["env"]["difficulty"] == 2  # the preset, not --set
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    prompts = [next(m["content"] for m in r["messages"] if m["role"] == "user") for r in rows]
    assert all("`python3 check.py` fails in the `" in p for p in prompts)  # curriculum tasks, not the 33 bugs
    assert {r["reward"] for r in rows} == {0.0}  # a random model fixes nothing; the judge said so
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "step" in m][-1] == 1
