"""Task files as verl and SkyRL write them (parquet through pyarrow, JSONL), through the loader, the env and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tirl.cli import main
from tirl.config import EnvConfig, SandboxConfig
from tirl.envs.tasks.files import TaskFileSpec, TaskRow, load_tasks_file, read_task_rows, uses_chat_format
from tirl.envs.tir_math import TirMathEnv
from tirl.errors import ConfigError, InputError
from tirl.sandbox import create_sandbox
from tirl.types import Message, Role, TerminationReason

KEYS = ["prompt", "role", "content", "reward_model", "reward_spec", "ground_truth", "answer", "id", "extra_info"]


def verl_row(i: int, answer: object = None) -> dict:
    return {
        "data_source": "synthetic/gsm",
        "prompt": [
            {"role": "system", "content": "Reason, then give \\boxed{answer}."},
            {"role": "user", "content": f"What is {i} + {i}?"},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(2 * i) if answer is None else answer},
        "extra_info": {"index": i, "split": "train"},
    }


def skyrl_row(i: int) -> dict:
    return {
        "data_source": "synthetic",
        "prompt": [{"role": "user", "content": f"Compute {i} * 3."}],
        "env_class": "gsm8k",
        "reward_spec": {"method": "rule", "ground_truth": str(3 * i)},
        "extra_info": {"split": "test"},
    }


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_verl_parquet_rows_keep_the_chat_the_answer_and_extra_info(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "train.parquet", [verl_row(i) for i in range(5)])
    rows = read_task_rows(path)
    assert [r.id for r in rows] == ["0", "1", "2", "3", "4"]  # extra_info.index names the task
    first = rows[1]
    assert isinstance(first, TaskRow) and first.row == 2 and first.source == str(path)
    assert first.messages == (
        Message(role=Role.SYSTEM, content="Reason, then give \\boxed{answer}."),
        Message(role=Role.USER, content="What is 1 + 1?"),
    )
    assert first.answer == "2" and first.data_source == "synthetic/gsm"
    assert first.extra_info == {"index": 1, "split": "train"}
    task = first.to_task()
    assert task.prompt == "What is 1 + 1?" and task.answer == "2" and task.messages == first.messages
    assert task.data["extra_info"] == {"index": 1, "split": "train"}


def test_skyrl_jsonl_rows_read_reward_spec(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "skyrl.jsonl", [skyrl_row(i) for i in range(3)])
    rows = read_task_rows(path)
    assert [r.answer for r in rows] == ["0", "3", "6"]
    assert [r.id for r in rows] == ["skyrl-1", "skyrl-2", "skyrl-3"]  # no id, no index: file stem and line
    assert rows[0].messages == (Message(role=Role.USER, content="Compute 0 * 3."),)


def test_the_field_paths_are_configurable(tmp_path: Path) -> None:
    rows = [{"chat": {"turns": [{"role": "user", "content": "6*7?"}]}, "meta": {"solution": 42}, "id": "q1"}]
    path = write_jsonl(tmp_path / "custom.jsonl", rows)
    (row,) = read_task_rows(path, TaskFileSpec(prompt_key="chat.turns", answer_key="meta.solution"))
    assert (row.id, row.answer, row.question) == ("q1", "42", "6*7?")
    cfg = EnvConfig(tasks_file=str(path), prompt_key="chat.turns", answer_key="meta.solution")
    (task,) = load_tasks_file(cfg)
    assert task.answer == "42" and task.kind == "tir-math"


def test_a_string_prompt_is_one_user_message(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", [{"prompt": "What is 2+2?", "answer": 4}])
    (row,) = read_task_rows(path)
    assert row.messages == (Message(role=Role.USER, content="What is 2+2?"),) and row.answer == "4"


def test_tirl_own_jsonl_still_loads_through_the_same_entry_point(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "own.jsonl", [{"question": "1+1?", "answer": "2"}])
    assert not uses_chat_format(path)
    (task,) = load_tasks_file(EnvConfig(tasks_file=str(path)))
    assert task.prompt == "1+1?" and task.messages == ()


@pytest.mark.parametrize(
    ("rows", "where", "needle"),
    [
        ([verl_row(0), {"reward_model": {"ground_truth": "1"}}], ":2:", "missing the prompt field 'prompt'"),
        ([verl_row(0), verl_row(1, answer=["1", "2"])], ":2:", "must be a string or a number, got list"),
        ([{"prompt": "q", "reward_model": {}}], ":1:", "no ground truth at 'reward_model.ground_truth' or"),
        ([{"prompt": [{"role": "robot", "content": "hi"}], "answer": "1"}], ":1:", "prompt[0] has role 'robot'"),
        ([{"prompt": [{"role": "user", "content": None}], "answer": "1"}], ":1:", "content must be a string"),
        ([{"prompt": [{"role": "system", "content": "s"}], "answer": "1"}], ":1:", "no non-empty user message"),
        ([{"prompt": [], "answer": "1"}], ":1:", "must be a non-empty list"),
        ([verl_row(3), verl_row(3)], ":2:", "duplicate id '3' (first on row 1)"),
        ([{"prompt": "q", "answer": True}], ":1:", "no ground truth"),
    ],
)
def test_a_malformed_jsonl_row_names_the_file_the_line_and_the_fix(
    tmp_path: Path, rows: list[dict], where: str, needle: str
) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(InputError) as err:
        read_task_rows(path)
    text = str(err.value)
    assert text.startswith(f"{path}{where}") and needle in text and " — " in text, text


def test_a_malformed_parquet_row_is_named_by_its_row(tmp_path: Path) -> None:
    rows = [verl_row(0), verl_row(1)]
    rows[1]["reward_model"] = {"style": "rule", "ground_truth": None}
    path = write_parquet(tmp_path / "bad.parquet", rows)
    with pytest.raises(InputError) as err:
        read_task_rows(path)
    assert str(err.value).startswith(f"{path}: row 2: no ground truth") and "env.answer_key" in str(err.value)


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fake.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="not a readable parquet file"):
        read_task_rows(path)
    with pytest.raises(InputError, match="does not exist"):
        read_task_rows(tmp_path / "missing.parquet")


def test_cli_exit_2_with_one_error_line_for_a_bad_task_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [verl_row(0), {"prompt": "q"}])
    code = main(["eval", "--n", "1", "--set", f"env.tasks_file={path}", "--set", "trainer.threads=1"])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and f"{path}:2" in lines[-1] and "Traceback" not in err


async def test_a_file_task_runs_as_a_tir_math_episode(tmp_path: Path) -> None:
    verl = write_parquet(tmp_path / "verl.parquet", [verl_row(21)])
    skyrl = write_parquet(tmp_path / "skyrl.parquet", [skyrl_row(0)])
    tasks = [*load_tasks_file(EnvConfig(tasks_file=str(verl))), *load_tasks_file(EnvConfig(tasks_file=str(skyrl)))]
    sandbox = create_sandbox(SandboxConfig(backend="process", warm_pool=False), warn=False)
    try:
        env = TirMathEnv(sandbox=sandbox)
        first = await env.reset(tasks[0])
        assert [m.role for m in first] == [Role.SYSTEM, Role.USER]  # the file's system prompt, not the env's
        assert first[0].content == "Reason, then give \\boxed{answer}."
        step = await env.step(Message(role=Role.ASSISTANT, content="```python\nprint(21 + 21)\n```"))
        assert step.observation[0].content == "```output\n42\n```"
        done = await env.step(Message(role=Role.ASSISTANT, content="\\boxed{42}"))
        assert done.reason is TerminationReason.ANSWERED
        assert (await env.evaluate()).reward == 1.0
        await env.close()
        env2 = TirMathEnv(sandbox=sandbox)
        first2 = await env2.reset(tasks[1])  # no system message in the file: the env's is put first
        assert [m.role for m in first2] == [Role.SYSTEM, Role.USER] and first2[0].content == env2.system_prompt
        await env2.close()
    finally:
        await sandbox.close()


def test_the_held_out_split_never_trains_on_evaluation_tasks(tmp_path: Path) -> None:
    from tirl.config import load_config
    from tirl.trainer.wiring import TaskSets

    path = write_parquet(tmp_path / "ten.parquet", [verl_row(i) for i in range(10)])
    sets = TaskSets(load_config(None, [f"env.tasks_file={path}", "env.eval_size=200"]))
    eval_ids = [t.id for t in sets.eval_tasks]
    assert eval_ids == ["0", "1", "2", "3", "4"]  # a small file is halved, first half held out
    drawn = {t.id for step in range(1, 20) for t in sets.train(step, 4)}
    assert drawn and drawn.isdisjoint(eval_ids) and drawn <= {"5", "6", "7", "8", "9"}
    big = TaskSets(load_config(None, [f"env.tasks_file={path}", "env.eval_size=2"]))
    assert [t.id for t in big.eval_tasks] == ["0", "1"]
    one = write_parquet(tmp_path / "one.parquet", [verl_row(0)])
    with pytest.raises(ConfigError, match="holds 1 task"):
        TaskSets(load_config(None, [f"env.tasks_file={one}"]))


@pytest.mark.slow
def test_train_and_eval_on_a_parquet_task_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tirl.models.tiny import TinyModelSpec, build_tiny_model, save_policy

    spec = TinyModelSpec(hidden_size=32, layers=1, heads=2, kv_heads=2, intermediate_size=64, max_positions=256)
    model, tok = build_tiny_model(spec, seed=0)
    model_dir = save_policy(model, tok, tmp_path / "tiny")
    path = write_parquet(tmp_path / "tasks.parquet", [verl_row(i) for i in range(8)])
    run_dir = tmp_path / "run"
    tiny = ["--set", "trainer.prompts_per_step=2", "--set", "algo.group_size=2", "--set", "filter.mode=off",
            "--set", "generation.max_new_tokens=8", "--set", "generation.max_total_tokens=200",
            "--set", "trainer.threads=1", "--set", f"env.tasks_file={path}"]  # fmt: skip
    code = main(["train", "--model", str(model_dir), "--steps", "1", "--run-dir", str(run_dir), "--no-progress", *tiny])
    assert code == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval/n"] == 4
    trained = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    users = {m["content"] for t in trained for m in t["messages"] if m["role"] == "user"}
    assert users and users <= {f"What is {i} + {i}?" for i in range(4, 8)}  # the training half only
    systems = {m["content"] for t in trained for m in t["messages"] if m["role"] == "system"}
    assert systems == {"Reason, then give \\boxed{answer}."}
    capsys.readouterr()
    assert main(["eval", "--model", str(model_dir), "--json", *tiny[-6:]]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["n"] == 4


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=12,
)


_MESSAGES = st.lists(st.fixed_dictionaries({"role": _JSON | st.sampled_from(["user", "system"]), "content": _JSON}))
_ROW = st.dictionaries(st.sampled_from(KEYS), _JSON, max_size=5) | st.fixed_dictionaries(
    {"prompt": _MESSAGES | _JSON, "reward_model": st.fixed_dictionaries({"ground_truth": _JSON})}
)


@given(st.lists(_ROW, min_size=0, max_size=4))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_rows_load_or_fail_with_an_input_error(tmp_path: Path, rows: list[dict]) -> None:
    path = write_jsonl(tmp_path / "fuzz.jsonl", rows)
    try:
        out = read_task_rows(path)
    except InputError as exc:
        assert str(exc).startswith(str(path))
    else:
        assert all(r.answer and any(m.role is Role.USER for m in r.messages) for r in out)


@given(st.binary(max_size=200))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_bytes_as_parquet_fail_with_an_input_error(tmp_path: Path, blob: bytes) -> None:
    path = tmp_path / "fuzz.parquet"
    path.write_bytes(b"PAR1" + blob + b"PAR1")
    with pytest.raises(InputError):
        read_task_rows(path)
