"""The spec curriculum (``env.difficulty=3``): the plain curriculum's bugs with a docstring that quotes each
bug site's correct text — every planted bug still caught, the docstring untouched by the bug and stating the
fix, the splits disjoint, the experts' fixes right under real sed and through the real env and sandbox."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from tests.envs.test_swe_curriculum import _key, _run_in_process

from tirl.config import EnvConfig
from tirl.envs.base import Task
from tirl.envs.registry import load_tasks
from tirl.envs.seeds import validation_seed
from tirl.envs.swe_lite import SweLiteEnv
from tirl.envs.swe_replay import find_task
from tirl.envs.tasks.swe_curriculum import SPLITS, bug_of, generate_curriculum, pools, programs
from tirl.envs.tasks.swe_experts import curriculum_expert_solution, fix_command
from tirl.envs.tasks.swe_templates import BUG_KINDS, SPEC_PREFIX
from tirl.sandbox.base import Sandbox
from tirl.testing import play
from tirl.types import TerminationReason


def _fixed(task: Task) -> str:
    bug = bug_of(task)
    lines = task.data["files"][task.data["module"]].split("\n")
    if bug.kind == "missing_return":
        lines.insert(bug.line, bug.old)
    else:
        lines[bug.line - 1] = lines[bug.line - 1].replace(bug.new, bug.old)
    return "\n".join(lines)


def test_sizes_ids_and_the_same_bugs_as_the_plain_curriculum() -> None:
    spec, plain = pools(spec=True), pools()
    assert len(spec["train"]) >= 1000 and len(spec["heldout"]) >= 200 and len(spec["validation"]) >= 100
    for split in SPLITS:
        assert set(Counter(t.data["bug"]["kind"] for t in spec[split])) == set(BUG_KINDS), split
        assert all(t.id.startswith("swes-") for t in spec[split])
    ids = {t.id for v in spec.values() for t in v}
    assert len(ids) == sum(len(v) for v in spec.values()) and not ids & {t.id for v in plain.values() for t in v}
    # the training split is the plain one's, bug for bug (prompt and bug class), docstrings added
    assert [(t.prompt, bug_of(t).kind) for t in spec["train"]] == [(t.prompt, bug_of(t).kind) for t in plain["train"]]


def test_the_docstring_states_every_sites_correct_text_and_the_bug_never_touches_it() -> None:
    for split in SPLITS:
        for task in pools(spec=True)[split]:
            bug = bug_of(task)
            lines = task.data["files"][task.data["module"]].split("\n")
            doc = lines[bug.first_line]  # the line after def
            assert doc.startswith(SPEC_PREFIX) and doc.endswith('."""'), task.id
            if bug.kind != "missing_return":
                assert f"`{bug.old}`" in doc and bug.line != bug.first_line + 1, task.id
                assert bug.new not in doc.replace(f"`{bug.old}`", ""), task.id  # the buggy text is not quoted
            assert _fixed(task).count(SPEC_PREFIX) == 3  # one per function, in the fixed module too


def test_splits_are_disjoint_and_every_bug_is_caught_with_hidden_tests_unshipped() -> None:
    p = pools(spec=True)
    by_program = {s: {t.data["program"] for t in p[s]} for s in SPLITS}
    by_bug = {s: {_key(t) for t in p[s]} for s in SPLITS}
    for a, b in (("train", "heldout"), ("train", "validation"), ("heldout", "validation")):
        assert not by_program[a] & by_program[b] and not by_bug[a] & by_bug[b], (a, b)
    for split in SPLITS:
        for task in p[split][::5]:
            files, hidden = task.data["files"], task.data["hidden_tests"]["test_hidden.py"]
            assert "test_hidden.py" not in files and all(hidden not in text for text in files.values())
            buggy = files[task.data["module"]]
            assert _run_in_process(task, _fixed(task), hidden) == (3, 0), task.id
            assert _run_in_process(task, buggy, hidden)[1] >= 1, task.id
            assert _run_in_process(task, buggy, files["check.py"]) == (0, 1), task.id


def test_the_experts_fixes_are_right_under_real_sed(tmp_path: Path) -> None:
    script, expected = [], {}
    for i, task in enumerate(t for s in SPLITS for t in pools(spec=True)[s][::6]):
        (tmp_path / f"{i}.py").write_text(task.data["files"][task.data["module"]])
        script.append(fix_command(bug_of(task), f"{i}.py", python=i % 20 == 0))
        expected[i] = _fixed(task)
    subprocess.run(["bash", "-e", "-c", "\n".join(script)], cwd=tmp_path, check=True, capture_output=True)
    wrong = [i for i, text in expected.items() if (tmp_path / f"{i}.py").read_text() != text]
    assert not wrong, wrong[:5]


def test_difficulty_3_draws_the_spec_curriculum_everywhere() -> None:
    val = load_tasks(EnvConfig(name="swe-lite", difficulty=3), 10, seed=validation_seed(0))
    assert all(t.id.startswith("swes-") and t.data["curriculum"] == "validation" for t in val)
    plain = load_tasks(EnvConfig(name="swe-lite", difficulty=2), 10, seed=validation_seed(0))
    assert [t.prompt for t in val] != [] and all(t.id.startswith("swec-") for t in plain)
    task = generate_curriculum(3, seed=7, split="heldout", spec=True)[2]
    assert find_task(task.id) is not None and find_task(task.id).data == task.data  # tirl audit --rejudge finds it
    assert len(programs()) == 300  # the programs themselves are shared


@pytest.fixture
def make(sandbox: Sandbox, swe_cache: Path, work_root: Path):  # type: ignore[no-untyped-def]
    def factory(**kw: object) -> SweLiteEnv:
        return SweLiteEnv(sandbox=sandbox, cache_dir=swe_cache, work_root=work_root, **kw)  # type: ignore[arg-type]

    return factory


async def test_the_expert_solves_one_bug_of_every_class_through_the_real_env(make) -> None:  # type: ignore[no-untyped-def]
    for kind in BUG_KINDS:
        task = next(t for t in pools(spec=True)["validation"] if bug_of(t).kind == kind)
        result = await play(make(), task, curriculum_expert_solution(task))
        assert result.reason is TerminationReason.SUBMITTED and result.reward == 1.0, (task.id, result.messages[-1])
        assert result.info["tests_passed"] == 3
