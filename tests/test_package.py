"""Test tooling stays out of the runtime: no module outside ``tirl.testing`` imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import tirl

PACKAGE = Path(tirl.__file__).parent


def imports_of(path: Path) -> set[str]:
    """Every module name ``path`` imports (absolute imports; ``from x import y`` gives ``x``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_imports_of_sees_both_forms(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import tirl.testing\nfrom tirl.testing.scripted import play\nfrom . import x\n", encoding="utf-8")
    assert imports_of(f) == {"tirl.testing", "tirl.testing.scripted"}


def test_no_runtime_module_imports_the_test_tooling() -> None:
    offenders = sorted(
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if "testing" not in p.relative_to(PACKAGE).parts
        and any(n == "tirl.testing" or n.startswith("tirl.testing.") for n in imports_of(p))
    )
    assert not offenders, f"runtime modules import tirl.testing: {offenders}"
