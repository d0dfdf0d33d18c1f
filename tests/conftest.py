"""Shared fixtures, and the installed-parts rule: parts that ``make install`` provides never skip under ``make test``.

A plain ``pytest`` run skips a test whose part is missing (bubblewrap, Ray,
Chromium, the shipped checkpoint, peft, TRL, wandb, verifiers, skyrl-gym) with
its reason, so a partial developer machine still runs the rest. ``make test``
sets ``TIRL_REQUIRE_PARTS=1`` (and CI sets ``CI=true``; either takes ``1``,
``true`` or ``yes``): then such a skip is a failure naming the part, so a
broken install cannot pass, on a laptop as in CI. Other skips (a GPU, vLLM,
root-only cases) stay skips everywhere.
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
    "peft (make install: the lora extra)": re.compile(r"could not import 'peft'"),
    "TRL (make install: the integrations extra)": re.compile(r"could not import 'trl'"),
    "wandb (make install: the wandb extra)": re.compile(r"could not import 'wandb'"),
    "verifiers (make install: the integrations extra)": re.compile(r"could not import 'verifiers'"),
    "skyrl-gym (make install: the integrations extra)": re.compile(r"could not import 'skyrl_gym'"),
}
REQUIRE_VARS = ("TIRL_REQUIRE_PARTS", "CI")  # make test sets the first, CI services the second


def asst(text: str | None, **kw: object) -> Message:
    return Message(role=Role.ASSISTANT, content=text, **kw)  # type: ignore[arg-type]


def parts_required() -> str | None:
    """The variable (``TIRL_REQUIRE_PARTS`` or ``CI``) set to true, 1 or yes, else None."""
    for var in REQUIRE_VARS:
        if os.environ.get(var, "").strip().lower() in ("true", "1", "yes"):
            return var
    return None


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
    var = parts_required() if report.skipped and not hasattr(report, "wasxfail") else None
    if var is None:
        return
    reason = _skip_reason(report)
    part = missing_part(reason)
    if part is not None:
        report.outcome = "failed"
        setting = f"{var}={os.environ[var]}"
        report.longrepr = f"{setting}: {part} is missing, and make install provides it; the test would skip: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """Turn a skip for a missing install part into a failure under ``TIRL_REQUIRE_PARTS`` or ``CI``."""
    outcome = yield
    _fail_if_part_missing(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    """The same for module-level skips (``pytest.importorskip("ray")``)."""
    outcome = yield
    _fail_if_part_missing(outcome.get_result())
