"""The training-log readers on logs laid out as verl, SimpleTIR and wandb write them (``framework_logs``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from diag_synth import tirl_log, write_jsonl
from framework_logs import (
    chart_exports,
    simpletir_step_metrics,
    skyrl_step_metrics,
    trl_step_metrics,
    write_trl_trainer_state,
    write_verl_file_log,
    write_wandb_chart_csv,
)

from tirl.cli import main
from tirl.diagnostics.adapters import load_logs, load_metrics
from tirl.diagnostics.training import diagnose_training
from tirl.errors import InputError


@pytest.mark.parametrize("version", ["0.6.0", "main"])
def test_verl_file_logger(tmp_path: Path, version: str) -> None:
    rows = tirl_log(seed=2, inject="void_leak")
    path = write_verl_file_log(tmp_path / "experiment.jsonl", rows, version)
    first = json.loads(path.read_text().splitlines()[1])
    assert set(first) >= {"step", "data"} and "actor/grad_norm" in first["data"]  # the layout verl writes
    log = load_metrics(path)
    # the validation line at step 0 and the fixture's training line of step 0 are one step (no key in common)
    assert log.format == "verl" and log.steps[:3] == [0, 1, 2] and len(log) == len(rows)
    assert log.rows[0]["val-core/gsm8k/reward/mean@1"] == 0.41
    assert log.get("is_max")[0] == pytest.approx(rows[0]["train/is_ratio_max"])
    assert log.get("turns_mean")[5] == pytest.approx(rows[5]["rollout/turns_mean"])
    assert log.get("entropy")[5] == pytest.approx(rows[5]["train/entropy"])
    diag = diagnose_training(log)
    assert diag.verdict == "void_leak" and [f.step for f in diag.findings] == [120]
    assert "note_valid" in diag.findings[0].evidence  # verl has no void filter


def test_verl_healthy_file_log_has_no_finding(tmp_path: Path) -> None:
    log = load_metrics(write_verl_file_log(tmp_path / "m.jsonl", tirl_log(seed=3), "main"))
    assert diagnose_training(log).verdict == "healthy"


def _simpletir_runs(drift_run: str, healthy_run: str) -> dict[str, list[dict]]:
    out = {}
    for run, rows in (
        (drift_run, tirl_log(seed=4, inject="void_drift", at=(90,))),
        (healthy_run, tirl_log(seed=5)),
    ):
        out[run] = [{"step": r["step"], **simpletir_step_metrics(r)} for r in rows]
    return out


METRICS = [
    "env/void_turn_ratio",
    "response_length/max",
    "actor/grad_norm",
    "actor/entropy_loss",
    "env/num_turns/mean",
    "batch/effective_batch_size",
]


def test_several_chart_exports_of_two_simpletir_runs_are_diagnosed_per_run(tmp_path: Path) -> None:
    drift, healthy = "simpletir - qwen 7b - seed 1", "simpletir - qwen 7b - seed 0"  # run names with " - "
    runs = _simpletir_runs(drift, healthy)
    paths = chart_exports(tmp_path, runs, METRICS)
    logs = load_logs(paths)
    assert [log.run for log in logs] == [drift, healthy] and all(log.format == "simpletir" for log in logs)
    for log in logs:
        assert len(log) == 200 and log.get("valid") is None  # effective_batch_size counts groups: not read
        assert log.get("void_ratio") == [r["env/void_turn_ratio"] for r in runs[log.run]]
        assert log.get("entropy") is not None and log.get("turns_mean") is not None
    verdicts = {log.run: diagnose_training(log).verdict for log in logs}
    assert verdicts == {drift: "void_drift", healthy: "healthy"}
    (only,) = load_logs(paths, run=healthy)
    assert only.run == healthy
    with pytest.raises(InputError, match="runs found: 'simpletir - qwen 7b - seed 1'"):
        load_logs(paths, run="simpletir")
    with pytest.raises(InputError, match="pick one with --run"):
        load_metrics(paths[0])


def test_bucket_max_keeps_a_spike_that_the_bucket_mean_hides(tmp_path: Path) -> None:
    rows = [{"step": r["step"], **simpletir_step_metrics(r)} for r in tirl_log(seed=6, inject="void_leak")]
    verl_rows = tirl_log(seed=6, inject="void_leak")
    series = {"grpo - a": [(r["step"], r["train/is_ratio_max"]) for r in verl_rows]}
    is_csv = write_wandb_chart_csv(tmp_path / "is.csv", "rollout_corr/rollout_is_max", series, bucket=4)
    lens = {"grpo - a": [(r["step"], r["response_length/max"]) for r in rows]}
    len_csv = write_wandb_chart_csv(tmp_path / "len.csv", "response_length/max", lens, bucket=4)
    (log,) = load_logs([is_csv, len_csv])
    assert log.format == "verl" and log.steps[:3] == [0, 4, 8]
    at = log.steps.index(120)
    assert log.get("is_max")[at] == pytest.approx(verl_rows[120]["train/is_ratio_max"])  # the __MAX column
    assert log.get("max_len")[at] == 4096
    diag = diagnose_training(log)
    assert diag.verdict == "void_leak" and [f.step for f in diag.findings] == [120]


def test_cli_several_exports_and_run_selection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    drift, healthy = "a - b - 1", "a - b - 0"
    paths = [str(p) for p in chart_exports(tmp_path, _simpletir_runs(drift, healthy), METRICS)]
    assert main(["diagnose", "training", *paths, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["run"], r["verdict"]) for r in out["runs"]] == [(drift, "void_drift"), (healthy, "healthy")]
    assert main(["diagnose", "training", *paths, "--run", drift, "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["run"] == drift and one["verdict"] == "void_drift"
    assert one["findings"][0]["kind"] == "void_drift" and one["findings"][0]["evidence"]["onset_step"] >= 85
    assert main(["diagnose", "training", *paths, "--run", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no run named 'nope'" in err and "--run" in err
    assert main(["diagnose", "training", *paths]) == 0
    text = capsys.readouterr().out
    assert f"run '{drift}'" in text and "void_drift" in text and f"run '{healthy}'" in text


def test_trl_trainer_state_is_read_with_the_plugins_void_counts(tmp_path: Path) -> None:
    rows = tirl_log(seed=2, inject="late_filter")
    path = write_trl_trainer_state(tmp_path / "trainer_state.json", rows)
    log = load_metrics(path)
    assert log.format == "trl" and len(log) == len(rows)  # the summary row is not a step
    i = next(k for k, r in enumerate(rows) if r.get("filter/valid_trajectories") is not None)
    assert log.get("void")[i] == rows[i]["filter/void_trajectories"]
    assert log.get("valid")[i] == pytest.approx(rows[i]["filter/valid_trajectories"])  # from void count + share
    assert log.get("is_max")[i] == pytest.approx(rows[i]["train/is_ratio_max"])
    assert diagnose_training(log).verdict == "late_filter"


def test_trl_log_history_as_jsonl_and_with_the_wandb_prefix(tmp_path: Path) -> None:
    rows = tirl_log(seed=2, inject="void_leak")
    plain = write_jsonl(
        tmp_path / "trl.jsonl", [{**trl_step_metrics(r, plugin=False), "step": r["step"]} for r in rows]
    )
    assert diagnose_training(load_metrics(plain)).verdict == "void_leak"
    prefixed = [{"_step": r["step"], **{f"train/{k}": v for k, v in trl_step_metrics(r).items()}} for r in rows]
    log = load_metrics(write_jsonl(tmp_path / "wandb.jsonl", prefixed))
    assert log.format == "trl" and diagnose_training(log).verdict == "void_leak"


def test_a_trl_log_without_is_ratio_or_void_keys_names_what_is_needed(tmp_path: Path) -> None:
    rows = [{"step": r["step"], "loss": 0.1, "reward": 0.5, "frac_reward_zero_std": 0.1} for r in tirl_log(n=10)]
    with pytest.raises(InputError, match="importance_sampling_ratio/max"):
        load_metrics(write_jsonl(tmp_path / "trl.jsonl", rows))


def test_skyrl_metrics(tmp_path: Path) -> None:
    rows = tirl_log(seed=2, inject="void_leak")
    log = load_metrics(write_jsonl(tmp_path / "skyrl.jsonl", [skyrl_step_metrics(r) for r in rows]))
    assert log.format == "skyrl" and log.steps[:3] == [r["step"] for r in rows[:3]]
    diag = diagnose_training(log)
    assert diag.verdict == "void_leak" and [f.step for f in diag.findings] == [120]


@pytest.mark.parametrize("text", ["", "\n", "Step\n"])
def test_an_empty_or_header_only_csv_has_no_rows(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A 0-byte CSV used to name no run at all: exit 0, nothing printed, a 0-byte --bundle, `{"runs": []}`."""
    path = tmp_path / "export.csv"
    path.write_text(text)
    with pytest.raises(InputError, match="the log has no rows"):
        load_logs([path])
    assert main(["diagnose", "training", str(path), "--json"]) == 2
    got = capsys.readouterr()
    assert got.out == "" and got.err.startswith(f"error: {path}: the log has no rows")
