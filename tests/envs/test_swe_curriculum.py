"""The swe-lite curriculum: sizes, disjoint splits, every planted bug checked, experts through the real env.

The pool is built once per process (``pools()`` is cached). The expert tests
play scripted turns through the real :class:`SweLiteEnv`, the real sandbox
(bubblewrap where it works) and the judge's real pytest, one episode after
another: each episode is about 1-2 s, so each test plays at most 4.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tirl.config import EnvConfig, TirlConfig
from tirl.envs import check_env
from tirl.envs.base import Task
from tirl.envs.registry import load_tasks
from tirl.envs.seeds import eval_seed, validation_seed
from tirl.envs.swe_lite import SweLiteEnv, expert_solution
from tirl.envs.tasks.swe_curriculum import (
    POOL_PROGRAMS,
    SPLITS,
    bug_of,
    generate_curriculum,
    pools,
    programs,
    split_for_seed,
)
from tirl.envs.tasks.swe_experts import curriculum_expert_solution, fix_command, sed_pattern, wrong_fix_solution
from tirl.envs.tasks.swe_templates import BUG_KINDS
from tirl.sandbox.base import Sandbox
from tirl.testing import play
from tirl.trainer.wiring import train_seed
from tirl.types import Role, TerminationReason


def _key(task: Task) -> tuple[str, str]:
    bug = bug_of(task)
    lines = task.data["files"][task.data["module"]].split("\n")
    return "\n".join(lines[bug.first_line - 1 : bug.first_line - 1 + bug.length]), bug.kind


def _run_in_process(task: Task, source: str, script: str) -> tuple[int, int]:
    """``(passed, failed)`` of the hidden tests (script=None) or 1/0 for check.py, against ``source``."""
    import sys
    import types

    pkg = task.data["program"]
    core = types.ModuleType(f"{pkg}.core")
    exec(compile(source, f"{pkg}/core.py", "exec"), core.__dict__)
    package = types.ModuleType(pkg)
    package.__dict__.update({k: v for k, v in core.__dict__.items() if not k.startswith("__")})
    saved = {n: sys.modules.get(n) for n in (pkg, core.__name__)}
    sys.modules[pkg], sys.modules[core.__name__] = package, core
    passed = failed = 0
    try:
        ns: dict[str, object] = {"print": lambda *a: None}
        try:
            exec(compile(script, "t.py", "exec"), ns)
        except Exception:
            return 0, 1
        for name, fn in list(ns.items()):
            if name.startswith("test_") and callable(fn):
                try:
                    fn()
                    passed += 1
                except Exception:
                    failed += 1
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return passed, failed


def test_sizes_and_every_bug_kind_in_every_split() -> None:
    p = pools()
    total = sum(len(v) for v in p.values())
    assert total >= 1000 and len(p["heldout"]) >= 200 and len(p["validation"]) >= 100, {s: len(v) for s, v in p.items()}
    for split in SPLITS:
        assert set(Counter(t.data["bug"]["kind"] for t in p[split])) == set(BUG_KINDS), split
    assert len({t.id for v in p.values() for t in v}) == total  # distinct ids
    assert len({t.prompt for v in p.values() for t in v}) == total  # distinct prompts (the trainer dedupes by prompt)
    assert len(programs()) == POOL_PROGRAMS and len({q.package for q in programs()}) == POOL_PROGRAMS


def test_splits_are_disjoint_by_program_and_by_bug() -> None:
    p = pools()
    by_program = {s: {t.data["program"] for t in p[s]} for s in SPLITS}
    by_bug = {s: {_key(t) for t in p[s]} for s in SPLITS}
    for a, b in (("train", "heldout"), ("train", "validation"), ("heldout", "validation")):
        assert not by_program[a] & by_program[b], (a, b)
        assert not by_bug[a] & by_bug[b], (a, b)
    assert all(t.data["curriculum"] == s for s in SPLITS for t in p[s])


def test_deterministic_and_rebuilt_identically() -> None:
    a = generate_curriculum(50, seed=3, split="heldout")
    assert a == generate_curriculum(50, seed=3, split="heldout")
    assert [t.prompt for t in a] != [t.prompt for t in generate_curriculum(50, seed=4, split="heldout")]
    assert len({t.prompt for t in a}) == 50  # no repeat before the split is used up
    digest = hashlib.sha256(repr(pools()).encode()).hexdigest()
    rebuilt = pools.__wrapped__()  # type: ignore[attr-defined]
    assert hashlib.sha256(repr(rebuilt).encode()).hexdigest() == digest
    only = generate_curriculum(5, split="validation", kinds=("missing_return",))
    assert all(t.data["bug"]["kind"] == "missing_return" for t in only)
    with pytest.raises(ValueError, match="unknown bug kinds"):
        generate_curriculum(1, kinds=("typo",))


def test_every_bug_shows_on_a_hidden_call_the_prompt_does_not_quote() -> None:
    """Answering only the quoted call with the prompt's answer scored 1.0 with the bug in place on 94 plain and
    95 spec tasks (``between``'s ``x <= hi`` showed on ``x == hi`` alone...); ``Func.probes`` add a second one."""
    for spec in (False, True):
        for task in (t for split in SPLITS for t in pools(spec)[split]):
            namespace: dict[str, object] = {}
            exec(task.data["files"][task.data["module"]], namespace)
            quoted = task.prompt.split("`")[5]  # `python3 check.py` fails in the `pkg` package: `call` ...
            wrong = set()
            for line in task.data["hidden_tests"]["test_hidden.py"].split("\n"):
                call, _, want = line.removeprefix("    assert ").partition(" == ")
                if want and call != quoted and _outcome(namespace, call) != (True, ast.literal_eval(want)):
                    wrong.add(call)
            assert wrong, task.id


def _outcome(namespace: dict[str, object], call: str) -> tuple[bool, object]:
    try:
        return True, eval(call, dict(namespace))
    except Exception as exc:
        return False, type(exc)


def test_every_planted_bug_is_caught_and_the_hidden_tests_never_ship() -> None:
    for split in SPLITS:
        for task in pools()[split]:
            files, hidden = task.data["files"], task.data["hidden_tests"]["test_hidden.py"]
            assert "test_hidden.py" not in files and not any("def test_" in text for text in files.values())
            assert all(hidden not in text for text in files.values())
            shown = [
                line
                for line in hidden.split("\n")
                if line.startswith("    assert") and line.strip() in files["check.py"]
            ]
            assert len(set(shown)) <= 3  # check.py shows at most one of each function's six hidden calls
            buggy, check = files[task.data["module"]], files["check.py"]
            fixed = buggy.split("\n")
            bug = bug_of(task)
            if bug.kind == "missing_return":
                fixed.insert(bug.line, bug.old)
            else:
                assert fixed[bug.line - 1].count(bug.new) == 1
                fixed[bug.line - 1] = fixed[bug.line - 1].replace(bug.new, bug.old)
            correct = "\n".join(fixed)
            assert _run_in_process(task, correct, hidden) == (3, 0), task.id
            assert _run_in_process(task, buggy, hidden)[1] >= 1, task.id
            assert _run_in_process(task, correct, check + "\ndef test_check(): pass\n") == (1, 0), task.id
            assert _run_in_process(task, buggy, check) == (0, 1), task.id


def test_every_sed_fix_restores_the_original_with_real_sed(tmp_path: Path) -> None:
    """One bash process runs the expert's fix command of every 4th task (sed, python3 for every 25th of those)."""
    script, expected = [], {}
    for i, task in enumerate(t for s in SPLITS for t in pools()[s][::4]):
        buggy = task.data["files"][task.data["module"]]
        (tmp_path / f"{i}.py").write_text(buggy)
        bug = bug_of(task)
        script.append(fix_command(bug, f"{i}.py", python=i % 25 == 0))
        fixed = buggy.split("\n")
        if bug.kind == "missing_return":
            fixed.insert(bug.line, bug.old)
        else:
            fixed[bug.line - 1] = fixed[bug.line - 1].replace(bug.new, bug.old)
        expected[i] = "\n".join(fixed)
    subprocess.run(["bash", "-e", "-c", "\n".join(script)], cwd=tmp_path, check=True, capture_output=True)
    wrong = [i for i, text in expected.items() if (tmp_path / f"{i}.py").read_text() != text]
    assert not wrong, wrong[:5]
    assert sed_pattern("a[0].b*/c") == "a\\[0\\]\\.b\\*\\/c"


def test_task_source_follows_the_trainers_seeds() -> None:
    cfg = EnvConfig(name="swe-lite", difficulty=2, seed=5)
    held = load_tasks(cfg, 20, seed=eval_seed(5))
    val = load_tasks(cfg, 20, seed=validation_seed(5))
    train = load_tasks(cfg, 20, seed=train_seed(5, 3))
    assert {t.data["curriculum"] for t in held} == {"heldout"}
    assert {t.data["curriculum"] for t in val} == {"validation"}
    assert {t.data["curriculum"] for t in train} == {"train"}
    assert split_for_seed(100_000) == "train"  # SFT's demonstrations come from the training split
    classic = load_tasks(EnvConfig(name="swe-lite"), 3, seed=0)  # difficulty 1: the 33 planted bugs, unchanged
    assert all("curriculum" not in t.data and "mutation" in t.data for t in classic)


def test_trainer_task_sets_use_the_splits() -> None:
    from tirl.trainer.wiring import TaskSets

    cfg = TirlConfig()
    cfg.env = EnvConfig(name="swe-lite", difficulty=2, eval_size=200)
    sets = TaskSets(cfg)
    assert len({t.prompt for t in sets.eval_tasks}) == 200 and len(sets.validation_tasks) == 200
    assert {t.data["curriculum"] for t in sets.eval_tasks} == {"heldout"}
    assert {t.data["curriculum"] for t in sets.validation_tasks} == {"validation"}
    assert {t.data["curriculum"] for t in sets.train(0, 32)} == {"train"}


def _sample() -> list[Task]:
    """Three tasks per bug kind, from all splits, covering every detour of the expert."""
    out = []
    for kind in BUG_KINDS:
        for split in SPLITS:
            out.append(next(t for t in pools()[split] if t.data["bug"]["kind"] == kind and t not in out))
    return out


SAMPLE = _sample()


@pytest.fixture
def make(sandbox: Sandbox, swe_cache: Path, work_root: Path):  # type: ignore[no-untyped-def]
    def factory(**kw: object) -> SweLiteEnv:
        return SweLiteEnv(sandbox=sandbox, cache_dir=swe_cache, work_root=work_root, **kw)  # type: ignore[arg-type]

    return factory


def test_the_sample_covers_every_detour() -> None:
    scripts = [curriculum_expert_solution(t) for t in SAMPLE]
    assert {len(s) for s in scripts} <= set(range(3, 9))
    joined = ["\n".join(s) for s in scripts]
    assert any("pytest" in s for s in joined) and any("python3 - <<" in s for s in joined)
    assert any("cat -n" in s for s in joined) and any("sed -n" in s for s in joined)
    assert any(s.count("python3 check.py") == 3 for s in joined)  # a wrong first guess, seen to fail
    counts = Counter(len(curriculum_expert_solution(t)) for s in SPLITS for t in pools()[s])
    assert min(counts) >= 5 and max(counts) <= 8 and counts[5] < sum(counts.values()) * 0.8


@pytest.mark.parametrize("kind", BUG_KINDS)
async def test_expert_solves_through_the_real_env(make, kind: str) -> None:  # type: ignore[no-untyped-def]
    for task in [t for t in SAMPLE if t.data["bug"]["kind"] == kind]:
        turns = curriculum_expert_solution(task)
        result = await play(make(), task, turns)
        assert result.reason is TerminationReason.SUBMITTED, (task.id, result.messages[-1])
        assert result.reward == 1.0 and result.correct, (task.id, result.info.get("eval_output"))
        assert result.info["tests_passed"] == 3 and 3 <= result.info["turns"] <= 8
        tool = [m.content or "" for m in result.messages if m.role is Role.TOOL]
        assert "Traceback" in "".join(tool) and tool[-1] == "```output\nall checks passed\n```"
        if any("pytest" in t for t in turns):
            assert "No module named pytest" in tool[0]


async def test_wrong_fix_gets_zero_and_the_hidden_tests_are_not_in_the_workspace(make) -> None:  # type: ignore[no-untyped-def]
    decoyed = next(t for t in SAMPLE if bug_of(t).decoy is not None)
    plain = next(t for t in SAMPLE if bug_of(t).decoy is None)
    for task in (decoyed, plain):
        env = make()
        await env.reset(task)
        ws = env.workspace
        assert ws is not None
        hidden = task.data["hidden_tests"]["test_hidden.py"]
        for path in ws.rglob("*"):
            assert path.name != "test_hidden.py" and (not path.is_file() or hidden not in path.read_text())
        await env.close()
        result = await play(make(), task, wrong_fix_solution(task))
        assert result.reason is TerminationReason.SUBMITTED and result.reward == 0.0, task.id
        assert result.info["tests_failed"] >= 1 and result.info["eval_failure"] is None


async def test_check_env_and_the_generic_expert(make) -> None:  # type: ignore[no-untyped-def]
    task = SAMPLE[0]
    assert expert_solution(task) == curriculum_expert_solution(task)
    report = await check_env(lambda: make(max_turns=9), task, solution=expert_solution(task), idle="```bash\nls\n```")
    assert {"protocol", "reset", "void", "evaluate", "close", "solution", "limit"} <= set(report.passed)
