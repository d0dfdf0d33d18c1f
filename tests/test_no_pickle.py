"""No pickle anywhere tirl loads: every ``torch.load`` in ``src/`` passes ``weights_only=True`` literally, and no
module unpickles with pickle, dill, joblib, cloudpickle, shelve or marshal, nor ``numpy.load(allow_pickle=True)``.

A scan of the source (``ast``), so that a new loader cannot slip in: unpickling a file that a user hands tirl
(a checkpoint, a model directory, a log) runs whatever code the file names. The one exception is listed in
``ALLOWED`` with its reason: bytes a forked child of tirl itself sends back over a pipe, never a file.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tirl"
UNPICKLERS = {"pickle", "_pickle", "cPickle", "dill", "joblib", "cloudpickle", "shelve", "marshal"}
LOADERS = {"load", "loads", "Unpickler", "open"}  # shelve.open unpickles every value it reads
# module (relative to src/tirl) -> why its unpickling is not a load of user input
ALLOWED = {
    "filters/forked.py": "pickle.loads of the result a forked child of this process wrote into a pipe it created",
    "envs/scorer_bundle.py": "marshal.loads of the .pyc files tirl bundles from its own installed pytest, run by "
    "the swe-lite judge before any workspace code exists (what the import system does with a .pyc)",
}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _problems(tree: ast.AST) -> list[str]:
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            top = (node.module or "").split(".")[0]
            for alias in node.names:
                if (top in UNPICKLERS and alias.name in LOADERS) or (
                    top in ("torch", "numpy") and alias.name == "load"
                ):
                    out.append(f"line {node.lineno}: from {node.module} import {alias.name}")
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        if name.endswith("torch.load") or name == "torch.serialization.load":
            flag = kw.get("weights_only")
            if not (isinstance(flag, ast.Constant) and flag.value is True):
                out.append(f"line {node.lineno}: {name}(...) without weights_only=True")
        if name in ("np.load", "numpy.load"):
            flag = kw.get("allow_pickle")
            if flag is not None and not (isinstance(flag, ast.Constant) and flag.value is False):
                out.append(f"line {node.lineno}: {name}(..., allow_pickle=...) may unpickle")
        head, _, tail = name.rpartition(".")
        if (head.split(".")[0] in UNPICKLERS and tail in LOADERS) or tail in ("_legacy_load", "Unpickler"):
            out.append(f"line {node.lineno}: {name}(...)")
    return out


def test_no_module_in_src_can_unpickle_what_it_loads() -> None:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        problems = _problems(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        if problems and rel not in ALLOWED:
            found[rel] = problems
    assert not found, found


def test_the_scan_catches_each_way_to_unpickle() -> None:
    """The scanner itself: each of these lines must be found (a scan that finds nothing cannot fail)."""
    bad = [
        "torch.load(p)",
        "torch.load(p, weights_only=False)",
        "torch.load(p, weights_only=flag)",
        "pickle.loads(b)",
        "pickle.Unpickler(f).load()",
        "from dill import loads",
        "joblib.load(p)",
        "shelve.open(p)",
        "marshal.loads(b)",
        "from torch import load",
        "np.load(p, allow_pickle=True)",
        "torch.serialization._legacy_load(f)",
    ]
    for line in bad:
        assert _problems(ast.parse(line)), line
    fine = (
        "torch.load(p, weights_only=True)\nnp.load(p)\nsafetensors.torch.load_file(p)\nmarshal.dumps(c)\nimport pickle"
    )
    assert not _problems(ast.parse(fine))


def test_the_allowed_exceptions_still_exist() -> None:
    for rel in ALLOWED:
        assert _problems(ast.parse((SRC / rel).read_text(encoding="utf-8"))), f"{rel} no longer unpickles: drop it"
