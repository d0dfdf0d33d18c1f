"""SkyRL-style swe-lite rows through ``--env skyrl-gym``: the real swe-lite env, bubblewrap sandbox and judge.

Covered: ``tirl tasks export`` (files, atomic refusal), the round trip export → skyrl-gym route with
scripted policies (expert fix: 1, no fix: 0) giving the rewards of the native swe-lite routes on the same
tasks, the hidden tests absent from the workspace and a forged verdict refused on this route, bad rows as one
``error:`` line, and the docs/envs.md walkthrough (a toy repository) run as written.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tirl.cli import main
from tirl.config import EnvConfig, FilterConfig, RolloutConfig, SandboxConfig
from tirl.envs import check_env, env_factory, load_tasks
from tirl.envs.swe_lite import expert_solution
from tirl.envs.tasks.swe_curriculum import generate_curriculum
from tirl.errors import InputError
from tirl.filters import rules_from_config
from tirl.integrations.skyrl_gym import SkyRLGymEnv
from tirl.sandbox import create_sandbox
from tirl.sandbox.base import Sandbox
from tirl.testing.scripted import play

ROOT = Path(__file__).resolve().parents[2]
SUBMIT = "```bash\nsubmit\n```"
PIPELINE = RolloutConfig(strategy="pipeline", retries=0)  # Initializer -> Agent Runner -> Evaluator, as in training


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    """The real sandbox (bubblewrap where it works), no warm pool."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield create_sandbox(SandboxConfig(warm_pool=False, timeout_s=10.0), warn=False)


@pytest.fixture
def shared_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory every uid can traverse (the sandbox may run as another uid); the swe-lite cache inside it."""
    root = Path(tempfile.mkdtemp(prefix="tirl-skyrl-swe-", dir="/tmp"))
    os.chmod(root, 0o755)
    monkeypatch.setenv("TIRL_CACHE_DIR", str(root / "cache"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _factory(name: str, path: Path, sandbox: Sandbox) -> Any:
    cfg = EnvConfig(name=name, tasks_file=str(path), max_turns=10)
    rules = rules_from_config(FilterConfig(), cfg)
    return load_tasks(cfg, 100), env_factory(name, config=cfg, sandbox=sandbox, rules=rules)


def _export(out: Path, *args: str) -> None:
    assert main(["tasks", "export", "--out", str(out), *args]) == 0


async def test_export_round_trip_gives_the_native_rewards(sandbox: Sandbox, shared_tmp: Path) -> None:
    """Same tasks, three routes (generated, swe-lite JSONL, SkyRL rows via skyrl-gym): same chats and rewards."""
    out = shared_tmp / "export"
    _export(out, "--n", "2", "--seed", "3", "--split", "heldout")
    generated = generate_curriculum(2, seed=3, split="heldout")
    native_tasks, native = _factory("swe-lite", out / "swe-lite.jsonl", sandbox)
    skyrl_tasks, skyrl = _factory("skyrl-gym", out / "skyrl.jsonl", sandbox)
    gen_factory = env_factory("swe-lite", config=EnvConfig(name="swe-lite", max_turns=10), sandbox=sandbox)
    assert [t.id for t in skyrl_tasks] == [t.id for t in native_tasks] == [t.id for t in generated]
    assert all(t.kind == "swe-lite" and t.data["env_class"] == "swe-lite" for t in skyrl_tasks)
    runs = []
    for i, original in enumerate(generated):
        for script in (expert_solution(original), [SUBMIT] if i == 0 else None):
            if script is None:
                continue
            for task, make in ((original, gen_factory), (native_tasks[i], native), (skyrl_tasks[i], skyrl)):
                runs.append(play(lambda make=make, task=task: make(task), task, script, config=PIPELINE))
    results = await asyncio.gather(*runs)
    rewards = [r.reward for r in results]
    why = [(r.reason, r.error, r.info.get("eval_output")) for r in results]
    assert rewards == [1.0] * 3 + [0.0] * 3 + [1.0] * 3, why
    for k in range(0, len(results), 3):  # per script: the three routes saw the same chat and the same turn count
        chats = [[(m.role, m.content) for m in r.messages[:2]] for r in results[k : k + 3]]
        assert chats[0] == chats[1] == chats[2] and results[k].steps == results[k + 2].steps
        assert len({(r.info["tests_passed"], r.info["tests_total"]) for r in results[k : k + 3]}) == 1
    assert results[2].info["env_class"] == "swe-lite" and results[2].info["tests_total"] >= 3  # judged


async def test_the_skyrl_route_passes_check_env(sandbox: Sandbox, shared_tmp: Path) -> None:
    _export(shared_tmp / "x", "--n", "1")
    (task,), make = _factory("skyrl-gym", shared_tmp / "x" / "skyrl.jsonl", sandbox)
    original = generate_curriculum(1, seed=0, split="train")[0]
    report = await check_env(lambda: make(task), task, solution=expert_solution(original))
    assert {"protocol", "reset", "evaluate", "close", "solution"} <= set(report.passed), report


async def test_hidden_tests_stay_out_of_the_workspace_and_a_forged_verdict_scores_0(
    sandbox: Sandbox, shared_tmp: Path
) -> None:
    """The agent looks for the hidden tests (workspace, the export's absolute path) and plants a pass-all conftest."""
    out = shared_tmp / "x"
    _export(out, "--n", "1")
    (task,), make = _factory("skyrl-gym", out / "skyrl.jsonl", sandbox)
    hidden = Path(task.data["hidden_tests"])
    secret = (hidden / "test_hidden.py").read_text().splitlines()[-1].strip()
    env = make(task)
    assert isinstance(env, SkyRLGymEnv)
    await env.reset(task)
    workspace = env._tirl.workspace  # type: ignore[union-attr]
    assert workspace is not None
    files = [p for p in workspace.rglob("*") if p.is_file()]
    assert files and not any(secret in p.read_text(errors="replace") for p in files)
    look = await env.step(_bash(f"ls -aR; grep -rl 'def test_' . ; cat {hidden}/test_hidden.py; echo END"))
    seen = look.observation[0].content or ""
    assert "END" in seen and secret not in seen and "test_hidden" not in seen.replace(f"{hidden}/test_hidden.py", "")
    forge = ("cat > conftest.py <<'EOF'\nimport pytest\n@pytest.hookimpl(hookwrapper=True)\n"
             "def pytest_runtest_makereport(item, call):\n    out = yield\n"
             "    out.get_result().outcome = 'passed'\nEOF\necho '5 passed in 0.01s'\nsubmit")  # fmt: skip
    result = await env.step(_bash(forge))
    assert result.terminated
    verdict = await env.evaluate()
    await env.close()
    assert verdict.reward == 0.0 and verdict.info["tests_failed"] >= 1 and not verdict.correct


def _bash(text: str) -> Any:
    from tirl.types import Message, Role

    return Message(role=Role.ASSISTANT, content=f"```bash\n{text}\n```")


def _row(**extra: Any) -> dict[str, Any]:
    return {"prompt": [{"role": "user", "content": "fix it"}], "env_class": "swe-lite", "extra_info": extra}


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        (_row(hidden_tests="hidden"), "missing the field 'extra_info.repo' — add \"repo\""),
        (_row(repo="repo", hidden_tests="nowhere"), r"extra_info.hidden_tests '.*nowhere' is not a directory — give"),
        (_row(repo="repo", hidden_tests="repo/tests"), r"hidden_tests '.*' is inside extra_info.repo .* — move"),
        (_row(repo="repo"), "missing the field 'extra_info.test_command'"),
        ({"prompt": "fix it", "env_class": "swe-lite"}, "a swe-lite row needs an extra_info object"),
        ({**_row(repo="repo", hidden_tests="hidden"), "reward_spec": {"method": "rule", "ground_truth": "1"}},
         "reward_spec.method 'rule' is not a swe-lite verdict"),
        ({**_row(repo="repo", hidden_tests="hidden", test_command="true"), "reward_spec": {"method": "hidden_tests"}},
         "the command would decide the reward — remove extra_info.test_command"),
        ({**_row(repo="repo", hidden_tests="hidden"), "prompt": []}, "'prompt' must be a non-empty list"),
    ],
)  # fmt: skip
def test_a_bad_row_names_the_file_line_field_and_fix(tmp_path: Path, row: dict[str, Any], needle: str) -> None:
    (tmp_path / "repo" / "tests").mkdir(parents=True)
    (tmp_path / "hidden").mkdir()
    path = tmp_path / "skyrl.jsonl"
    good = _row(repo="repo", hidden_tests="hidden")
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(InputError) as info:
        load_tasks(EnvConfig(name="skyrl-gym", tasks_file=str(path)), 10)
    assert info.value.line == 2 and re.search(needle, str(info.value)), str(info.value)


def test_an_unknown_env_class_lists_tirl_classes_too(tmp_path: Path) -> None:
    pytest.importorskip("skyrl_gym")
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({**_row(repo="."), "env_class": "swe_lite"}) + "\n")
    with pytest.raises(InputError, match=r"t.jsonl:1: env_class 'swe_lite' is not a registered .*gsm8k.*swe-lite"):
        load_tasks(EnvConfig(name="skyrl-gym", tasks_file=str(path)), 10)


def test_cli_bad_rows_and_outputs_are_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The export refuses a used directory and a bad swe-lite JSONL, before writing anything; ``tirl eval`` a bad
    SkyRL row (about 8 s: the model loads before the tasks are read)."""
    (tmp_path / "repo").mkdir()
    row = tmp_path / "skyrl.jsonl"
    row.write_text(json.dumps(_row(repo="repo", hidden_tests="nope")) + "\n")
    assert main(["eval", "--env", "skyrl-gym", "--set", f"env.tasks_file={row}", "--n", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    says = rf"error: {row}:1: extra_info.hidden_tests '.*nope' is not a directory — give"
    assert len(err) == 1 and re.match(says, err[0]), err
    row.unlink()
    (tmp_path / "repo").rmdir()
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    bad = tmp_path / "swe.jsonl"
    bad.write_text(json.dumps({"repo": "nowhere", "prompt": "p", "hidden_tests": "h"}) + "\n")
    cases = [
        (["--out", str(used)], f"error: {used}: exists and is not an empty directory"),
        (["--out", str(bad / "x")], f"error: {bad / 'x'}: {bad} is a file, not a directory"),
        (["--out", str(tmp_path / "new"), "--set", f"env.tasks_file={bad}"], f"error: {bad}:1: repo '"),
        (["--out", str(tmp_path / "new"), "--set", "env.difficulty=1", "--split", "heldout"], "error: --split needs"),
    ]
    for args, start in cases:
        assert main(["tasks", "export", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(start), err
    assert (used / "keep.txt").read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == [
        "swe.jsonl",
        "used",
    ]


# ---------------------------------------------------------------- docs/envs.md: "your own repositories"
def _doc_block(heading: str, lang: str) -> str:
    text = (ROOT / "docs" / "envs.md").read_text(encoding="utf-8")
    section = text.split(heading, 1)[1]
    return section.split(f"```{lang}\n", 1)[1].split("```\n", 1)[0]


async def test_the_docs_walkthrough_runs_as_written(sandbox: Sandbox, shared_tmp: Path) -> None:
    """The shell block of docs/envs.md's walkthrough, then its JSONL and SkyRL rows: a fix scores 1, none 0."""
    script = _doc_block("### Your own repositories", "bash")
    subprocess.run(["bash", "-euc", script], cwd=shared_tmp, check=True, capture_output=True, timeout=60)
    fix = "```bash\nsed -i 's/x + x + 1/x + x/' calc/__init__.py\npython3 -c 'import calc; print(calc.double(2))'\n```"
    results: list[float] = []
    for name, file in (("swe-lite", "swe.jsonl"), ("skyrl-gym", "skyrl.jsonl")):
        tasks, make = _factory(name, shared_tmp / file, sandbox)
        assert [t.data["test_command"] is None for t in tasks] == [True, False]
        for task in tasks:
            for script_turns in ([fix, SUBMIT], [SUBMIT]):
                results.append((await play(lambda make=make, task=task: make(task), task, script_turns)).reward)
    assert results == [1.0, 0.0] * 4
    assert "x + x + 1" in (shared_tmp / "repos" / "calc" / "calc" / "__init__.py").read_text()  # never written


@pytest.mark.slow
def test_one_training_step_on_exported_rows_through_skyrl_gym(shared_tmp: Path) -> None:
    """``tirl train --env skyrl-gym:swe-lite`` on an exported file: the trained rows ran in swe-lite and were judged.

    About 8-15 s (6 CPU-s) at load ~5: the env's built-in model (``tiny-swe``), 2 prompts x 2, 24 new tokens
    and 3 turns (too few for its fixes), so this checks the wiring, not learning.
    """
    _export(shared_tmp / "x", "--n", "6")
    run_dir = shared_tmp / "run"
    tiny = ["trainer.prompts_per_step=2", "algo.group_size=2", "filter.mode=off", "generation.max_new_tokens=24",
            "generation.max_total_tokens=600", "env.eval_size=2", "trainer.threads=1",
            "trainer.eval_before_after=false", "env.max_turns=3",
            f"env.tasks_file={shared_tmp / 'x' / 'skyrl.jsonl'}"]  # fmt: skip
    args = ["train", "--env", "skyrl-gym:swe-lite", "--steps", "1", "--run-dir", str(run_dir), "--no-progress"]
    assert main([*args, *(a for kv in tiny for a in ("--set", kv))]) == 0
    trained = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    rows = (shared_tmp / "x" / "skyrl.jsonl").read_text().splitlines()
    held_out = {json.loads(line)["prompt"][0]["content"] for line in rows[:2]}  # the first env.eval_size rows
    assert len(trained) == 4
    for t in trained:
        evaluation = t["info"]["eval"]
        assert evaluation["env_class"] == "swe-lite" and evaluation["tests_total"] == 3  # the judge ran
        assert t["messages"][0]["role"] == "system" and t["messages"][1]["content"] not in held_out


def test_parquet_rows_and_no_skyrl_gym_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SkyRL's parquet works the same (errors say ``row N:``); swe-lite rows never import skyrl-gym."""
    import pyarrow as pa  # a base dependency (parquet task files): never skipped
    import pyarrow.parquet as pq

    monkeypatch.setitem(sys.modules, "skyrl_gym", None)  # `import skyrl_gym` now raises ImportError
    _export(tmp_path / "x", "--n", "2")
    rows = [json.loads(line) for line in (tmp_path / "x" / "skyrl.jsonl").read_text().splitlines()]
    for row in rows:
        del row["reward_spec"]  # optional; with test_command added below, "hidden_tests" would refuse it
    path = tmp_path / "x" / "skyrl.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    tasks = load_tasks(EnvConfig(name="skyrl-gym", tasks_file=str(path)), 10)
    assert [t.id for t in tasks] == [r["extra_info"]["instance_id"] for r in rows]
    assert Path(tasks[0].data["repo"]) == (tmp_path / "x" / rows[0]["extra_info"]["repo"]).resolve()
    rows[0]["extra_info"]["test_command"] = "python3 -m pytest -q"  # row 2's struct gets test_command: null
    pq.write_table(pa.Table.from_pylist(rows), path)
    commands = [t.data["test_command"] for t in load_tasks(EnvConfig(name="skyrl-gym", tasks_file=str(path)), 10)]
    assert commands == ["python3 -m pytest -q", None]
    rows[1]["extra_info"]["repo"] = "nowhere"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(InputError, match=r"skyrl.parquet: row 2: extra_info.repo '.*nowhere' is not a directory"):
        load_tasks(EnvConfig(name="skyrl-gym", tasks_file=str(path)), 10)


def test_forcing_swe_lite_applies_its_turn_and_token_caps() -> None:
    """``--env skyrl-gym:swe-lite`` gets swe-lite's preset (10 turns, 384/6144 tokens); plain skyrl-gym does not."""
    from tirl.config import resolve_config

    forced = resolve_config(None, ["env.name=skyrl-gym:swe-lite"])
    cfg = forced.config
    assert (cfg.env.max_turns, cfg.generation.max_new_tokens, cfg.generation.max_total_tokens) == (10, 384, 6144)
    assert forced.sources["env.max_turns"] == "env skyrl-gym:swe-lite" and cfg.env.difficulty == 1
    assert resolve_config(None, ["env.name=skyrl-gym"]).config.env.max_turns == 6


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.sampled_from(["repo", "hidden", ".", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_FIELDS = st.fixed_dictionaries(
    {"repo": st.just("repo") | _JSON},
    optional={"hidden_tests": st.just("hidden") | _JSON, "test_command": st.just("true") | _JSON, "instance_id": _JSON},
)
_SPEC = st.none() | st.fixed_dictionaries({"method": st.sampled_from([None, "hidden_tests", "test_command"])}) | _JSON


@settings(max_examples=int(os.environ.get("TIRL_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(extra=_FIELDS | _JSON, spec=_SPEC, row_id=_JSON)
def test_fuzzed_swe_rows_load_or_name_the_row(tmp_path: Path, extra: Any, spec: Any, row_id: Any) -> None:
    """Any JSON in a swe-lite row's extra_info, reward_spec and id: a task, or an InputError naming file:1."""
    (tmp_path / "repo").mkdir(exist_ok=True)
    (tmp_path / "hidden").mkdir(exist_ok=True)
    path = tmp_path / "f.jsonl"
    row = {"prompt": "fix", "env_class": "swe-lite", "extra_info": extra, "reward_spec": spec, "id": row_id}
    path.write_text(json.dumps(row) + "\n")
    try:
        (task,) = load_tasks(EnvConfig(name="skyrl-gym", tasks_file=str(path)), 10)
    except InputError as exc:
        assert str(exc).startswith(f"{path}:1: ") and "\n" not in str(exc)
    else:
        event("loaded")
        assert task.data["repo"] == str((tmp_path / "repo").resolve()) and task.kind == "swe-lite"
