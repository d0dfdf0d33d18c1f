"""constraints.txt pins what `make install` installs, and the suite runs on exactly those versions."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"constraints.txt:{n}: not NAME==VERSION: {line!r}"
        name = _canonical(match.group(1))
        assert name not in pins, f"constraints.txt:{n}: {name} pinned twice"
        pins[name] = match.group(2)
    return pins


def test_every_line_is_an_exact_pin_and_the_core_packages_are_pinned() -> None:
    pins = _pins()
    for name in ("torch", "transformers", "tokenizers", "ruff", "mypy", "pytest", "ray", "trl", "skyrl-gym"):
        assert name in pins, f"{name} is not pinned"
    assert pins["torch"] == "2.13.0", "torch is pinned without a local label (+cpu), as `pip install torch==2.13.0`"
    assert "tirl" not in pins and "pip" not in pins


def test_the_running_environment_has_the_pinned_versions() -> None:
    """The suite's venv is the constrained one: every pinned package that is installed has its pinned version."""
    pins = _pins()
    installed = {_canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    checked = 0
    for name, version in pins.items():
        if name not in installed:
            continue  # an extra this venv does not hold (the pins are the union of make install's extras)
        got = installed[name].split("+", 1)[0] if name == "torch" else installed[name]
        assert got == version, f"{name} {installed[name]} installed, constraints.txt pins {version}"
        checked += 1
    assert checked >= 0.9 * len(pins), f"only {checked} of {len(pins)} pinned packages are installed"


def test_make_install_reads_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line and "$(BIN)/pip" in line]
    assert installs, "no pip install of .venv in the Makefile"
    for line in installs:
        if "--upgrade pip" in line:
            continue
        assert "-c constraints.txt" in line, f"Makefile installs without the constraints: {line.strip()}"
    assert re.search(r"^\$\(STAMP\): .*constraints\.txt", makefile, re.M), "the install stamp ignores constraints.txt"
