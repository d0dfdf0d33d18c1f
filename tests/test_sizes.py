"""STYLE limits for the package: no module over 600 lines, no function over 80 lines.

Counted on the source text of ``src/tirl`` (every ``.py`` file): a module's
lines are its physical lines; a function's lines run from its ``def`` (its
decorators not included) to its last line, docstring included. Nested
functions count inside their parent and on their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tirl

PACKAGE = Path(tirl.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def sizes(root: Path = PACKAGE) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """``(modules over the limit, functions over the limit)`` as ``(place, lines)`` pairs."""
    modules: list[tuple[str, int]] = []
    functions: list[tuple[str, int]] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(root.parent).as_posix()
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            modules.append((rel, n))
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    functions.append((f"{rel}:{node.lineno} {node.name}", length))
    return modules, functions


def test_sizes_counts_a_long_function_and_a_long_module(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (pkg / "long_fn.py").write_text(f"def f():\n{body}\n", encoding="utf-8")  # 81 lines
    (pkg / "ok_fn.py").write_text("def g():\n" + "\n".join(body.splitlines()[:-1]) + "\n", encoding="utf-8")
    (pkg / "long_mod.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    modules, functions = sizes(pkg)
    assert modules == [("pkg/long_mod.py", MAX_MODULE_LINES + 1)]
    assert functions == [("pkg/long_fn.py:1 f", MAX_FUNCTION_LINES + 1)]


def test_no_module_over_600_lines() -> None:
    modules, _ = sizes()
    assert modules == [], f"modules over {MAX_MODULE_LINES} lines: {modules}"


def test_no_function_over_80_lines() -> None:
    _, functions = sizes()
    assert functions == [], f"functions over {MAX_FUNCTION_LINES} lines: {functions}"
