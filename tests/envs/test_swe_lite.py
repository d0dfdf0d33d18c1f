"""swe-lite: planted bugs, isolated workspaces, bash in the real sandbox, real pytest for the reward."""

from __future__ import annotations

import ast
import asyncio
import json
import sys
import types
from pathlib import Path

import pytest

from tirl.envs import check_env
from tirl.envs.base import EpisodeOverError, Task
from tirl.envs.swe_lite import SweLiteEnv, expert_solution, generate_swe_tasks, load_swe_tasks, parse_pytest_summary
from tirl.envs.tasks.swe_gen import all_cases, run_hidden_in_process
from tirl.envs.tasks.swe_programs import MUTATION_KINDS, PROGRAMS, Program, parse_programs
from tirl.errors import InputError
from tirl.sandbox.base import Sandbox
from tirl.testing import play
from tirl.types import Message, Role, TerminationReason, ToolCall


def asst(text: str) -> Message:
    return Message(role=Role.ASSISTANT, content=text)


def test_every_planted_bug_is_unique_and_caught_by_the_hidden_tests() -> None:
    assert {m.kind for _, m in all_cases()} == set(MUTATION_KINDS)
    for program in PROGRAMS:
        passed, failed = run_hidden_in_process(program, program.source)
        assert failed == 0 and passed >= 4, program.package
        for mutation in program.mutations:
            assert program.source.count(mutation.original) == 1, (program.package, mutation)
            buggy = program.source.replace(mutation.original, mutation.mutated, 1)
            _, failed = run_hidden_in_process(program, buggy)
            assert failed >= 1, (program.package, mutation.kind)


def failing_checks(program: Program, source: str) -> list[str]:
    """The source of each ``assert`` and ``with`` block of the hidden tests that fails on ``source``.

    Each is judged on its own (a failing one does not stop its test); the statements before it still run.
    """
    tests = program.tests

    class Each(ast.NodeTransformer):
        def visit_Assert(self, node: ast.Assert) -> ast.AST:
            return self.guarded(node, [ast.Expr(ast.Call(ast.Name("_ok", ast.Load()), [node.test], []))])

        def visit_With(self, node: ast.With) -> ast.AST:
            return self.guarded(node, [node])

        def guarded(self, node: ast.stmt, body: list[ast.stmt]) -> ast.AST:
            text = ast.Constant(ast.get_source_segment(tests, node))
            fail = ast.Expr(ast.Call(ast.Name("_bad", ast.Load()), [text], []))
            return ast.Try(body, [ast.ExceptHandler(ast.Name("BaseException", ast.Load()), None, [fail])], [], [])

    bad: list[str] = []

    def ok(value: object) -> None:
        if not value:
            raise AssertionError

    package = types.ModuleType(program.package)
    exec(compile(source, program.module_path, "exec"), package.__dict__)
    saved = sys.modules.get(program.package)
    sys.modules[program.package] = package
    try:
        namespace: dict[str, object] = {"_ok": ok, "_bad": bad.append}
        exec(compile(ast.fix_missing_locations(Each().visit(ast.parse(tests))), "hidden", "exec"), namespace)
        for name, fn in namespace.items():
            if name.startswith("test_") and callable(fn):
                fn()
    finally:
        sys.modules.pop(program.package) if saved is None else sys.modules.__setitem__(program.package, saved)
    return bad


def test_every_planted_bug_shows_on_a_hidden_call_the_issue_does_not_quote() -> None:
    """Answering only the quoted call (``mean([1, 2, 3, 4])``) with the prompt's answer scored 1.0 with the bug
    in place on 18 of the 33 planted bugs, whose only failing hidden check was that call (session 46)."""
    assert failing_checks(PROGRAMS[0], PROGRAMS[0].source) == []
    for program, mutation in all_cases():
        bad = failing_checks(program, program.source.replace(mutation.original, mutation.mutated, 1))
        assert len(bad) >= 2 and any(mutation.example not in text for text in bad), (program.package, mutation, bad)


def test_programs_are_read_from_the_shipped_toml() -> None:
    assert [p.package for p in PROGRAMS][:2] == ["statkit", "textkit"] and len(PROGRAMS) == 8
    assert PROGRAMS[0].source.startswith('"""Small statistics helpers."""\n\n\ndef mean(xs):')
    text = "[[program]]\npackage = 'p'\nsource = 'x = 1'\ntests = ''\n[[program.mutations]]\nkind = '{}'\n"
    text += "original = '1'\nmutated = '2'\nexample = 'x'\n"
    one = parse_programs(text.format("off_by_one"))
    assert one[0].module_path == "p/core.py" and one[0].mutations[0].mutated == "2"
    with pytest.raises(ValueError, match="not one of"):
        parse_programs(text.format("typo"))
    with pytest.raises(TypeError, match="tests"):
        parse_programs("[[program]]\npackage = 'p'\nsource = 'x = 1'\n")


def test_generator_is_deterministic_and_covers_all_cases() -> None:
    n = len(all_cases())
    a = generate_swe_tasks(n, seed=3)
    assert a == generate_swe_tasks(n, seed=3)
    assert {t.id.split("-", 3)[3] for t in a} == {f"{p.package}-{m.kind}" for p, m in all_cases()}
    only = generate_swe_tasks(5, seed=0, kinds=("off_by_one",))
    assert all(t.data["mutation"]["kind"] == "off_by_one" for t in only)
    with pytest.raises(ValueError, match="unknown mutation kinds"):
        generate_swe_tasks(1, kinds=("typo",))
    task = a[0]
    assert "hidden" not in json.dumps(task.data["files"])  # hidden tests never ship with the repo
    assert task.prompt.startswith("Bug in the `")


@pytest.fixture
def make(sandbox: Sandbox, swe_cache: Path, work_root: Path):  # type: ignore[no-untyped-def]
    def factory(**kw: object) -> SweLiteEnv:
        return SweLiteEnv(sandbox=sandbox, cache_dir=swe_cache, work_root=work_root, **kw)  # type: ignore[arg-type]

    return factory


TASK = generate_swe_tasks(1, seed=0, kinds=("wrong_operator",))[0]


async def test_check_env_passes(make) -> None:  # type: ignore[no-untyped-def]
    report = await check_env(lambda: make(max_turns=3), TASK, solution=expert_solution(TASK), idle="```bash\nls\n```")
    assert {"protocol", "reset", "void", "evaluate", "close", "solution", "limit"} <= set(report.passed)


async def test_scripted_fix_end_to_end_with_real_pytest(make, work_root: Path) -> None:  # type: ignore[no-untyped-def]
    env = make()
    initial = await env.reset(TASK)
    assert initial[-1].content == TASK.prompt
    ws = env.workspace
    assert ws is not None and ws.is_relative_to(work_root)
    assert not any("test_hidden" in p.name for p in ws.rglob("*"))
    assert env.info["copy_s"] >= 0 and "init_s" in env.info and env.info["workspace"] == str(ws)

    before = await env.evaluate()  # Evaluator before any fix: the planted bug fails a hidden test
    assert before.reward == 0.0 and not before.correct
    assert before.info["tests_failed"] >= 1 and before.info["tests_total"] >= 4

    turns = expert_solution(TASK)
    look = await env.step(asst(turns[0]))
    assert TASK.data["mutation"]["mutated"] in (look.observation[0].content or "")
    patch = await env.step(asst(turns[1]))
    assert patch.observation[0].content == "```output\npatched\n```"
    end = await env.step(asst(turns[2]))
    assert end.terminated and end.reason is TerminationReason.SUBMITTED

    after = await env.evaluate()
    assert after.reward == 1.0 and after.correct
    assert after.info["tests_failed"] == 0 and after.info["tests_passed"] == after.info["tests_total"]
    assert after.info["reason"] == "submitted"
    await env.close()
    assert not ws.exists()


async def test_expert_fixes_every_mutation_kind(make) -> None:  # type: ignore[no-untyped-def]
    for kind in MUTATION_KINDS:
        task = generate_swe_tasks(1, seed=5, kinds=(kind,))[0]
        result = await play(make(), task, expert_solution(task))
        assert result.reason is TerminationReason.SUBMITTED, (kind, result.messages[-1])
        assert result.correct, (kind, result.info.get("eval_output"))


async def test_fraction_reward_and_answer_tag_submit(make) -> None:  # type: ignore[no-untyped-def]
    result = await play(make(reward_mode="fraction"), TASK, ["<answer>submit</answer>"])
    assert result.reason is TerminationReason.SUBMITTED
    total = result.info["tests_total"]
    assert 0.0 < result.reward < 1.0
    assert result.reward == pytest.approx(result.info["tests_passed"] / total)


async def test_commands_before_submit_run(make) -> None:  # type: ignore[no-untyped-def]
    env = make()
    await env.reset(TASK)
    result = await env.step(asst("```bash\necho hello > note.txt\ncat note.txt\nsubmit\n```"))
    assert result.reason is TerminationReason.SUBMITTED
    assert result.observation[0].content == "```output\nhello\n```"
    ws = env.workspace
    assert ws is not None and (ws / "note.txt").read_text() == "hello\n"
    await env.close()


@pytest.mark.parametrize("name", ["$(touch injected)", "`touch injected`", "x'; touch injected; echo '", "$HOME"])
async def test_an_unknown_tool_name_is_echoed_as_text_never_run(make, name: str) -> None:  # type: ignore[no-untyped-def]
    """The name of an unknown tool goes back verbatim; it was echoed in double quotes, so ``$(...)`` ran."""
    env = make()
    await env.reset(TASK)
    result = await env.step(Message(role=Role.ASSISTANT, content=None, tool_calls=(ToolCall(name, "{}"),)))
    assert result.observation[0].content == f"```output\n[unknown tool: {name}; use bash or submit]\n```"
    ws = env.workspace
    assert ws is not None and not (ws / "injected").exists()
    await env.close()


async def test_failing_command_shows_exit_status_and_python_blocks_import_the_repo(make) -> None:  # type: ignore[no-untyped-def]
    env = make()
    await env.reset(TASK)
    pkg = TASK.data["program"]
    result = await env.step(asst(f"```bash\nfalse\n```\n```python\nimport {pkg}\nprint({pkg}.__name__)\n```"))
    content = result.observation[0].content or ""
    assert "[exit status 1]" in content
    assert content.endswith(f"{pkg}\n```")
    await env.close()


async def test_agent_conftest_cannot_fake_a_pass(make) -> None:  # type: ignore[no-untyped-def]
    cheat = (
        "```bash\ncat > conftest.py <<'EOF'\nimport pytest\n"
        "def pytest_collection_modifyitems(items):\n    items.clear()\nEOF\n"
        "printf '[pytest]\\naddopts = -p no:python\\n' > pytest.ini\nsubmit\n```"
    )
    result = await play(make(), TASK, [cheat])
    assert result.reason is TerminationReason.SUBMITTED
    assert result.reward == 0.0 and result.info["tests_failed"] >= 1


async def test_eval_timeout_gives_zero(make) -> None:  # type: ignore[no-untyped-def]
    module = TASK.data["module"]
    hang = f"```bash\nprintf 'while True:\\n    pass\\n' >> {module}\nsubmit\n```"
    result = await play(make(eval_timeout_s=1.5), TASK, [hang])
    assert result.reward == 0.0
    assert result.info["eval_timed_out"] is True


async def test_limits_and_void(make) -> None:  # type: ignore[no-untyped-def]
    env = make(max_turns=1)
    await env.reset(TASK)
    last = await env.step(asst("```bash\nls\n```"))
    assert last.truncated and last.reason is TerminationReason.MAX_TURNS
    with pytest.raises(EpisodeOverError):
        await env.step(asst("```bash\nls\n```"))
    await env.close()
    void = await play(make(), TASK, ["I will look at the code now."])
    assert void.reason is TerminationReason.VOID


async def test_template_is_cached_and_workspaces_are_isolated(make) -> None:  # type: ignore[no-untyped-def]
    a, b = make(), make()
    await a.reset(TASK)
    await b.reset(TASK)
    assert b.info["template_cached"] is True
    assert a.workspace != b.workspace
    await a.step(asst(f"```bash\necho broken > {TASK.data['module']}\n```"))
    assert b.workspace is not None
    assert "broken" not in (b.workspace / TASK.data["module"]).read_text()
    await a.close()
    await b.close()


def write_repo(root: Path) -> tuple[Path, Path]:
    repo = root / "calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "calc" / "__init__.py").write_text("def double(x):\n    return x + x + 1\n")
    hidden = root / "hidden_tests"
    hidden.mkdir()
    (hidden / "test_calc.py").write_text(
        "from calc import double\n\n"
        "def test_one():\n    assert double(1) == 2\n\n"
        "def test_zero():\n    assert double(0) == 0\n"
    )
    return repo, hidden


async def test_jsonl_repository_task_end_to_end(make, work_root: Path) -> None:  # type: ignore[no-untyped-def]
    repo, hidden = write_repo(work_root / "src")
    tasks_file = work_root / "swe.jsonl"
    row = {
        "id": "calc-1",
        "repo": "src/calc",
        "prompt": "double(1) returns 3; fix calc/__init__.py",
        "test_command": "python3 -m pytest -q -p no:cacheprovider hidden_tests",
        "hidden_tests": str(hidden),
    }
    tasks_file.write_text(json.dumps(row) + "\n")
    (task,) = load_swe_tasks(tasks_file)
    assert task.data["repo"] == str(repo.resolve())

    broken = await play(make(), task, ["<answer>submit</answer>"])
    assert broken.reward == 0.0 and broken.info["tests_failed"] == 2

    fix = "```bash\nsed -i 's/x + x + 1/x + x/' calc/__init__.py\nsubmit\n```"
    fixed = await play(make(), task, [fix])
    assert fixed.reward == 1.0 and fixed.info["tests_passed"] == 2, fixed.info.get("eval_output")
    assert "x + x + 1" in (repo / "calc" / "__init__.py").read_text()  # the user's repository is untouched


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ({"prompt": "p", "test_command": "t"}, "missing the field 'repo'"),
        ({"repo": "nowhere", "prompt": "p", "test_command": "t"}, "is not a directory"),
        ({"repo": ".", "test_command": "t"}, "missing the field 'prompt'"),
        ({"repo": ".", "prompt": "p"}, "missing the field 'test_command'"),
        ({"repo": ".", "prompt": "p", "test_command": "t", "hidden_tests": "nope"}, "hidden_tests"),
    ],
)
def test_malformed_swe_jsonl(tmp_path: Path, row: dict[str, str], needle: str) -> None:
    p = tmp_path / "swe.jsonl"
    good = {"repo": ".", "prompt": "p", "test_command": "t"}
    p.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(InputError) as info:
        load_swe_tasks(p)
    assert info.value.line == 2 and needle in str(info.value)


def test_hidden_tests_inside_the_repository_are_refused(tmp_path: Path) -> None:
    """Before: accepted, and the workspace (a copy of the repository) held the hidden tests for the agent to read."""
    (tmp_path / "calc" / "hidden").mkdir(parents=True)
    p = tmp_path / "swe.jsonl"
    p.write_text(json.dumps({"repo": "calc", "prompt": "p", "hidden_tests": "calc/hidden"}) + "\n")
    with pytest.raises(InputError, match=r"swe.jsonl:1: hidden_tests '.*' is inside repo .* — move the hidden tests"):
        load_swe_tasks(p)
    p.write_text(json.dumps({"repo": "calc", "prompt": "p", "hidden_tests": "."}) + "\n")  # the repo inside them
    with pytest.raises(InputError, match="is inside repo"):
        load_swe_tasks(p)


def test_parse_pytest_summary() -> None:
    assert parse_pytest_summary("x\n3 passed in 0.01s") == {"passed": 3, "failed": 0, "errors": 0, "skipped": 0}
    assert parse_pytest_summary("1 failed, 1 passed, 2 errors in 1.0s")["errors"] == 2  # type: ignore[index]
    assert parse_pytest_summary("no summary here") is None
    # the agent shapes a test command's output: a count past int()'s digit limit is no count, nor is its tail
    assert parse_pytest_summary("9" * 5000 + " passed in 0.01s") is None
    assert parse_pytest_summary("1 failed, " + "9" * 5000 + " passed in 0.01s")["passed"] == 0  # type: ignore[index]


async def test_evaluate_before_reset_raises(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EpisodeOverError):
        await make().evaluate()
    env = make()
    await env.reset(TASK)
    with pytest.raises(EpisodeOverError):
        await env.reset(TASK)
    await env.close()


def test_generated_task_has_required_shape() -> None:
    task: Task = TASK
    assert task.kind == "swe-lite" and task.answer is None
    assert set(task.data) >= {"files", "hidden_tests", "module", "mutation", "program"}


def test_unreachable_work_root_is_a_clear_error(sandbox: Sandbox, swe_cache: Path, tmp_path: Path) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("only root hands the workspace to another uid")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    env = SweLiteEnv(sandbox=sandbox, cache_dir=swe_cache, work_root=locked)
    result = asyncio.run(play(env, TASK, ["<answer>submit</answer>"]))
    assert result.reason is TerminationReason.INIT_FAILED
    assert result.error is not None and "world-executable" in result.error


def test_scripted_patch_restores_the_original_for_every_case() -> None:
    from tirl.envs.tasks.swe_gen import make_task

    for program, mutation in all_cases():
        data = make_task(program, mutation, "x").data
        buggy = data["files"][program.module_path]
        old, new = data["mutation"]["patch_old"], data["mutation"]["patch_new"]
        assert buggy.count(old) == 1
        assert buggy.replace(old, new) == program.source, (program.package, mutation.kind)
