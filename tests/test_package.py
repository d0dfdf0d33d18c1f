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


# ---------------------------------------------------------------- layering: commands, cycles, private names


def module_name(path: Path) -> str:
    """``tirl.a.b`` for ``PACKAGE/a/b.py`` (``tirl.a`` for ``PACKAGE/a/__init__.py``)."""
    parts = ["tirl", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _absolute(node: ast.ImportFrom, importer: str) -> str:
    """The absolute module of a ``from`` import (relative ones resolved against ``importer``'s package)."""
    if not node.level:
        return node.module or ""
    is_pkg = MODULES[importer].name == "__init__.py"
    base = importer.split(".")[: len(importer.split(".")) - node.level + (1 if is_pkg else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def tirl_imports(name: str) -> list[tuple[str, str | None]]:
    """Every tirl import of module ``name``, anywhere in it (functions and ``TYPE_CHECKING`` blocks included).

    Each is ``(module, imported_name)``: ``from tirl.a import b`` is ``("tirl.a.b", None)`` when ``b`` is a
    module, else ``("tirl.a", "b")``; ``import tirl.a.b`` is ``("tirl.a.b", None)``.
    """
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.split(".")[0] == "tirl"]
        elif isinstance(node, ast.ImportFrom):
            mod = _absolute(node, name)
            if mod.split(".")[0] != "tirl":
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                found.append((sub, None) if sub in MODULES else (mod, a.name))
    return found


def graph() -> dict[str, set[str]]:
    """Module → the tirl modules it imports (existing ones only)."""
    return {m: {t for t, _ in tirl_imports(m) if t in MODULES and t != m} for m in MODULES}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_cycles_finds_a_two_module_cycle_and_ignores_a_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_below_the_cli_imports_the_commands() -> None:
    """``tirl.commands`` is the top layer: only ``tirl.cli`` and the commands themselves may import it."""
    offenders = sorted(
        f"{m} imports {t}"
        for m in MODULES
        if m != "tirl.cli" and not m.startswith("tirl.commands")
        for t, _ in tirl_imports(m)
        if t == "tirl.commands" or t.startswith("tirl.commands.")
    )
    assert not offenders, offenders


def test_no_import_cycle_between_modules() -> None:
    """Counting every import: a lazy import inside a function or under ``TYPE_CHECKING`` still ties two modules."""
    found = cycles(graph())
    assert not found, f"import cycles: {found}"


#: private (``_name``) imports across modules that are allowed, each with its reason
PRIVATE_ALLOWED: dict[tuple[str, str], str] = {
    ("tirl.envs.workspace", "tirl.sandbox._tree"): "the tree walker is private to the sandbox because the warm "
    "pool's fork server runs its source text (standard library only); swe-lite workspaces are attacker-built "
    "trees too and use the same walker rather than a second one",
}


def private_imports(name: str) -> list[str]:
    """``module:name`` of each private name that ``name`` imports from another module.

    A private module (``tirl.pkg._mod``) may be imported by the modules of its own package ``tirl.pkg``;
    a private name (``from tirl.x import _f``) by no other module.
    """
    bad = []
    for mod, attr in tirl_imports(name):
        if attr is not None and attr.startswith("_") and not attr.startswith("__"):
            bad.append(f"{mod}:{attr}")
        private = [i for i, part in enumerate(mod.split(".")) if part.startswith("_")]
        if private:
            owner = ".".join(mod.split(".")[: private[0]])  # the package that owns the private module
            if not (name == owner or name.startswith(owner + ".")):
                bad.append(mod)
    return [b for b in bad if (name, b) not in PRIVATE_ALLOWED]


def test_private_imports_are_seen(tmp_path: Path) -> None:
    assert "tirl.distributed.ray_backend:connect" not in private_imports("tirl.distributed.ray_ranks")
    assert any(m.startswith("tirl.") for m in MODULES)


def test_no_private_name_is_imported_across_modules() -> None:
    offenders = {m: got for m in sorted(MODULES) if (got := private_imports(m))}
    assert not offenders, (
        f"private imports across modules (make the name public, or allow it with a reason): {offenders}"
    )


def test_no_module_subclasses_the_policy_updater() -> None:
    """Data parallelism is a :class:`~tirl.trainer.update.GradSync` given to the updater, not a subclass of it
    that overrides its private methods (as ``ShardedUpdater`` did)."""
    subclasses = sorted(
        f"{m}.{node.name}"
        for m, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and any((b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")) == "PolicyUpdater" for b in node.bases)
    )
    assert not subclasses, subclasses
