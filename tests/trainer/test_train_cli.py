"""`tirl train` / `tirl eval` as subprocesses on a tiny random model: files, summary, kill -9 and resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.tiny_run import TINY_RUN_ARGS, save_tiny_model

from tirl.cli import main
from tirl.models.kernels import build_line
from tirl.trainer import run_files
from tirl.trainer.logging import REQUIRED_METRICS, read_metrics

TIRL = [sys.executable, "-m", "tirl.cli"]
TINY = TINY_RUN_ARGS


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


def _main(args: list[str], capsys) -> tuple[int, str]:
    """Run the CLI in this process (no second torch import: the suite stays fast)."""
    capsys.readouterr()
    code = main(args)
    return code, capsys.readouterr().out


@pytest.mark.slow
def test_train_writes_the_run_directory_and_eval_reads_the_checkpoint(model_dir: Path, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--model", str(model_dir), "--steps", "2", "--run-dir", str(run_dir), *TINY]
    code, out_train = _main([*args, "--set", "env.eval_size=4", "--set", "trainer.checkpoint_every=1"], capsys)
    assert code == 0
    assert f"run directory: {run_dir}" in out_train
    for name in ("config.json", "metrics.jsonl", "trajectories.jsonl", "pipeline_trace.jsonl", "summary.json"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    assert (run_dir / "checkpoints" / "step-2" / "model" / "config.json").is_file()
    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("eval/accuracy")] == [0, 2]  # before training and after the last step
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2] and set(REQUIRED_METRICS) <= set(rows[0])
    verdicts = []  # the run's TensorBoard scalars diagnose as its metrics.jsonl does
    for log in (run_dir, run_dir / "tb"):
        code, out = _main(["diagnose", "training", str(log), "--json"], capsys)
        verdicts.append({k: v for k, v in json.loads(out).items() if k in ("verdict", "steps", "format")})
    assert verdicts[0] == verdicts[1] and verdicts[0]["steps"] == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval/n"] == 4
    assert summary["built_with"] == build_line()  # the torch/MKL kernels and CPU its figures repeat on
    for when in ("before", "after"):
        record = summary[f"eval/{when}"]
        assert record["n"] == 4 and sum(record["terminations"].values()) == 4
        assert summary[f"eval/accuracy_{when}"] == record["correct"] / 4
    code, out = _main(["eval", "--model", str(run_dir), "--n", "4", "--json", "--set", "trainer.threads=1"], capsys)
    assert code == 0
    res = json.loads(out.strip().splitlines()[-1])
    assert res["n"] == 4 and res["model"].endswith("step-2/model")
    assert res["accuracy"] == summary["eval/accuracy_after"]  # same held-out set, greedy decoding
    assert res["tasks"] == summary["eval/after"]["tasks"]  # task by task, the same episodes
    ids = [row["id"] for row in summary["eval/before"]["tasks"]]
    assert len(set(ids)) == 4 and ids == [row["id"] for row in summary["eval/after"]["tasks"]]
    paired = summary["eval/paired"]  # the four cells add up to the tasks, each cell counted from the task lists
    cells = {(b["correct"], a["correct"]) for b, a in zip(summary["eval/before"]["tasks"], res["tasks"], strict=True)}
    assert paired["n"] == 4 == paired["both"] + paired["gained"] + paired["lost"] + paired["neither"]
    assert (paired["gained"] > 0) == ((False, True) in cells) and 0 < paired["p_value"] <= 1
    assert "task by task: " in out_train
    # a finished run can be extended: --resume with more steps continues at step 3, keeps eval_before.json
    before = (run_dir / "eval_before.json").read_text()
    code, out = _main(["train", "--resume", str(run_dir), "--steps", "3", "--no-progress"], capsys)
    assert code == 0
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2, 3]
    assert (run_dir / "eval_before.json").read_text() == before
    assert json.loads((run_dir / "config.json").read_text())["trainer"]["steps"] == 3
    unlisted = [p.name for p in run_dir.iterdir() if not run_files.is_run_file(p.name) and p.name != run_files.REPORT]
    assert unlisted == []  # `tirl report --out` protects what the run wrote by this list: it must name every file


def test_config_file_sets_the_run(model_dir: Path, tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'[model]\npath = "{model_dir}"\n[trainer]\nsteps = 1\neval_before_after = false\n'
        '[algo]\nadvantage = "rloo"\nloss_agg = "seq_mean"\n'
    )
    run_dir = tmp_path / "run"
    code, _ = _main(["train", "--config", str(cfg), "--run-dir", str(run_dir), *TINY], capsys)
    assert code == 0
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["algo"]["advantage"] == "rloo" and saved["algo"]["loss_agg"] == "seq_mean"
    assert [r["step"] for r in read_metrics(run_dir)] == [1]


@pytest.mark.slow
def test_kill_9_then_resume_loses_and_repeats_no_step(model_dir: Path, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    steps = 12
    args = ["train", "--model", str(model_dir), "--steps", str(steps), "--run-dir", str(run_dir), *TINY]
    args += ["--set", "trainer.eval_before_after=false", "--set", "trainer.checkpoint_every=2"]
    args += ["--set", "algo.kl_coef=0.01"]  # every step updates, so step s logs policy version s - 1
    proc = subprocess.Popen([*TIRL, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            if len(read_metrics(run_dir)) >= 3 and proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                break
            if proc.poll() is not None:
                pytest.fail(f"tirl train ended before it could be killed: {proc.stderr.read()[-2000:]}")
            time.sleep(0.02)
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = len(read_metrics(run_dir))
    assert 3 <= killed_at < steps
    code, _ = _main(["train", "--resume", str(run_dir), "--no-progress"], capsys)
    assert code == 0
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    # the step numbers alone cannot show a repeated step (the logger rewrites the rows after the checkpoint);
    # the policy version each step started from can: a checkpointed step trained again starts one version late
    assert [r["policy/version"] for r in rows] == list(range(steps))
    state = json.loads((run_dir / "checkpoints" / f"step-{steps}" / "state.json").read_text())
    assert state["step"] == steps and state["policy_version"] == steps


def test_bad_model_path_is_one_error_line_and_leaves_no_run_directory(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    code = main(["train", "--model", str(tmp_path / "missing"), "--run-dir", str(run_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "missing: does not exist" in err and "--model" in err
    assert not run_dir.exists()
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "not a tirl run directory" in capsys.readouterr().err


def test_bad_task_file_leaves_no_runs_parent_it_created(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"bad": 1}\n')
    keep = tmp_path / "keep"
    keep.mkdir()
    for root in (tmp_path / "runs", keep / "a" / "b"):  # a fresh root (runs/) and nested parents under one that was
        sets = ["--set", f"env.tasks_file={bad}", "--set", "env.name=tir-math", "--set", f"trainer.run_dir={root}"]
        assert main(["train", *sets, "--no-progress"]) == 2
        assert "t.jsonl:1:" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "t.jsonl"] and not any(keep.iterdir())


def test_run_name_names_the_run_directory_under_run_dir(model_dir: Path, tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    args = ["train", "--model", str(model_dir), "--steps", "1", *TINY, "--set", "trainer.eval_before_after=false"]
    args += ["--set", f"trainer.run_dir={root}", "--set", "trainer.run_name=probe"]
    for name in ("probe", "probe-2"):  # a second run of the same name gets a suffix, never the first's directory
        code, out = _main(args, capsys)
        assert code == 0 and f"run directory: {root / name}" in out
        assert json.loads((root / name / "config.json").read_text())["trainer"]["run_name"] == "probe"
    assert sorted(p.name for p in root.iterdir()) == ["probe", "probe-2"]


def test_eval_warns_when_the_token_cap_exceeds_the_models_positions(model_dir: Path, capsys) -> None:
    """``tirl train`` said so already; ``tirl eval`` evaluated silently with every long episode ended overlong."""
    quick = ["--n", "1", "--set", "generation.max_new_tokens=4", "--set", "trainer.threads=1", "--json"]
    for cap, warned in ((4096, True), (200, False)):
        capsys.readouterr()
        code = main(["eval", "--model", str(model_dir), *quick, "--set", f"generation.max_total_tokens={cap}"])
        err = capsys.readouterr().err
        assert code == 0
        line = f"warning: generation.max_total_tokens={cap} exceeds the 256 positions of the model at {model_dir}"
        assert (line in err) is warned, err


@pytest.mark.slow
def test_a_run_started_with_relative_paths_resumes_from_another_directory(
    model_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """``--model`` and ``env.tasks_file`` given relative to the start directory are saved absolute, so
    ``--resume`` from elsewhere reads the same model and tasks."""
    import shutil

    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    start.mkdir()
    elsewhere.mkdir()
    shutil.copytree(model_dir, start / "m")
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + 2?"}], "reward_model": {"ground_truth": str(i + 2)}}
            for i in range(8)]  # fmt: skip
    (start / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run_dir = tmp_path / "run"
    monkeypatch.chdir(start)
    args = ["train", "--model", "m", "--steps", "1", "--run-dir", str(run_dir), *TINY,
            "--set", "env.name=tir-math", "--set", "env.tasks_file=tasks.jsonl", "--set", "env.eval_size=2",
            "--set", "trainer.eval_before_after=false", "--set", "trainer.checkpoint_every=1"]  # fmt: skip
    code, _ = _main(args, capsys)
    assert code == 0
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["model"]["path"] == str(start / "m") and saved["env"]["tasks_file"] == str(start / "tasks.jsonl")
    monkeypatch.chdir(elsewhere)
    code, _ = _main(["train", "--resume", str(run_dir), "--steps", "2", "--no-progress"], capsys)
    assert code == 0, capsys.readouterr().err
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]
    assert json.loads((run_dir / "config.json").read_text())["env"]["tasks_file"] == str(start / "tasks.jsonl")


def test_a_bad_row_deep_in_the_task_file_is_reported_before_the_model_loads(
    model_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """The preflight samples 64 rows; a bad row after them used to surface after the model (and the generator)
    had loaded — minutes for a real checkpoint on a GPU. Both commands now read the whole file first."""
    import tirl.trainer.run
    import tirl.trainer.wiring

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the task file was read")

    monkeypatch.setattr(tirl.trainer.run, "build_parts", no_model)
    monkeypatch.setattr(tirl.trainer.wiring, "build_parts", no_model)
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + 2?"}], "reward_model": {"ground_truth": str(i + 2)}}
            for i in range(100)]  # fmt: skip
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"prompt": 3}\n'
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(text, encoding="utf-8")
    sets = ["--set", "env.name=tir-math", "--set", f"env.tasks_file={tasks}"]
    for args in (["train", "--model", str(model_dir), "--run-dir", str(tmp_path / "run"), *TINY, *sets],
                 ["eval", "--model", str(model_dir), *sets]):  # fmt: skip
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"{tasks}:101:" in err and "'prompt' must be a non-empty list" in err, err
        assert "Traceback" not in err and "model was loaded" not in err
    assert not (tmp_path / "run").exists()


def test_eval_sampled_uses_the_training_sampling_and_repeats_itself(capsys) -> None:
    """``--sampled``: the shipped tir-chain warm start at temperature 1 (the default training sampling) against
    greedy on the same 16 tasks — the episodes differ, and the same sampled command gives the same episodes."""
    base = ["eval", "--n", "16", "--json", "--set", "trainer.threads=1"]
    runs = []
    for extra in ([], ["--sampled"], ["--sampled"]):
        code, out = _main([*base, *extra], capsys)
        assert code == 0
        runs.append(json.loads(out.strip().splitlines()[-1]))
    greedy, sampled, again = runs
    assert greedy["decoding"] == "greedy" and sampled["decoding"] == "sampled (temperature 1, top-p 1)"
    assert sampled["tasks"] == again["tasks"]  # seeded per task: reproducible
    assert [t["id"] for t in sampled["tasks"]] == [t["id"] for t in greedy["tasks"]]  # the same tasks
    assert sampled["tasks"] != greedy["tasks"]  # but not the greedy episodes


def test_eval_samples_reports_pass_at_k(capsys) -> None:
    """``--sampled --samples 4``: four episodes of each of 8 tir-chain tasks, counted per task; pass@1 is the
    episodes' accuracy and pass@k never falls as k grows; the same command repeats itself."""
    base = ["eval", "--n", "8", "--json", "--set", "trainer.threads=1", "--sampled", "--samples", "4"]
    outs = []
    for _ in range(2):
        code, out = _main(base, capsys)
        assert code == 0
        outs.append(json.loads(out.strip().splitlines()[-1]))
    first, again = outs
    passes = first["pass_at_k"]
    assert first["n"] == 32 and passes["samples"] == 4 and len(passes["solved"]) == 8
    ids = sorted({t["id"] for t in first["tasks"]})
    assert sorted(passes["solved"]) == ids and all(0 <= c <= 4 for c in passes["solved"].values())
    for tid, c in passes["solved"].items():  # the per-task counts are the episodes' own verdicts
        assert c == sum(1 for t in first["tasks"] if t["id"] == tid and t["correct"])
    at = passes["pass_at"]
    assert at["1"] == pytest.approx(first["correct"] / 32)
    assert at["1"] <= at["2"] <= at["4"] and at["4"] == pytest.approx(passes["ever_solved"] / 8)
    assert again["pass_at_k"] == passes and again["tasks"] == first["tasks"]
    code, out = _main([a for a in base if a != "--json"], capsys)  # the text output names the figures
    assert code == 0 and f"pass@4 {at['4']:.3f}" in out and "tasks solved by at least one sample" in out


@pytest.mark.parametrize(("extra", "says"), [(["--samples", "4"], "needs --sampled"),
                                             (["--sampled", "--samples", "0"], "must be between 1 and")])  # fmt: skip
def test_eval_samples_bad_values_are_one_error_line(extra: list[str], says: str, capsys) -> None:
    code = main(["eval", "--n", "4", *extra])
    err = capsys.readouterr().err
    assert code == 2 and says in err and err.startswith("error: --samples") and "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "says"),
    [  # a greedy evaluation took these and decoded greedily; a sampled one at temperature 0 drew K equal episodes
        (["--set", "generation.temperature=0.3"], "error: --set generation.temperature=0.3: greedy decoding"),
        (["--set", "generation.top_p=0.9"], "error: --set generation.top_p=0.9: greedy decoding"),
        (["--sampled", "--samples", "4", "--set", "generation.temperature=0"],
         "error: --sampled at generation.temperature=0 is greedy decoding: every sample of a task is one episode"),
    ],
)  # fmt: skip
def test_eval_decoding_settings_that_would_do_nothing_are_refused(extra: list[str], says: str, capsys) -> None:
    code = main(["eval", "--n", "4", *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(says) and err.count("\n") == 1, err


def test_a_config_files_temperature_under_greedy_eval_is_a_note(tmp_path: Path, capsys) -> None:
    """A file shared with `tirl train` may carry the training temperature: greedy evaluation says it is unused."""
    import argparse

    from tirl.commands import evaluate

    toml = tmp_path / "c.toml"
    toml.write_text("[generation]\ntemperature = 0.7\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    evaluate.add_arguments(parser)
    evaluate._config(parser.parse_args(["--config", str(toml)]))
    assert "note: generation.temperature from the config file is not used: greedy decoding" in capsys.readouterr().err


@pytest.mark.parametrize("n", ["0", "-3", "1000001"])
def test_eval_n_out_of_range_names_the_flag(n: str, capsys) -> None:
    """``--n`` sets env.eval_size; its error names ``--n``, the flag typed (before: ``config env.eval_size=-3``)."""
    code = main(["eval", "--env", "swe-lite", "--n", n])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: --n {n} is invalid") and err.count("\n") == 1


def test_the_end_of_a_run_prints_what_tirl_report_warns_about(tmp_path: Path, capsys, monkeypatch) -> None:
    """`tirl train` wrote report.html at its end but none of the warnings `tirl report` prints on stderr: a
    section it could not read was visible only inside the page. The run itself is replaced by its summary step."""
    import tirl.commands.train as train_command
    from tirl.trainer.run import TrainingRun

    def summary_only(cfg, run_dir: Path, args, start, stop=None) -> dict:
        (run_dir / "pipeline_trace.jsonl").write_text('{"t": 0}\n')  # a snapshot without its queue depths
        return TrainingRun(cfg, run_dir, lock=False).summarize({}, time.perf_counter())

    monkeypatch.setattr(train_command, "_train", summary_only)
    run_dir = tmp_path / "run"
    capsys.readouterr()
    assert main(["train", "--run-dir", str(run_dir), "--no-progress"]) == 0
    train_err = capsys.readouterr().err
    assert (run_dir / "report.html").is_file()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "again.html")]) == 0
    report_err = capsys.readouterr().err
    assert report_err.startswith(f"warning: {run_dir}/pipeline_trace.jsonl:1: snapshot lacks init_queue"), report_err
    assert report_err in train_err  # the same lines, from the same function


def test_a_resume_that_fails_in_its_set_up_leaves_the_runs_config(model_dir: Path, tmp_path: Path, capsys) -> None:
    """``--resume RUN --set algo.lora_rank=4`` of a full-model run failed at the optimiser's state, after the
    run's config.json had been rewritten with the refused settings: every later plain ``--resume`` then failed
    the same way, and the error's fix ("resume with the settings this checkpoint was written with") could not be
    followed without editing config.json by hand."""
    pytest.importorskip("peft")
    run_dir = tmp_path / "run"
    args = ["train", "--model", str(model_dir), "--steps", "1", "--run-dir", str(run_dir), *TINY]
    args += ["--set", "trainer.eval_before_after=false", "--set", "trainer.checkpoint_every=1", "--no-progress"]
    assert _main(args, capsys)[0] == 0
    saved = (run_dir / "config.json").read_bytes()
    resume = ["train", "--resume", str(run_dir), "--steps", "2", "--no-progress"]
    code, _ = _main([*resume, "--set", "algo.lora_rank=4"], capsys)
    assert code == 2
    assert (run_dir / "config.json").read_bytes() == saved
    assert _main(resume, capsys)[0] == 0
    assert json.loads((run_dir / "config.json").read_text())["trainer"]["steps"] == 2
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]
