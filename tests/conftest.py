"""Shared fixtures, and the ``CI=true`` rule: parts that ``make install`` provides never skip there.

Outside CI a test whose part is missing (bubblewrap, Ray, Chromium, the
shipped checkpoint) skips with its reason, so a partial developer machine
still runs the rest. Under ``CI=true`` (or ``1``/``yes``) such a skip is a
failure naming the part, so a broken install cannot pass. Other skips (a GPU,
vLLM, root-only cases) stay skips everywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

import pytest

from tirl.types import Message, Role

# part -> a pattern of the skip reasons that mean "this part is missing"
INSTALLED_PARTS: dict[str, re.Pattern[str]] = {
    "bubblewrap (make sysdeps)": re.compile(r"bubblewrap|\bbwrap\b", re.IGNORECASE),
    "Ray (make install: the ray extra)": re.compile(r"could not import 'ray'|\bray\b.*(missing|not installed)", re.I),
    "Chromium (make sysdeps)": re.compile(r"chromium", re.IGNORECASE),
    "the shipped checkpoint (src/tirl/assets/tiny-tir)": re.compile(r"built-in checkpoint", re.IGNORECASE),
}


def asst(text: str | None, **kw: object) -> Message:
    return Message(role=Role.ASSISTANT, content=text, **kw)  # type: ignore[arg-type]


def in_ci() -> bool:
    """``CI`` is set to true, 1 or yes."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing_part(reason: str) -> str | None:
    """The install part a skip reason says is missing, or None for any other skip."""
    for part, pattern in INSTALLED_PARTS.items():
        if pattern.search(reason):
            return part
    return None


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_if_part_missing(report: Any) -> None:
    if not (in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    part = missing_part(reason)
    if part is not None:
        report.outcome = "failed"
        report.longrepr = f"CI=true: {part} is missing, and make install provides it; the test would skip: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """Turn a skip for a missing install part into a failure under ``CI=true``."""
    outcome = yield
    _fail_if_part_missing(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    """The same for module-level skips (``pytest.importorskip("ray")``)."""
    outcome = yield
    _fail_if_part_missing(outcome.get_result())
