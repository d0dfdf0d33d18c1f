"""``trainer.eval_samples``: real ``tirl train`` runs write the sampled evaluations before and after, print the
change with its p-value, ``tirl compare RUN --sampled`` reads them, and ``--resume`` keeps the one before.

The built-in model (it solves some tir-chain tasks, so the files hold both outcomes) for the main run; the
1-layer random model (every episode ends void at its first turn: fast) for the resume cases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.tiny_run import save_tiny_model

from tirl.cli import main
from tirl.rollout.paired import PairedSamples
from tirl.trainer import run_files

SMALL = [
    "--set", "trainer.prompts_per_step=2",
    "--set", "algo.group_size=2",
    "--set", "trainer.threads=1",
    "--set", "env.eval_size=4",
    "--set", "trainer.checkpoint_every=1",
    "--no-progress",
]  # fmt: skip
RANDOM = [  # the random model writes only void turns: short, and trained on anyway
    "--set", "generation.max_new_tokens=16",
    "--set", "generation.max_total_tokens=200",
    "--set", "filter.mode=off",
    "--set", "algo.kl_coef=0.01",
]  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


def _main(args: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    got = capsys.readouterr()
    return code, got.out, got.err


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_a_run_writes_both_sampled_evaluations_and_compare_reads_them(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--steps", "1", "--run-dir", run_dir, *SMALL, "--set", "trainer.eval_samples=2"]
    code, out, err = _main(args, capsys)
    assert code == 0, err
    before, after = _read(run_dir / "eval_before_sampled.json"), _read(run_dir / "eval_after_sampled.json")
    greedy_ids = sorted(r["id"] for r in _read(run_dir / "eval_before.json")["tasks"])
    for record in (before, after):  # K = 2 rows for each task of the greedy evaluation's set
        ids = [r["id"] for r in record["tasks"]]
        assert sorted(set(ids)) == greedy_ids and all(ids.count(i) == 2 for i in greedy_ids)
        assert record["n"] == 8 and record["decoding"].startswith("sampled (temperature 1")
        assert record["split"] == "heldout" and record["pass_at_k"]["samples"] == 2
        assert record["accuracy"] == sum(r["correct"] for r in record["tasks"]) / 8
    assert after["model"] == str(run_dir / "checkpoints" / "step-1" / "model")
    summary = _read(run_dir / "summary.json")
    paired = summary["eval/sampled_paired"]
    assert summary["eval/samples"] == 2 and summary["eval/sampled_accuracy_before"] == before["accuracy"]
    assert paired["solve_rate"] == pytest.approx([before["accuracy"], after["accuracy"]])
    line = f"Wilcoxon signed-rank exact p = {paired['p_value']:.3g}"
    assert "sampled eval (2 per task, sampled (temperature 1, top-p 1)):" in out and line in out
    assert f"solve rate (pass@1): {before['accuracy']:.4f} -> {after['accuracy']:.4f}" in out
    assert "Sampled, 2 per task" in (run_dir / "report.html").read_text(encoding="utf-8")
    assert all(run_files.is_run_file(p.name) or p.name == run_files.REPORT for p in run_dir.iterdir())
    # the same episodes as tirl eval --sampled --samples 2 of the run's last checkpoint (same seed rules)
    code, out, err = _main(["eval", "--model", run_dir, "--n", "4", "--sampled", "--samples", "2", "--json",
                            "--set", "trainer.threads=1"], capsys)  # fmt: skip
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["tasks"] == after["tasks"]
    code, out, err = _main(["compare", run_dir, "--sampled", "--json"], capsys)
    assert code == 0, err
    got = json.loads(out)
    assert got["samples"] == [2, 2] and got["p_value"] == paired["p_value"] and got["n"] == 4
    assert "eval_before_sampled.json" in got["first"] and "eval_after_sampled.json" in got["second"]
    code, out, err = _main(["compare", run_dir], capsys)  # greedy, as before, with a note on the sampled pair
    assert code == 0 and "paired: 4 tasks (1 vs 1 episode per task)" in out and "--sampled" in err


@pytest.mark.slow
def test_resume_keeps_the_sampled_evaluation_before_and_writes_the_one_after(
    model_dir: Path, tmp_path: Path, capsys
) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--model", model_dir, "--steps", "1", "--run-dir", run_dir, *SMALL, *RANDOM]
    code, _, err = _main([*args, "--set", "trainer.eval_samples=2"], capsys)
    assert code == 0, err
    before = (run_dir / run_files.EVAL_BEFORE_SAMPLED).read_bytes()
    code, out, err = _main(["train", "--resume", run_dir, "--steps", "2", "--no-progress"], capsys)
    assert code == 0, err
    assert (run_dir / run_files.EVAL_BEFORE_SAMPLED).read_bytes() == before  # not redone: the start is gone
    after = _read(run_dir / run_files.EVAL_AFTER_SAMPLED)
    assert after["model"].endswith("step-2/model") and len(after["tasks"]) == 8
    assert "sampled eval (2 per task" in out and "p = " in out
    # killed during the sampled evaluation before training (no checkpoint yet): the resume draws it
    killed = tmp_path / "killed"
    killed.mkdir()
    for name in (run_files.CONFIG, run_files.EVAL_BEFORE):
        (killed / name).write_bytes((run_dir / name).read_bytes())
    code, out, err = _main(["train", "--resume", killed, "--steps", "1", "--no-progress"], capsys)
    assert code == 0, err
    redrawn = _read(killed / run_files.EVAL_BEFORE_SAMPLED)  # the same episodes: seeded as tirl eval --sampled
    assert redrawn["tasks"] == json.loads(before)["tasks"] and redrawn["model"] == str(model_dir)
    assert (killed / run_files.EVAL_BEFORE).read_bytes() == (run_dir / run_files.EVAL_BEFORE).read_bytes()


@pytest.mark.slow
def test_a_damaged_sampled_evaluation_before_is_refused_before_the_resume(
    model_dir: Path, tmp_path: Path, capsys
) -> None:
    """It was read after the last step: without 'tasks', a KeyError traceback there; now one line up front."""
    run_dir = tmp_path / "run"
    args = ["train", "--model", model_dir, "--steps", "1", "--run-dir", run_dir, *SMALL, *RANDOM]
    code, _, err = _main([*args, "--set", "trainer.eval_samples=2"], capsys)
    assert code == 0, err
    path = run_dir / run_files.EVAL_BEFORE_SAMPLED
    path.write_text(json.dumps({k: v for k, v in _read(path).items() if k != "tasks"}))
    code, _, err = _main(["train", "--resume", run_dir, "--steps", "2", "--no-progress"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "has no 'tasks' list" in lines[0] and "or delete it" in lines[0], err
    assert not (run_dir / "checkpoints" / "step-2").exists()
    path.unlink()  # the fix it names: the summary then has the sampled evaluation after alone
    code, _, err = _main(["train", "--resume", run_dir, "--steps", "2", "--no-progress"], capsys)
    assert code == 0, err
    assert (run_dir / run_files.EVAL_AFTER_SAMPLED).is_file()


@pytest.mark.slow
def test_a_resume_that_turns_it_on_writes_the_one_after_alone(model_dir: Path, tmp_path: Path, capsys) -> None:
    """The policy the run started from is gone after its first checkpoint: no "before" from the checkpoint."""
    run_dir = tmp_path / "run"
    code, _, err = _main(["train", "--model", model_dir, "--steps", "1", "--run-dir", run_dir, *SMALL, *RANDOM], capsys)
    assert code == 0, err
    resume = ["train", "--resume", run_dir, "--steps", "2", "--set", "trainer.eval_samples=2", "--no-progress"]
    code, out, err = _main(resume, capsys)
    assert code == 0, err
    assert not (run_dir / run_files.EVAL_BEFORE_SAMPLED).exists() and "no sampled evaluation before" in err
    summary = _read(run_dir / "summary.json")
    assert summary["eval/sampled_accuracy_after"] == 0.0 and "eval/sampled_paired" not in summary
    assert "pass@1 0.0000 after training (no sampled evaluation before training to compare)" in out
    code, _, err = _main(["compare", run_dir, "--sampled"], capsys)
    assert code == 2 and err.startswith(f"error: {run_dir}: has no sampled evaluation before training")


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["trainer.eval_samples=-1"], "config trainer.eval_samples=-1 is invalid: use a value in 0..256"),
        (["trainer.eval_samples=257"], "config trainer.eval_samples=257 is invalid: use a value in 0..256"),
        (["trainer.eval_samples=2", "trainer.eval_before_after=false"],
         "config trainer.eval_samples=2 is invalid: it evaluates before and after training: set "
         "trainer.eval_before_after=true, or trainer.eval_samples=0"),
    ],
)  # fmt: skip
def test_a_bad_value_is_one_error_line_and_no_run(sets: list[str], message: str, tmp_path: Path, capsys) -> None:
    args = ["train", "--steps", "1", "--run-dir", tmp_path / "run", "--no-progress"]
    code, _, err = _main([*args, *(a for s in sets for a in ("--set", s))], capsys)
    assert code == 2 and err == f"error: {message}\n" and not (tmp_path / "run").exists()


def test_the_summary_record_reads_back_into_the_same_lines() -> None:
    from tirl.rollout.evaluation import TaskOutcome

    rows = [TaskOutcome(f"t{i}", (i + j) % 3 == 0, "submitted", 2) for i in range(9) for j in range(4)]
    later = [TaskOutcome(f"t{i}", (i * j) % 2 == 0, "submitted", 2) for i in range(9) for j in range(4)]
    got = PairedSamples.of(rows, later)
    assert PairedSamples.from_dict(json.loads(json.dumps(got.to_dict()))) == got
