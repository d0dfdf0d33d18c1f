"""tirl.models.kernels: the card's line naming the versions and CPU kernels a checkpoint was built with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

from tirl.cli import main
from tirl.errors import ConfigError
from tirl.models.kernels import PORTABLE_ENV, BuildKernels, build_kernels, cpu_model, package_version, pin_portable


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
        mkl_cbwr=os.environ.get("MKL_CBWR", "auto"),
        cpu="Test CPU 1",
    )
    line = got.line()
    assert line.startswith(f"torch {torch.__version__} (ATen CPU kernels {got.cpu_capability}, MKL branch ")
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


def _fresh(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_pin_portable_overrides_what_the_environment_asked_for() -> None:
    """A fresh process started with AVX2 kernels asked for trains on the portable ones after the pin."""
    code = (
        "import os; from tirl.models.kernels import pin_portable\n"
        "k = pin_portable(); print(k.cpu_capability, k.mkl_cbwr, os.environ['ONEDNN_MAX_CPU_ISA'], k.portable)"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = _fresh(code, env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["DEFAULT", "COMPATIBLE", "SSE41", "True"]


def test_pin_portable_refuses_a_process_whose_kernels_are_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    """After torch ran (this test process has), ATen's capability is fixed: the pin is an error, not a silent no-op."""
    for key in PORTABLE_ENV:
        monkeypatch.delenv(key, raising=False)  # restored after the test: the pin writes os.environ
    torch.ones(4).sum()
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":  # this suite run already uses the scalar kernels
        monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
        assert pin_portable().portable
        return
    with pytest.raises(ConfigError, match=r"--kernels portable: ATen's CPU kernels were already fixed at"):
        pin_portable()


def _need_native_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear the pin's variables (restored after the test); fail if this process already runs scalar kernels."""
    for key in PORTABLE_ENV:
        monkeypatch.delenv(key, raising=False)
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.fail(
            "this check needs the native kernels in the test process; run the suite without ATEN_CPU_CAPABILITY"
        )


def test_tirl_sft_kernels_portable_in_a_used_process_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _need_native_kernels(monkeypatch)
    out = tmp_path / "m"
    assert main(["sft", "--out", str(out), "--kernels", "portable", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --kernels portable: ATen's CPU kernels were already fixed")
    assert not out.exists()


def test_tirl_train_kernels_portable_in_a_used_process_is_one_error_line_and_no_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pin runs in `tirl train`'s preflight: a process whose kernels are fixed names the key, makes no run."""
    _need_native_kernels(monkeypatch)
    run = tmp_path / "run"
    argv = ["train", "--run-dir", str(run), "--set", "trainer.kernels=portable", "--set", "trainer.steps=1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: trainer.kernels=portable: ATen's CPU kernels were already")
    assert not run.exists()


def test_tirl_train_kernels_portable_on_ray_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ray workers do not inherit this process's environment: refused, naming the variables to set there."""
    run = tmp_path / "run"
    argv = ["train", "--run-dir", str(run), "--backend", "ray", "--set", "trainer.kernels=portable"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not reach Ray workers" in err[0] and "MKL_CBWR=COMPATIBLE" in err[0]
    assert not run.exists()


def test_tirl_train_kernels_portable_trains_on_the_pinned_kernels_and_says_so(tmp_path: Path) -> None:
    """A fresh `tirl train` with the key set records the portable kernels in summary.json; the default, native."""
    lines = {}
    for kernels in ("portable", "native"):
        run = tmp_path / kernels
        code = (
            "import sys; from tirl.cli import main\n"
            f"sys.exit(main(['train', '--run-dir', {str(run)!r}, '--no-progress', '--set', 'trainer.steps=1', "
            "'--set', 'env.eval_size=2', '--set', 'trainer.prompts_per_step=2', "
            f"'--set', 'trainer.kernels={kernels}']))"
        )
        out = _fresh(code, {k: v for k, v in os.environ.items() if k not in PORTABLE_ENV})
        assert out.returncode == 0, out.stderr[-2000:]
        lines[kernels] = json.loads((run / "summary.json").read_text())["built_with"]
    assert "ATen CPU kernels DEFAULT, MKL branch COMPATIBLE" in lines["portable"]
    assert "MKL branch auto" in lines["native"] and "DEFAULT" not in lines["native"]
