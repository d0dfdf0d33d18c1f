"""The evidence bundle: 20-step windows around findings, the filter config, file:line of the rule and the filter."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from diag_synth import issue10_run, tirl_log, trace, write_jsonl

import tirl.parsing
from tirl.cli import main
from tirl.diagnostics import bundle as bundle_mod
from tirl.diagnostics.adapters import load_metrics


def test_training_bundle_window_config_and_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    log = write_jsonl(run / "metrics.jsonl", tirl_log(seed=0, inject="void_leak", at=(120,)))
    (run / "config.json").write_text(json.dumps({"filter": {"mode": "mask", "exec_langs": ["python"]}}))
    out = tmp_path / "bundle.md"
    assert main(["diagnose", "training", str(log), "--json", "--bundle", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "void_leak"
    text = out.read_text()
    # the window: steps 100..140, the finding marked
    steps = [int(m) for m in re.findall(r"^\| (?:\*\*)?(\d+)", text, flags=re.M)]
    assert steps == list(range(100, 141))
    assert "| **120** ←" in text
    assert '"mode": "mask"' in text and "config.json" in text
    # code locations point at the real definitions
    m = re.search(r"judge_message\): `(.+?):(\d+)`", text)
    assert m is not None
    path, line = m.group(1), int(m.group(2))
    assert Path(path).samefile(tirl.parsing.__file__)
    assert Path(path).read_text().splitlines()[line - 1].startswith("def judge_message(")
    m = re.search(r"VoidTurnFilter\): `(.+?):(\d+)`", text)
    assert m is not None and "class VoidTurnFilter" in Path(m.group(1)).read_text().splitlines()[int(m.group(2)) - 1]
    assert "in source order the filter call comes before the advantage computation" in text  # the real trainer


def test_training_bundle_names_void_drift_and_its_onset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_jsonl(tmp_path / "metrics.jsonl", issue10_run("drop_collapse", 1))
    out = tmp_path / "bundle.md"
    assert main(["diagnose", "training", str(log), "--json", "--bundle", str(out)]) == 0
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    onset = finding["step"]
    text = out.read_text()
    assert f"## Finding 1: void_drift at step {onset}" in text
    assert "the void share rose over many steps and stayed up" in text and "filter.mode=drop" in text
    assert "| void share |" in text and f"| **{onset}** ←" in text


def test_window_is_clipped_at_the_ends_and_nulls_are_shown(tmp_path: Path) -> None:
    rows = tirl_log(seed=0, n=30)
    rows[3]["train/is_ratio_max"] = None
    log = load_metrics(write_jsonl(tmp_path / "m.jsonl", rows))
    table = bundle_mod.log_window(log, 2, mark={2})
    lines = table.splitlines()
    assert len(lines) == 2 + 23  # header + steps 0..22
    assert "null" in lines[2 + 3]


def test_config_flag_wins_and_missing_config_is_said(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('[filter]\nmode = "off"\n')
    assert bundle_mod.filter_config(tmp_path, toml)["mode"] == "off"  # type: ignore[index]
    assert "not found" in str(bundle_mod.filter_config(tmp_path / "nowhere"))


def test_code_locations_degrade_when_a_module_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    real = bundle_mod._resolve

    def fake(module: str, attr: str | None = None):
        if module == "tirl.filters.void_turn":
            return None
        return real(module, attr)

    monkeypatch.setattr(bundle_mod, "_resolve", fake)
    locs = bundle_mod.code_locations()
    assert locs["batch filter (VoidTurnFilter)"].startswith("not available")
    assert locs["void-turn rule (judge_message)"].endswith(str(tirl.parsing.judge_message.__code__.co_firstlineno))


def test_trainer_order_is_read_from_the_syntax_tree(tmp_path: Path) -> None:
    src = tmp_path / "fake_trainer.py"
    src.write_text(
        '"""Docstring that mentions filter.apply( and advantages( first."""\n'
        "def step(self, groups):\n"
        "    adv = compute_advantages(groups)\n"
        "    kept = self.void_filter.apply(groups)\n"
        "    return adv, kept\n"
    )
    order = bundle_mod._trainer_order(str(src))
    assert "fake_trainer.py:4 in step (self.void_filter.apply)" in order["trainer: filter calls"]
    assert "fake_trainer.py:3 in step (compute_advantages)" in order["trainer: advantage calls"]
    assert "BEFORE the filter" in order["training step order"]


def test_pipeline_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write_jsonl(tmp_path / "pipeline_trace.jsonl", trace("evaluator", 0))
    out = tmp_path / "p.md"
    assert main(["diagnose", "pipeline", str(p), "--bundle", str(out)]) == 0
    assert f"evidence bundle: {out}" in capsys.readouterr().out
    text = out.read_text()
    assert "Verdict: **evaluator**" in text and "Backpressure from a bounded queue is a feature" in text
    assert text.count("\n| ") >= 40 and "rollout/pipeline.py" in text
    rows = trace("healthy", 0)
    for r in rows:
        r["gpu_util"] = None
    write_jsonl(p, rows)
    out.unlink()
    assert main(["diagnose", "pipeline", str(p), "--bundle", str(out)]) == 0
    assert (  # what the verdict did not check, in the words of the verdict line (the bundle said only **healthy**)
        "Verdict: **healthy** (only in part) — not (fully) checked on this trace: starved (the trace has no "
        "gpu_util, so an idle generator cannot be seen). Next: check nothing to fix" in out.read_text()
    )


TIRL_INTERNALS = ("tirl.parsing", "filter.max_resample_rounds", "filter.mode", "tirl audit", "VoidTurnFilter")


@pytest.mark.parametrize(
    ("fmt", "speaks"),
    [("verl", ("drop_void_trajectories", "RayPPOTrainer.fit", "actor_rollout_ref.")),
     ("trl", ("VoidFilteredGRPOTrainer", "GRPOConfig", "max_completion_length"))],
)  # fmt: skip
def test_advice_for_a_frameworks_log_speaks_its_language(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, speaks: tuple[str, ...]
) -> None:
    """Before: a verl (or TRL) log got tirl's advice — tirl.parsing, filter.max_resample_rounds, tirl's files."""
    from framework_logs import trl_step_metrics, write_trl_trainer_state, write_verl_file_log

    rows = tirl_log(seed=2, inject="void_leak")
    rows[60] = {**rows[60], "filter/valid_trajectories": 0.0, "filter/void_trajectories": 8.0}  # an empty step
    if fmt == "verl":
        log = write_verl_file_log(tmp_path / "experiment.jsonl", rows)
    else:
        log = write_trl_trainer_state(tmp_path / "trainer_state.json", rows)
        assert trl_step_metrics(rows[0])  # the plug-in's void keys are in the log
    out = tmp_path / "bundle.md"
    assert main(["diagnose", "training", str(log), "--bundle", str(out)]) == 0
    table = " ".join(capsys.readouterr().out.split())
    text = out.read_text()
    for shown in (table, text):
        assert all(word in shown for word in speaks), (fmt, shown[-2000:])
        assert not any(word in shown for word in TIRL_INTERNALS), [w for w in TIRL_INTERNALS if w in shown]
    assert "tirl/parsing.py" not in text and "tirl/trainer" not in text
