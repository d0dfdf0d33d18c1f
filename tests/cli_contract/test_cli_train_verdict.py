"""`tirl train` ends with the training diagnosis in one line, the one `tirl diagnose training` gives its log.

A real 3-step run of a tiny random model: stdout's line before ``run directory:`` is ``training diagnosis:
VERDICT …`` naming the command for the evidence, and ``tirl diagnose training`` on the run directory agrees. The
random model earns reward 0, so its advantages are 0 and the policy never moves: the entropy rule runs and finds
no collapse; the KL to the reference (``algo.kl_coef=0.01``) is 0 at every step, which the verdict lists as not
checked instead of passing it. Not covered: a run whose diagnostics are not installed (no line, as no report).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model, tirl_in_process


def test_train_prints_the_training_verdict_and_diagnose_agrees(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "tiny")
    run = tmp_path / "run"
    res = tirl_in_process("train", "--model", str(model), "--steps", "3", "--run-dir", str(run), *TINY_TRAIN_ARGS)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[-1] == f"run directory: {run}"
    verdict = lines[-2]
    assert verdict.startswith("training diagnosis: ") and "Traceback" not in res.stderr
    assert verdict.endswith(f"`tirl diagnose training {run / 'metrics.jsonl'}` for the evidence")
    diagnosed = tirl_in_process("diagnose", "training", str(run), "--json")
    assert diagnosed.returncode == 0, diagnosed.stderr
    got = json.loads(diagnosed.stdout)
    assert verdict.startswith(f"training diagnosis: {got['verdict']}")
    assert not [f for f in got["findings"] if f["kind"] in ("entropy_collapse", "kl_blowup")]
    assert "entropy_collapse" not in got["not_checked"]  # the entropy rule ran on the real entropies
    assert got["not_checked"]["kl_blowup"].startswith("the KL to the reference is 0 at every step")
    for kind in got["not_checked"]:  # a 3-step run cannot check the rules that need a baseline: the line says so
        assert kind in verdict.split("not (fully) checked: ", 1)[1]
