"""Every file in ``examples/`` runs at toy size, through the code a user runs (``examples/README.md``).

The tiny built-in model answers badly, so these check that each example runs end to end and leaves what it
promises (void metrics, trained steps, a tool result), not that anything learns.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tirl.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TINY = ["--steps", "1", "--no-progress", "--set", "trainer.prompts_per_step=2", "--set", "algo.group_size=2",
        "--set", "generation.max_new_tokens=8", "--set", "generation.max_total_tokens=200", "--set", "env.eval_size=2",
        "--set", "trainer.threads=1", "--set", "trainer.eval_before_after=false"]  # fmt: skip


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trained(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]


def test_every_example_is_listed_and_tested() -> None:
    listed = (EXAMPLES / "README.md").read_text()
    names = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*") if p.suffix in (".py", ".toml"))
    assert names and all(f"`{n}`" in listed or f"`{n}`" in listed.replace(" + ", "` `") for n in names), names
    this = Path(__file__).read_text()
    assert all(Path(n).stem in this for n in names)


@pytest.mark.slow
def test_trl_grpo_tools(tmp_path: Path) -> None:
    """TRL 1.16 + VoidFilteredGRPOTrainer, two sandboxed tool turns per completion (~20 s on an idle core)."""
    pytest.importorskip("trl")
    from tirl.diagnostics.adapters import load_metrics

    trainer = _load("trl_grpo_tools").main(["--toy", "--out", str(tmp_path / "trl")])
    logged = trainer.state.log_history[0]
    assert {"void/trajectories", "void/ratio", "reward"} <= set(logged)
    log = load_metrics(tmp_path / "trl" / "trainer_state.json")
    assert log.format == "trl" and log.get("void") == [logged["void/trajectories"]]


def test_verl_void_filter() -> None:
    sys.path.insert(0, str(ROOT / "tests" / "integrations"))
    from test_verl_plugin import _batch, _tokenizer

    tok = _tokenizer()
    metrics: dict[str, Any] = {}
    step = _load("verl_void_filter").void_filter_step
    batch = step(_batch(tok), tok, 1, metrics)
    assert list(batch.non_tensor_batch["row"]) == [0, 2]  # rows 1, 3 and 4 hold a void turn; 5 is left alone
    assert metrics["filter/void_trajectories"] == 3 and metrics["filter/valid_trajectories"] == 3
    assert metrics["filter/thin_group_trajectories"] == 1
    assert step(_batch(tok), tok, 4, metrics) is None  # 2 rows for 4 ranks: skip the step


@pytest.mark.slow
def test_skyrl_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)  # the config names its task file relative to the repository
    run_dir = tmp_path / "run"
    args = ["train", "--config", "examples/skyrl/config.toml", "--run-dir", str(run_dir), *TINY]
    assert main(args) == 0
    assert "note: actor_rollout_ref.rollout.n is verl's name for algo.group_size" in capsys.readouterr().err
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algo"]["group_size"] == 2 and config["algo"]["loss_agg"] == "token_mean"  # --set after the file
    assert config["filter"]["action_rule"] == "gsm8k" and len(_trained(run_dir)) == 4


@pytest.mark.slow
def test_make_parquet(tmp_path: Path) -> None:
    path = _load("make_parquet").write(tmp_path / "tasks.parquet", 8)
    run_dir = tmp_path / "run"
    args = ["train", "--run-dir", str(run_dir), *TINY, "--set", f"env.tasks_file={path}",
            "--set", "filter.action_rule=gsm8k"]  # fmt: skip
    assert main(args) == 0
    users = {m["content"][:12] for t in _trained(run_dir) for m in t["messages"] if m["role"] == "user"}
    assert users and all(u.startswith("Ann has") for u in users)


@pytest.mark.slow
def test_verifiers_calc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("verifiers")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    run_dir = tmp_path / "run"
    args = ["train", "--run-dir", str(run_dir), *TINY, "--set", "env.name=verifiers:verifiers_calc:load_environment",
            "--set", "env.offer_tools=false"]  # fmt: skip
    assert main(args) == 0
    assert len(_trained(run_dir)) == 4 and all("metrics" in t["info"]["eval"] for t in _trained(run_dir))


@pytest.mark.slow
def test_serve_tool_loop(tmp_path: Path) -> None:
    """A model taught one tool call, served by a real `tirl serve`; the example's loop runs the call."""
    sys.path.insert(0, str(ROOT / "tests" / "inference"))
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from server_proc import serve
    from test_serve_tools import _overfit

    from tirl.models.init import ModelSpec, init_model

    model_dir = _overfit(init_model(ModelSpec(arch="qwen2"), tmp_path / "init"), tmp_path / "m")
    with serve(model_dir) as (url, _name, _proc):
        messages = _load("serve_tool_loop").main(["What is 6*7?", "--base-url", url, "--max-rounds", "2"])
    tools = [m for m in messages if m["role"] == "tool"]
    assert tools and tools[0]["content"].strip() == "42"  # the call ran in the sandbox
    assert messages[1]["tool_calls"][0]["function"]["name"] == "python"
