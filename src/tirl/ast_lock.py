"""One lock for every :func:`ast.parse` that tirl makes in its own process.

CPython keeps the AST constructor's recursion counter in the interpreter, not in the thread
(``Python/Python-ast.c``, 3.11 and earlier): when two threads build AST objects at once, one of them can
fail with ``SystemError: AST constructor recursion depth mismatch (before=18, after=42)``. A thread switch
inside the constructor needs Python code to run there (a garbage-collector callback or a finalizer),
so it is rare, and real: the swe-lite evaluator reads every task's hidden tests with :func:`ast.parse`
from the pipeline's worker threads, and a gate's pytest worker died of it while formatting a report.

Covered: every parse in tirl's own code goes through :data:`LOCK` (the swe-lite host, the diagnostics
bundle, and :func:`literal_eval`, which parses too: swe-lite's task generator and the SFT copy curriculum,
which can run beside the pipeline's evaluator threads; ``tests/test_ast_lock.py`` scans the source for bare
calls). Not covered: a parse in another library's thread (pytest's own report formatting, a user's code) does
not take the lock; the judge process of swe-lite is single-threaded and needs none.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """:func:`ast.parse` of ``source`` under :data:`LOCK` (the same exceptions: SyntaxError, ValueError)."""
    with LOCK:
        return ast.parse(source, filename)


def literal_eval(text: str) -> Any:
    """:func:`ast.literal_eval` of ``text`` under :data:`LOCK` (it builds an AST: the same race as a parse)."""
    with LOCK:
        return ast.literal_eval(text)
