"""Load a script of ``benchmarks/`` as a module for a test (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(script: str, module_name: str | None = None) -> ModuleType:
    """``benchmarks/<script>.py`` executed as a fresh module, registered in ``sys.modules``.

    ``module_name``: the name it is registered under (default ``<script>_under_test``; a benchmark that
    another imports by name, such as ``bench_pipeline``, is loaded under its own). Registered because
    dataclasses look their module up while the class is made. ``benchmarks/`` goes on ``sys.path`` first, as
    when a script runs, so that its sibling modules (``peak_rss``, ``pipeline_real``) import.
    """
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(module_name or f"{script}_under_test", BENCHMARKS / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
