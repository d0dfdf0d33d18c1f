"""``tirl audit``'s edit-locality section (:mod:`tirl.diagnostics.swe_edits`) against the curriculum's own truth.

The reference is the planted bug itself (:func:`tirl.envs.tasks.swe_curriculum.bug_of`: the buggy line, the
function's first line and length) and Python's ``ast`` (each function's ``lineno``/``end_lineno``) on the
real generated modules; the trajectories are written the way the env writes its messages (``cat -n``,
``grep -n -A``, ``sed -n`` outputs in its output fence).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tirl.cli import main
from tirl.diagnostics.swe_edits import _spans, bug_class, edit_locality, place_of
from tirl.envs.tasks.swe_curriculum import bug_of, generate_curriculum
from tirl.envs.tasks.swe_templates import BUG_KINDS
from tirl.types import Message, Role, Trajectory

TASKS = generate_curriculum(60, seed=3, split="validation")


def _out(text: str) -> str:
    return f"```output\n{text}\n```"


def _cat_n(source: str) -> str:
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(source.split("\n"), start=1))


def _traj(task, turns: list[tuple[str, str]], *, correct: bool = False, version: int = 0) -> Trajectory:
    messages = [Message(Role.SYSTEM, "sys"), Message(Role.USER, task.prompt)]
    for command, output in turns:
        messages += [Message(Role.ASSISTANT, f"```bash\n{command}\n```"), Message(Role.TOOL, _out(output))]
    return Trajectory(id=f"t-{task.id}-{version}", messages=messages, group=f"s1-0-{task.id}-s1-0",
                      correct=correct, policy_version=version)  # fmt: skip


def _fix(task) -> str:
    bug = bug_of(task)
    path = task.data["module"]
    if bug.kind == "missing_return":
        return f"sed -i '{bug.line}a\\{bug.old}' {path}"
    return f"sed -i '{bug.line}s/{bug.new}/{bug.old}/' {path}"


def test_spans_of_a_full_listing_match_ast_on_real_modules() -> None:
    """Each function starts at its ``def`` and ends at the line before the next left-margin line:
    ``ast``'s ``end_lineno`` or later, with only blank lines between."""
    for task in TASKS[:20]:
        source = task.data["files"][task.data["module"]]
        lines = source.split("\n")
        listing = {i: text for i, text in enumerate(lines, start=1)}
        spans = _spans(listing)
        funcs = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
        assert set(spans) == {f.name for f in funcs}
        for f in funcs:
            span = spans[f.name]
            assert span.start == f.lineno and f.end_lineno is not None and span.end >= f.end_lineno
            assert all(not lines[i - 1].strip() for i in range(f.end_lineno + 1, span.end + 1))
            assert span.closed or f is funcs[-1]  # only the last function has no left-margin line after it


def test_the_experts_fix_after_cat_n_is_inside_and_another_functions_line_is_outside() -> None:
    for task in TASKS:
        bug = bug_of(task)
        source = task.data["files"][task.data["module"]]
        listed = [("python3 check.py", "AssertionError"), (f"cat -n {task.data['module']}", _cat_n(source))]
        good = place_of(_traj(task, [*listed, (_fix(task), "[no output]")], correct=True))
        assert good.place == "inside" and good.first_edit_line == bug.line and good.target == bug.function
        assert good.span is not None and good.span.start == bug.first_line
        other = next(f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef) and f.name != bug.function)
        wrong = place_of(_traj(task, [*listed, (f"sed -i '{other.lineno + 1}s/a/b/' x.py", "[no output]")]))
        assert wrong.place == "outside" and wrong.first_edit_line == other.lineno + 1


def test_a_short_grep_listing_leaves_the_span_open_and_sed_n_output_is_numbered() -> None:
    def has_next(t) -> bool:  # a function with another after it (its def two lines past the blank ones)
        b, text = bug_of(t), t.data["files"][t.data["module"]].split("\n")
        return b.length >= 4 and b.first_line > 4 and len(text) > b.first_line + b.length + 1

    task = next(t for t in TASKS if has_next(t))
    bug = bug_of(task)
    lines = task.data["files"][task.data["module"]].split("\n")
    assert lines[bug.first_line + bug.length + 1].startswith("def ")
    start = bug.first_line
    grep = "\n".join(f"{start + k}{':' if k == 0 else '-'}{lines[start - 1 + k]}" for k in range(2))
    turns = [(f'grep -n -A1 "def {bug.function}(" {task.data["module"]}', grep)]
    beyond = place_of(_traj(task, [*turns, (f"sed -i '{start + 3}s/a/b/' x.py", "[no output]")]))
    assert beyond.place == "beyond_listing" and beyond.span is not None and not beyond.span.closed
    assert place_of(_traj(task, [*turns, (f"sed -i '{start + 1}s/a/b/' x.py", "")])).place == "inside"
    assert place_of(_traj(task, [*turns, (f"sed -i '{start - 2}s/a/b/' x.py", "")])).place == "outside"
    # sed -n 'A,Bp' prints without numbers; the command gives them, and a left-margin line closes the span
    end = start + bug.length + 2  # past the function and its blank line, into the next def
    shown = "\n".join(lines[start - 1 : end])
    turns.append((f"sed -n '{start},{end}p' {task.data['module']}", shown))
    closed = place_of(_traj(task, [*turns, (f"sed -i '{end}s/a/b/' x.py", "")]))
    assert closed.span is not None and closed.span.closed and closed.place == "outside"


def test_no_listing_no_line_edit_and_no_named_function() -> None:
    task = TASKS[0]
    assert place_of(_traj(task, [(_fix(task), "")])).place == "unlisted"
    rewrite = "python3 - <<'EOF'\nprint(1)\nEOF"
    assert place_of(_traj(task, [("python3 check.py", "x"), (rewrite, "1")])).place == "no_line_edit"
    plain = Trajectory(id="m", messages=[Message(Role.USER, "What is 2 + 2?"), Message(Role.ASSISTANT, "4")])
    assert place_of(plain).place == "no_target"
    assert edit_locality([plain]) is None


def test_counts_per_version_and_class_and_the_outside_share() -> None:
    rows = []
    for version, task in enumerate(TASKS[:12]):
        source = task.data["files"][task.data["module"]]
        listed = [(f"cat -n {task.data['module']}", _cat_n(source))]
        if version % 3 == 0:
            first = next(f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)
                         and f.name != bug_of(task).function)  # fmt: skip
            rows.append(_traj(task, [*listed, (f"sed -i '{first.lineno}s/a/b/' x", "")], version=version % 2))
        else:
            rows.append(_traj(task, [*listed, (_fix(task), "")], correct=version % 2 == 1, version=version % 2))
    got = edit_locality(rows)
    assert got is not None
    assert got["trajectories"] == 12 and got["inside"]["count"] == 8 and got["outside"]["count"] == 4
    assert got["solved"] == got["inside"]["solved"] == sum(1 for v in range(12) if v % 3 and v % 2)
    assert got["outside_share"] == round(4 / 12, 4)
    assert sum(c["trajectories"] for c in got["by_policy_version"].values()) == 12
    kinds = {bug_of(t).kind for t in TASKS[:12]}
    assert set(got["by_bug_class"]) == kinds and kinds <= set(BUG_KINDS)
    assert all(bug_class(r) == bug_of(t).kind for r, t in zip(rows, TASKS[:12], strict=True))


def test_tirl_audit_prints_and_writes_the_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = TASKS[1]
    source = task.data["files"][task.data["module"]]
    listed = [(f"cat -n {task.data['module']}", _cat_n(source))]
    rows = [_traj(task, [*listed, (_fix(task), "")], correct=True), _traj(task, [("ls", "core.py")], version=1)]
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows), encoding="utf-8")
    assert main(["audit", str(path), "--json"]) == 0
    edits = json.loads(capsys.readouterr().out)["edits"]
    assert edits["inside"] == {"count": 1, "solved": 1} and edits["no_line_edit"] == {"count": 1, "solved": 0}
    assert main(["audit", str(path)]) == 0
    text = capsys.readouterr().out
    assert "first line edit: in the function the issue names?" in text
    assert "first edits outside the named function: 0.0% of those placed" in text
    assert "first edits inside it that solved their task: 1 of 1 (100.0%" in text


def test_hostile_numbers_and_sizes_do_not_break_the_audit() -> None:
    """A 5,000-digit "line number" (past int()'s limit), a huge sed -n range and a long listing."""
    task = TASKS[2]
    huge = "9" * 5000
    turns = [(f"cat -n {task.data['module']}", f"{huge}\tdef x():\n" + "\n".join(f"{i}\t y" for i in range(1, 20000))),
             ("sed -n '1,999999999p' core.py", "def other():\n    pass"),
             (f"sed -i '{huge}s/a/b/' core.py", ""), ("sed -i '3s/a/b/' core.py", "")]  # fmt: skip
    got = place_of(_traj(task, turns))
    assert got.place == "unlisted" and got.first_edit_line == 3  # the 5,000-digit edit is no line edit


def test_the_html_report_shows_the_edits_table(tmp_path: Path) -> None:
    from tirl.diagnostics.report import render_report

    task = TASKS[4]
    source = task.data["files"][task.data["module"]]
    listed = [(f"cat -n {task.data['module']}", _cat_n(source))]
    rows = [_traj(task, [*listed, (_fix(task), "")], correct=True), _traj(task, [*listed, ("sed -i '1s/a/b/' x", "")])]
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    page = render_report(tmp_path)
    assert "First line edit: in the function the issue names?" in page
    assert "50.0% of the placed first edits are outside it" in page
    assert f"<th>{bug_of(task).kind}</th><td>2</td><td>1</td><td>1 (1)</td><td>1 (0)</td>" in page
