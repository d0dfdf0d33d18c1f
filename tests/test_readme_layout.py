"""The README's Layout block lists every module of the package (``commands/`` is listed as one per subcommand)."""

from __future__ import annotations

import re
from pathlib import Path

import tirl

PACKAGE = Path(tirl.__file__).parent
README = PACKAGE.parents[1] / "README.md"
EXEMPT = ("commands/",)  # documented as "one module per subcommand"


def layout_modules(readme: str) -> set[str]:
    """``pkg/sub/name.py`` paths named in the ``src/tirl/`` code block under ``## Layout``."""
    section = readme.split("## Layout", 1)[1]
    block = section.split("```", 2)[1]
    named: set[str] = set()
    where = ""
    for line in block.splitlines():
        if not line.strip() or line.strip() == "src/tirl/":
            continue
        if not line.startswith(" "):  # tests/, benchmarks/: the package tree has ended
            break
        first = line.split()[0]
        if not line.startswith("   "):  # a new entry: a package or top-level files
            where = first if first.endswith("/") else ""
        named.update(where + name for name in re.findall(r"\b([A-Za-z_][\w]*\.py)\b", line))
    return named


def test_every_module_is_in_the_readme_layout() -> None:
    paths = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    modules = {p for p in paths if not p.startswith(EXEMPT) and not p.startswith("assets/")}
    missing = sorted(modules - layout_modules(README.read_text(encoding="utf-8")))
    assert not missing, f"add these modules to the README's Layout block: {missing}"


def test_the_layout_lists_no_module_that_does_not_exist() -> None:
    listed = layout_modules(README.read_text(encoding="utf-8"))
    gone = sorted(m for m in listed if not (PACKAGE / m).is_file())
    assert not gone, f"the README's Layout block names modules that do not exist: {gone}"


def test_the_parser_attributes_files_to_their_package() -> None:
    block = ["src/tirl/", "  types.py  a   cli.py", "  envs/   base.py · x.py", "       · tool_env.py", "tests/  y.py"]
    text = "## Layout\n\n```\n" + "\n".join(block) + "\n```\n"
    assert layout_modules(text) == {"types.py", "cli.py", "envs/base.py", "envs/x.py", "envs/tool_env.py"}
