"""tirl.models.kernels: the card's line naming the versions and CPU kernels a checkpoint was built with."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest
import torch

from tirl.models.kernels import BuildKernels, build_kernels, cpu_model, package_version


def _reference_cpu_model(text: str) -> str:
    """Plain reference: the value after the colon of the first line whose key is exactly 'model name'."""
    for line in text.split("\n"):
        if ":" in line:
            key, value = line.split(":", 1)
            if key.strip() == "model name" and value.strip() != "":
                return value.strip()
    return "unknown CPU"


@pytest.mark.parametrize(
    "text",
    [
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nflags\t: fpu\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 9R14\n",
        "model name\t:\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\n",  # an empty first value is skipped
        "model name extra\t: not this\nmodel name : Neoverse-V2 : r0p1\n",  # a longer key is another field
        "processor : 0\nBogoMIPS : 50.00\n",  # arm64: no model name line
        "",
    ],
)
def test_cpu_model_matches_the_reference(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert cpu_model(path) == _reference_cpu_model(text)


def test_a_missing_cpuinfo_is_an_unknown_cpu(tmp_path: Path) -> None:
    assert cpu_model(tmp_path / "absent") == "unknown CPU"


def test_this_process_kernels_and_versions(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Test CPU 1\n")
    got = build_kernels(info)
    assert got == BuildKernels(
        torch=torch.__version__,
        transformers=metadata.version("transformers"),
        cpu_capability=str(torch.backends.cpu.get_cpu_capability()),
        cpu="Test CPU 1",
    )
    line = got.line()
    assert line.startswith(f"torch {torch.__version__} (ATen CPU kernels {got.cpu_capability})")
    assert line.endswith(", Test CPU 1")


def test_the_capability_follows_the_environment_override(tmp_path: Path) -> None:
    """ATEN_CPU_CAPABILITY, read when torch starts, is what the card reports (a fresh interpreter)."""
    import subprocess
    import sys

    code = "from tirl.models.kernels import build_kernels; print(build_kernels().cpu_capability)"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "DEFAULT"


def test_package_version_against_importlib() -> None:
    assert package_version("torch") == metadata.version("torch")
    assert package_version("no-such-distribution-tirl") == "not installed"
