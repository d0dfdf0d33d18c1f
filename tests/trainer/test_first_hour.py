"""What a new user sees: step lines in words, evaluation progress, the checks before a run, honest diagnose lines.

Real parts throughout: the real config loader, task-file reader and action rules, the real `tirl diagnose`
on a real run's metrics (tests/diagnostics/data), a real rollout strategy's board for the progress count.
The verifiers case loads the local verifiers env of tests/integrations (skipped where verifiers is missing).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tirl.cli import main
from tirl.config import load_config
from tirl.errors import ConfigError
from tirl.rollout.trace import StageBoard
from tirl.trainer.preflight import answer_format_warning, check_tools, run_label
from tirl.trainer.progress import EvalProgress, describe

HERE = Path(__file__).resolve().parent
REAL_OFF = HERE.parent / "diagnostics" / "data" / "real_off_lr3e-4_seed0.metrics.jsonl"
SRC = HERE.parents[1] / "src"


# ------------------------------------------------------------------ step lines
def _row(**kw: Any) -> dict[str, Any]:
    base = {"reward/mean": 0.5, "filter/valid_trajectories": 8.0, "filter/void_trajectories": 0.0,
            "rollout/trajectories": 8.0, "rollout/failed": 0.0, "train/skipped_step": 0,
            "train/is_ratio_max": 1.2, "train/grad_norm": 0.3}  # fmt: skip
    return {**base, **kw}


def test_a_step_that_updated_shows_its_ratio_and_gradient() -> None:
    line = describe(_row())
    assert "IS max 1.200" in line and "grad 0.300" in line and "resampled" not in line


ALL_VOID = _row(**{"filter/valid_trajectories": 0.0, "filter/void_trajectories": 8.0, "train/skipped_step": 1,
                   "train/is_ratio_max": None, "train/grad_norm": None})  # fmt: skip
NO_SIGNAL = _row(**{"train/no_signal": 1, "train/is_ratio_max": None, "train/grad_norm": None})
ALL_FAILED = _row(**{"rollout/failed": 8.0, "filter/valid_trajectories": 0.0, "train/skipped_step": 1,
                     "train/tolerated_failed_steps": 1})  # fmt: skip


ALL_VOID_KEPT = _row(
    **{
        "train/no_signal": 1,
        "filter/valid_trajectories": 0.0,
        "filter/void_trajectories": 8.0,
        "train/is_ratio_max": None,
        "train/grad_norm": None,
    }
)  # fmt: skip  (filter.mode=off)


@pytest.mark.parametrize(
    ("row", "says"),
    [(ALL_VOID, "all void"), (NO_SIGNAL, "no signal (all rewards equal)"),
     (ALL_FAILED, "all 8 failed (tolerated: 1 so far)"),
     (ALL_VOID_KEPT, "all void, no signal (all rewards equal)")],
)  # fmt: skip
def test_a_step_without_an_update_says_why_in_words(row: dict[str, Any], says: str) -> None:
    """Before: `valid/void 0/8  IS max -  grad -` with no word of why."""
    line = describe(row)
    assert says in line and "IS max" not in line


def test_resampled_groups_are_counted_in_the_step_line() -> None:
    assert describe(_row(**{"filter/resampled_groups": 3})).endswith("resampled 3 groups")
    assert describe(_row(**{"filter/resampled_groups": 1})).endswith("resampled 1 group")


# ---------------------------------------------------------- evaluation progress
def test_evaluation_progress_prints_start_count_and_end_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    board = StageBoard()

    async def go() -> None:
        async with EvalProgress(4, "held-out tir-chain tasks", lambda: board, interval_s=0.01,
                                line_every_s=0.0) as bar:  # fmt: skip
            for _ in range(4):
                board.start("run") if board.queued["run"] else None
                board.done["run"] += 1
                await asyncio.sleep(0.03)
        bar.report(3, 4)

    asyncio.run(go())
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "evaluating 4 held-out tir-chain tasks..."
    assert any(line.startswith("  ... ") and "/4 done" in line for line in err[1:-1])
    assert err[-1].startswith("evaluated 4 held-out tir-chain tasks: accuracy 0.750 (3/4) in ")


# ------------------------------------------------------------------- preflight
def test_tools_the_built_in_model_cannot_render_are_refused_with_the_set_that_fixes_it() -> None:
    with pytest.raises(ConfigError) as err:  # tir-math's built-in model (tiny-tir) has no tool template
        check_tools(load_config(None, ["env.name=tir-math", "env.tools=true"]))
    assert "built-in model's chat format has no tool support" in str(err.value)
    assert "--set env.tools=false" in str(err.value)
    check_tools(load_config(None, []))  # no tools offered: nothing to check
    check_tools(load_config(None, ["env.tools=true"]))  # tir-chain with tools: its built-in qwen2-chain has them


def test_a_verifiers_tool_env_with_the_built_in_model_fails_before_the_model_loads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's case: before, every episode failed with SetupError and the run exited 0."""
    pytest.importorskip("verifiers")
    sys.path.insert(0, str(HERE.parents[1] / "examples"))  # verifiers_calc, the example verifiers environment
    name = "verifiers:verifiers_calc:load_environment"
    with pytest.raises(ConfigError) as err:
        check_tools(load_config(None, [f"env.name={name}"]))
    text = str(err.value)
    assert text.startswith(f"env {name} offers the model") and "--set env.offer_tools=false" in text
    check_tools(load_config(None, [f"env.name={name}", "env.offer_tools=false"]))  # the fix works


def _task_file(tmp_path: Path, instruction: str) -> Path:
    path = tmp_path / "gsm8k-train.jsonl"
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + 2? {instruction}"}],
             "reward_model": {"ground_truth": str(i + 2)}} for i in range(6)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_gsm8k_task_file_under_the_tir_rule_gets_a_warning_naming_the_rule(tmp_path: Path) -> None:
    tasks = _task_file(tmp_path, "Let's think step by step and output the final answer after '####'.")
    cfg = load_config(None, ["env.name=tir-math", f"env.tasks_file={tasks}"])
    warning = answer_format_warning(cfg)
    assert warning is not None and "6 of the first 6 prompts" in warning
    assert warning.endswith("use --set filter.action_rule=gsm8k")
    fixed = load_config(None, ["env.name=tir-math", f"env.tasks_file={tasks}", "filter.action_rule=gsm8k"])
    assert answer_format_warning(fixed) is None
    boxed = _task_file(tmp_path, "Put the answer in \\\\boxed{}.")
    assert answer_format_warning(load_config(None, ["env.name=tir-math", f"env.tasks_file={boxed}"])) is None


def _first_messages(cfg_sets: list[str]) -> list[Any]:
    """The opening messages of an episode of the run's first task, through the trainer's env and task loaders."""
    from tirl.envs.registry import load_tasks, make_env
    from tirl.filters.void_turn import rules_from_config

    cfg = load_config(None, cfg_sets)
    task = load_tasks(cfg.env, 1)[0]
    env = make_env(cfg.env.name, config=cfg.env, rules=rules_from_config(cfg.filter, cfg.env))

    async def go() -> list[Any]:
        try:
            return await env.reset(task)
        finally:
            await env.close()

    return asyncio.run(go())


def test_a_verl_gsm8k_parquet_row_keeps_its_own_answer_instruction(tmp_path: Path) -> None:
    """Before: the env's "answer as \\boxed{...}" system prompt went ahead of the row's "answer after ####"."""
    sys.path.insert(0, str(HERE.parents[1] / "examples"))
    from make_parquet import INSTRUCTION, write  # pyarrow writes the parquet, in verl's gsm8k row layout

    parquet = write(tmp_path / "gsm8k-train.parquet", 4)
    for env in ("tir-chain", "tir-math"):
        messages = _first_messages([f"env.name={env}", f"env.tasks_file={parquet}", "filter.action_rule=gsm8k"])
        assert [m.role.value for m in messages] == ["user"] and messages[0].content.endswith(INSTRUCTION)
    plain = tmp_path / "plain.jsonl"  # rows that ask for no answer format still get the env's instructions
    plain.write_text(json.dumps({"prompt": [{"role": "user", "content": "What is 2 + 2?"}],
                                 "reward_model": {"ground_truth": "4"}}) + "\n", encoding="utf-8")  # fmt: skip
    messages = _first_messages([f"env.tasks_file={plain}"])
    assert [m.role.value for m in messages] == ["system", "user"] and "boxed" in (messages[0].content or "")


def test_runs_and_evaluation_lines_are_named_after_the_task_file(tmp_path: Path) -> None:
    tasks = _task_file(tmp_path, "")
    assert run_label(load_config(None, [f"env.tasks_file={tasks}"])) == "gsm8k-train"
    assert run_label(load_config(None, [])) == "tir-chain"


def test_greedy_training_starts_with_one_warning_saying_why_it_learns_nothing() -> None:
    """``generation.temperature=0`` trained in silence: every group one episode repeated, all advantages 0.

    Warned, not refused (tests/trainer/test_resume_exact.py trains greedily on purpose); a temperature > 0
    and a greedy *evaluation* (always greedy, whatever the temperature) get no warning.
    """
    from tirl.trainer.preflight import start_warnings

    greedy = load_config(None, ["generation.temperature=0", "algo.group_size=4"])
    [warning] = start_warnings(greedy)
    assert warning.startswith("generation.temperature=0 samples greedily: the 4 samples of a task are one episode")
    assert "every grpo advantage is 0 and nothing is learned" in warning
    assert "softmax(logits), not of the argmax" in warning and "--set generation.temperature=1.0" in warning
    assert start_warnings(load_config(None, ["generation.temperature=0.01"])) == []
    assert start_warnings(load_config(None, [])) == []


# -------------------------------------------------------------------- diagnose
def test_diagnose_claims_no_active_filter_on_a_run_with_filter_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "the filter is active" on this filter.mode=off run."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(REAL_OFF, run / "metrics.jsonl")
    (run / "config.json").write_text(json.dumps({"filter": {"mode": "off"}}), encoding="utf-8")
    assert main(["diagnose", "training", str(run)]) == 0
    first, line = capsys.readouterr().out.splitlines()
    assert first.endswith("verdict healthy") and "active" not in line and "acts" not in line
    assert line.endswith("; filter.mode=off: void trajectories are counted but stay in the update.")


def test_piped_tables_are_not_cut_at_80_columns(tmp_path: Path) -> None:
    log = HERE.parent / "diagnostics" / "data" / "real_drop_lr3e-4_seed0.metrics.jsonl"
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "tirl.cli", "diagnose", "training", str(log)],
                          capture_output=True, text=True, env=env, timeout=120, check=True)  # fmt: skip
    widths = [len(line) for line in proc.stdout.splitlines() if line.startswith(("┏", "┃", "│", "└"))]
    assert widths and max(widths) > 80


def test_diagnose_points_an_all_failed_step_at_the_env_not_the_filter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `empty_batch` with only "check resampling" for a step whose every episode failed at set-up."""
    row = {"step": 1, "rollout/trajectories": 4, "rollout/failed": 4, "filter/valid_trajectories": 0,
           "filter/void_trajectories": 0, "filter/void_ratio": 0.0, "train/is_ratio_max": None}  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert main(["diagnose", "training", str(tmp_path), "--json"]) == 0
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["kind"] == "empty_batch" and finding["evidence"]["failed"] == [4]
    assert main(["diagnose", "training", str(tmp_path)]) == 0
    assert "the env or its set-up failed" in " ".join(capsys.readouterr().out.split())  # the table wraps it


# ------------------------------------------------------------- piped progress
def test_piped_progress_is_documented_where_the_user_meets_it(capsys: pytest.CaptureFixture[str]) -> None:
    """The 15 s of a piped evaluation's lines, in `tirl train --help`, docs/cli.md and the code, agree."""
    from tirl.trainer.progress import PIPED_LINE_EVERY_S

    every = f"every {PIPED_LINE_EVERY_S:g} s"
    assert EvalProgress(1, "x", lambda: None).line_every_s == PIPED_LINE_EVERY_S
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert every in " ".join(capsys.readouterr().out.split())
    cli_doc = " ".join((HERE.parents[1] / "docs" / "cli.md").read_text(encoding="utf-8").split())
    assert "piped or a file" in cli_doc and every in cli_doc


def test_piped_training_prints_one_plain_line_per_step(capsys: pytest.CaptureFixture[str]) -> None:
    from tirl.trainer.progress import TrainProgress

    with TrainProgress(2) as bar:  # capsys: stderr is not a terminal
        bar.update(1, _row())
        bar.update(2, ALL_VOID)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("step 1/2  reward 0.500") and "all void" in lines[1]
    with TrainProgress(2, enabled=False) as bar:  # --no-progress
        bar.update(1, _row())
    assert capsys.readouterr().err == ""


def test_a_healthy_line_claims_no_ratio_check_on_a_log_without_is_ratios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a TRL trainer_state.json (no IS ratio logged) was 'healthy: no IS-ratio spike' — never checked."""
    sys.path.insert(0, str(HERE.parent / "diagnostics"))
    from diag_synth import tirl_log
    from framework_logs import write_trl_trainer_state

    rows = [{k: v for k, v in r.items() if not k.startswith("train/is_ratio")} for r in tirl_log(seed=3)][:4]
    log = write_trl_trainer_state(tmp_path / "trainer_state.json", rows)
    assert main(["diagnose", "training", str(log)]) == 0
    line = " ".join(capsys.readouterr().out.split("\n", 1)[1].split())
    assert "no IS-ratio spike" not in line and "no IS ratio" in line and "void_leak" in line
    assert main(["diagnose", "training", str(REAL_OFF)]) == 0  # a log with ratios: what the spike rules saw
    line = " ".join(capsys.readouterr().out.split("\n", 1)[1].split())
    # its IS-ratio min falls to 0.003 at step 11 (and near 0 at 16, 18): spikes, but no row of the table
    assert "no IS-ratio spike" not in line and "IS-ratio spikes at 3 steps (11, 16, 18) matched no row" in line


# ---------------------------------------------------------------- tirl eval
def test_eval_of_a_run_directory_uses_the_runs_own_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `tirl eval --model RUN` of a run trained on a parquet evaluated on tir-chain, without a word."""
    import argparse

    from tirl.commands import evaluate
    from tirl.config import config_to_dict

    tasks = _task_file(tmp_path, "Output the final answer after '####'.")
    run = tmp_path / "run"
    run.mkdir()
    trained = load_config(None, [f"env.tasks_file={tasks}", "filter.action_rule=gsm8k", "env.eval_size=3"])
    (run / "config.json").write_text(json.dumps(config_to_dict(trained)), encoding="utf-8")

    def config(argv: list[str]) -> Any:
        parser = argparse.ArgumentParser()
        evaluate.add_arguments(parser)
        return evaluate._config(parser.parse_args(argv))

    cfg = config(["--model", str(run)])
    assert (cfg.env.tasks_file, cfg.filter.action_rule, cfg.env.eval_size) == (str(tasks), "gsm8k", 3)
    assert run_label(cfg) == "gsm8k-train"
    note = capsys.readouterr().err
    assert note.startswith("note: evaluating on the run's tasks") and str(run / "config.json") in note
    assert config(["--model", str(run), "--env", "tir-math"]).env.name == "tir-math"  # the options still win
    own = tmp_path / "own.toml"
    own.write_text('[env]\nname = "tir-math"\n', encoding="utf-8")
    assert config(["--model", str(run), "--config", str(own)]).env.tasks_file is None  # --config: not the run's


def test_eval_of_a_run_directory_decodes_as_the_run_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: only [env] and [filter] were taken, so a run trained at generation.max_new_tokens=20 read 0.000
    after training and `tirl eval --model RUN` gave 0.250 on the same tasks and weights (96 tokens a turn), and
    `--sampled` drew at temperature 1 where the run sampled at 0.5 (README: "at the training temperature")."""
    import argparse

    from tirl.commands import evaluate
    from tirl.config import config_to_dict

    run = tmp_path / "run"
    run.mkdir()
    sets = ["generation.temperature=0.5", "generation.top_p=0.9", "generation.max_new_tokens=20",
            "generation.max_total_tokens=300", "generation.prefix_cache_mb=8"]  # fmt: skip
    (run / "config.json").write_text(json.dumps(config_to_dict(load_config(None, sets))), encoding="utf-8")

    def config(argv: list[str]) -> Any:
        parser = argparse.ArgumentParser()
        evaluate.add_arguments(parser)
        return evaluate._config(parser.parse_args(argv))

    gen = config(["--model", str(run)]).generation
    assert (gen.temperature, gen.top_p, gen.max_new_tokens, gen.max_total_tokens) == (0.5, 0.9, 20, 300)
    assert gen.prefix_cache_mb == 1024.0  # a cache size is this machine's, not how the run's episodes went
    note = capsys.readouterr().err
    assert "decoding (greedy, 20 new tokens a turn, 300 in all)" in note, note
    assert config(["--model", str(run), "--sampled"]).generation.temperature == 0.5  # the run's, not 1
    note = capsys.readouterr().err
    assert "decoding (temperature 0.5, top-p 0.9, 20 new tokens a turn, 300 in all)" in note, note
    assert config(["--model", str(run), "--sampled", "--set", "generation.temperature=1.0"]).generation.temperature == 1
