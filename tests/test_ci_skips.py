"""Under ``make test`` (``TIRL_REQUIRE_PARTS=1``) or ``CI=true`` a skip for a part ``make install`` provides
fails; in a plain ``pytest`` run it stays a skip (issues 16 and 21)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.conftest import missing_part  # not `conftest`: sys.modules may hold a sub-directory's conftest

pytest_plugins = ["pytester"]

INNER = """
import pytest

def test_bwrap():
    pytest.skip("bubblewrap cannot run on this machine: no user namespaces")

@pytest.mark.skipif(True, reason="chromium not installed (make sysdeps installs it)")
def test_chromium():
    pass

def test_checkpoint():
    pytest.skip("the built-in checkpoint is not built yet (tirl sft --out src/tirl/assets/tiny-tir --seed 0)")

@pytest.mark.skipif(True, reason="needs vLLM and a CUDA GPU")
def test_gpu():
    pass

def test_plain():
    assert True
"""

RAY_MODULE = """
import pytest
pytest.importorskip("ray_not_installed_here", reason="could not import 'ray': No module named 'ray'")

def test_uses_ray():
    pass
"""


EXTRAS = ("peft", "trl", "wandb", "verifiers", "skyrl_gym")  # what a module-level importorskip says when missing
EXTRA_MODULES = {
    f"test_needs_{name}": f"""  # not test_{name}: this process has imported tests/*/test_skyrl_gym.py
import pytest
pytest.skip("could not import '{name}': No module named '{name}'", allow_module_level=True)

def test_uses_{name}():
    pass
"""
    for name in EXTRAS
}
# vLLM: its own venv (make install-vllm); torch is never missing where tests run
NOT_INSTALLED_BY_MAKE = {"vllm", "vllm.v1.serial_utils", "torch"}


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An inner pytest session with the project's real conftest; neither variable set."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("TIRL_REQUIRE_PARTS", raising=False)
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_parts=INNER, test_ray=RAY_MODULE, **EXTRA_MODULES)
    return pytester


@pytest.mark.parametrize(("var", "value"), [("CI", "true"), ("TIRL_REQUIRE_PARTS", "1")])
def test_required_parts_turn_skips_into_failures(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    result = inner.runpytest("-p", "no:cacheprovider", "test_parts.py")
    # a skipif marker fails in setup (an error), a pytest.skip call in the test (a failure); the GPU skip stays
    result.assert_outcomes(passed=1, failed=2, errors=1, skipped=1)
    out = result.stdout.str()
    for part in ("bubblewrap", "Chromium", "the shipped checkpoint"):
        assert f"{var}={value}: {part}" in out, part
    ray = inner.runpytest("-p", "no:cacheprovider", "test_ray.py")
    ray.assert_outcomes(errors=1)  # a module-level importorskip: a collection error
    ray.stdout.fnmatch_lines([f"*{var}={value}: Ray*"])
    extras = inner.runpytest("-p", "no:cacheprovider", *(f"{m}.py" for m in EXTRA_MODULES))
    extras.assert_outcomes(errors=len(EXTRAS))
    for part in ("peft", "TRL", "wandb", "verifiers", "skyrl-gym"):
        extras.stdout.fnmatch_lines([f"*{var}={value}: {part} (make install*"])


def test_a_plain_pytest_run_keeps_them_skips(inner: pytest.Pytester) -> None:
    result = inner.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=5 + len(EXTRAS))


def test_make_test_requires_the_installed_parts() -> None:
    """The Makefile's pytest recipe sets the variable, so a local ``make test`` fails like CI does."""
    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    recipe = makefile.split("\npytest:", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^\tTIRL_REQUIRE_PARTS=1 \S*python -m pytest", recipe, re.MULTILINE), recipe


def test_every_importorskip_in_the_suite_names_an_installed_part() -> None:
    """A new ``pytest.importorskip("x")`` must get a row in ``INSTALLED_PARTS`` (or be a GPU-only part)."""
    found = set()
    for path in Path(__file__).parent.rglob("*.py"):
        if path == Path(__file__):
            continue  # this file's stand-ins and docstrings
        found |= set(re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", path.read_text(encoding="utf-8")))
    assert {"peft", "trl", "wandb", "verifiers", "skyrl_gym", "ray"} <= found
    unmapped = sorted(m for m in found - NOT_INSTALLED_BY_MAKE if missing_part(f"could not import '{m}'") is None)
    assert unmapped == []
