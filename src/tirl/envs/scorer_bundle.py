"""The judge's importers: the pytest bundle (read into memory once, then imported from there), the hidden helpers.

Runs in the sandbox as part of the swe-lite judge (:mod:`tirl.envs.scorer_runner`; the host sends this
module's source as text, so nothing here may import tirl). The judge unlinks the zip right after
reading it, so no process of the workspace can change a pytest module the judge imports later.
``pygments`` (which pytest imports for colour only; the judge's report goes to a pipe) is a stub when
the bundle has none. :func:`helper_finder` imports the hidden tests' own helper modules from their directory;
:func:`imported_names` lists what sources import (the judge and the host both use it), and :func:`verdict_mac`
tags the verdict line (the judge writes it, the host checks it).
"""

from __future__ import annotations

from typing import Any

_LEXER = "class Lexer:\n    def __init__(self, *a, **k):\n        pass\n"
#: pytest imports pygments for colour; the judge's report goes to a pipe (never coloured), so a stub does.
PYGMENTS_STUB = {
    "pygments/__init__.py": "from pygments import util\ndef highlight(code, lexer, formatter):\n    return code\n",
    "pygments/util.py": "class ClassNotFound(ValueError):\n    pass\nclass OptionError(Exception):\n    pass\n",
    "pygments/formatters/__init__.py": "",
    "pygments/formatters/terminal.py": _LEXER.replace("Lexer", "TerminalFormatter"),
    "pygments/lexer.py": _LEXER,
    "pygments/lexers/__init__.py": "",
    "pygments/lexers/diff.py": "from pygments.lexer import Lexer\nclass DiffLexer(Lexer):\n    pass\n",
    "pygments/lexers/python.py": "from pygments.lexer import Lexer\nclass PythonLexer(Lexer):\n    pass\n",
}


class BundleImporter:
    """Imports the pytest bundle from memory: the zip is read once (the caller unlinks it); pygments is a stub."""

    def __init__(self, path: str) -> None:
        import importlib.util
        import zipfile

        with zipfile.ZipFile(path) as zf:
            self.files = {name: zf.read(name) for name in zf.namelist()}
        if "pygments/__init__.py" not in self.files:
            self.files.update((k, v.encode()) for k, v in PYGMENTS_STUB.items())
        self.magic = importlib.util.MAGIC_NUMBER

    def _where(self, fullname: str) -> tuple[str, bool] | None:
        base = fullname.replace(".", "/")
        for rel, is_pkg in ((base + "/__init__.py", True), (base + ".py", False)):
            if rel in self.files:
                return rel, is_pkg
        return None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        """A spec for a module of the bundle (None for any other name)."""
        import importlib.util

        found = self._where(fullname)
        if found is None:
            return None
        rel, is_pkg = found
        origin = "/tirl-judge/" + rel
        spec = importlib.util.spec_from_loader(fullname, self, origin=origin, is_package=is_pkg)  # type: ignore[arg-type]
        if spec is not None:
            spec.has_location = True
            if is_pkg:
                spec.submodule_search_locations = ["/tirl-judge/" + rel.rsplit("/", 1)[0]]
        return spec

    def create_module(self, spec: Any) -> Any:
        """The default module object."""
        return None

    def exec_module(self, module: Any) -> None:
        """Run the module's cached bytecode (same Python) or its compiled source."""
        import marshal

        found = self._where(module.__name__)
        assert found is not None
        rel = found[0]
        pyc = self.files.get(rel[:-3] + ".pyc", b"")
        code = marshal.loads(pyc[16:]) if pyc[:4] == self.magic else compile(self.files[rel], rel, "exec")
        module.__file__ = "/tirl-judge/" + rel
        exec(code, module.__dict__)

    def get_source(self, fullname: str) -> str | None:
        """The module's source (for tracebacks)."""
        found = self._where(fullname)
        return None if found is None else self.files[found[0]].decode("utf-8", "replace")

    def is_package(self, fullname: str) -> bool:
        """Whether the name is a package of the bundle."""
        found = self._where(fullname)
        return bool(found and found[1])


def helper_finder(tests: str, names: set[str]) -> Any:
    """A meta-path finder for the top-level modules ``names`` of the hidden tests' directory ``tests``.

    Their submodules are found through the package's own path, as usual; nothing of the workspace is searched.
    """
    import importlib.machinery

    class Finder:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
            if fullname not in names:
                return None
            return importlib.machinery.PathFinder.find_spec(fullname, [tests])

    return Finder()


def imported_names(sources: list[str]) -> set[str]:
    """The top-level module names that ``sources`` import (absolute imports only)."""
    import ast

    names: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
    return names


def verdict_mac(secret: str, payload: str) -> str:
    """The verdict line's tag: HMAC-SHA256 of ``payload`` under ``secret`` (hex), never the secret itself.

    The line can be read on its way to the host (a process of the sandbox that reaches the run's standard
    output pipe); what it shows must not let anyone sign another payload (docs/sandbox.md).
    """
    import hashlib
    import hmac

    return hmac.new(secret.encode("ascii"), payload.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
