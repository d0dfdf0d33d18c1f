"""tir-math task generation, JSONL loading and scripted solutions (no sandbox needed)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from tirl.envs.tasks.math_gen import TEMPLATES, expert_solution, generate_tasks, load_math_tasks
from tirl.errors import InputError
from tirl.parsing import ActionKind, judge_text


def run_code(code: str) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(code, {})
    return buf.getvalue().strip()


@pytest.mark.parametrize("difficulty", [1, 2, 3, 4, 5])
def test_generated_code_prints_the_answer(difficulty: int) -> None:
    tasks = generate_tasks(40, difficulty=difficulty, seed=7)
    assert len(tasks) == 40
    for task in tasks:
        assert task.answer is not None
        assert run_code(task.data["code"]) == task.answer, task
        assert task.data["difficulty"] == difficulty
        assert task.kind == "tir-math"


def test_every_template_is_reachable() -> None:
    for difficulty, templates in TEMPLATES.items():
        seen = {t.data["template"] for t in generate_tasks(200, difficulty=difficulty, seed=0)}
        assert seen == set(templates), difficulty


def test_deterministic_and_seed_dependent() -> None:
    a = generate_tasks(20, difficulty=3, seed=1)
    b = generate_tasks(20, difficulty=3, seed=1)
    c = generate_tasks(20, difficulty=3, seed=2)
    assert a == b
    assert [t.prompt for t in a] != [t.prompt for t in c]
    assert len({t.id for t in a}) == 20


def test_easy_prompts_are_short_and_regular() -> None:
    patterns = [
        r"Compute \d+[*+-]\d+\.",
        r"Compute \d+\*\*\d+\.",
        r"What is \d+ mod \d+\?",
        r"Sum the integers from \d+ to \d+\.",
        r"Sum the squares from \d+ to \d+\.",
        r"How many integers from 1 to \d+ are divisible by \d+\?",
    ]
    for difficulty in (1, 2):
        for task in generate_tasks(100, difficulty=difficulty, seed=3):
            assert len(task.prompt) <= 60, task.prompt
            assert any(re.fullmatch(p, task.prompt) for p in patterns), task.prompt
            # the code copies the prompt's numbers verbatim (no mental arithmetic needed)
            for number in re.findall(r"\d+", task.prompt):
                assert number in task.data["code"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="difficulty"):
        generate_tasks(1, difficulty=6)
    with pytest.raises(ValueError):
        generate_tasks(-1)


def test_expert_solution_shapes() -> None:
    tasks = generate_tasks(60, difficulty=1, seed=0) + generate_tasks(30, difficulty=5, seed=0)
    lengths = {len(expert_solution(t)) for t in tasks}
    assert lengths == {2, 3}  # some tasks have a failed first attempt and a fix
    for task in tasks:
        turns = expert_solution(task)
        assert expert_solution(task) == turns  # deterministic
        kinds = [judge_text(t).kind for t in turns]
        assert kinds[:-1] == [ActionKind.CODE] * (len(turns) - 1)
        assert kinds[-1] is ActionKind.ANSWER
        assert turns[-1] == f"\\boxed{{{task.answer}}}"
        assert turns[-2] == f"```python\n{task.data['code']}\n```"
        if len(turns) == 3:
            first = judge_text(turns[0]).code[0].body
            assert "print(" not in first or "prnt(" in first


def test_expert_solution_needs_a_program() -> None:
    task = load_one('{"question": "2+2?", "answer": 4}')
    with pytest.raises(ValueError, match="no scripted program"):
        expert_solution(task)


def load_one(line: str):  # type: ignore[no-untyped-def]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.jsonl"
        p.write_text(line + "\n")
        return load_math_tasks(p)[0]


def test_load_jsonl(tmp_path: Path) -> None:
    p = tmp_path / "math.jsonl"
    rows = [{"question": "What is 1/2 + 1/4?", "answer": "3/4", "id": "a"}, {"question": "7*6?", "answer": 42}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n# comment\n")
    tasks = load_math_tasks(p)
    assert [t.id for t in tasks] == ["a", "math-2"]
    assert tasks[1].answer == "42"
    assert tasks[0].prompt == "What is 1/2 + 1/4?"


@pytest.mark.parametrize(
    ("content", "line", "needle"),
    [
        ('{"question": "a", "answer": "1"}\n{"question": "b", "answer": "2"\n', 2, "not valid JSON"),
        ('{"question": "a", "answer": "1"}\n{"answer": "2"}\n', 2, "missing the field 'question'"),
        ('{"question": "a"}\n', 1, "missing the field 'answer'"),
        ('{"question": "", "answer": "1"}\n', 1, "must be a non-empty string"),
        ('{"question": "a", "answer": null}\n', 1, "must be a string or a number"),
        ("[1, 2]\n", 1, "expected a JSON object"),
        ('{"id": "x", "question": "a", "answer": 1}\n{"id": "x", "question": "b", "answer": 2}\n', 2, "duplicate id"),
    ],
)
def test_malformed_jsonl_names_file_and_line(tmp_path: Path, content: str, line: int, needle: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(InputError) as info:
        load_math_tasks(p)
    assert info.value.line == line
    assert info.value.path == str(p)
    assert needle in str(info.value)
    assert f"{p}:{line}" in str(info.value)


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_math_tasks(tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="no tasks"):
        load_math_tasks(empty)
