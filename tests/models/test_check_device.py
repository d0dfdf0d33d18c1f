"""A ``model.device`` this torch cannot use: one error line before any directory or file (tirl.models.loading)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.cli_contract.cli_run import assert_refused, run_cli

from tirl.errors import ConfigError
from tirl.models.loading import check_device

#: a CUDA device this machine does not have: any cuda on a GPU-less torch, else one past the GPU count
MISSING_GPU = "cuda:64" if torch.cuda.is_available() else "cuda"
MISSING_GPU_PROBLEM = "sees .* GPU\\(s\\) here" if torch.cuda.is_available() else "sees no GPU here"


def test_cpu_is_a_device() -> None:
    assert check_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name", ["gpu0", "cuda:-1", ""])
def test_a_name_torch_does_not_parse_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match=f"model.device={name!r} is not a torch device"):
        check_device(name)


def test_a_gpu_this_torch_cannot_see_is_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match=f"model.device={MISSING_GPU}: this torch .* {MISSING_GPU_PROBLEM}|torch sees"
    ):
        check_device(MISSING_GPU)


@pytest.mark.parametrize("command", ["train", "eval"])
def test_train_and_eval_refuse_it_before_any_run_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    """Was an AssertionError traceback from model.to(); train left a run directory that --run-dir then refused."""
    run_dir = ["--run-dir", str(tmp_path / "run")] if command == "train" else []
    out = run_cli(capsys, command, "--set", f"model.device={MISSING_GPU}", *run_dir)
    assert_refused(out, f"model.device={MISSING_GPU}")
    assert not (tmp_path / "run").exists()


def test_tirl_serve_names_its_own_flag(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(capsys, "serve", "--model", "src/tirl/assets/tiny-tir", "--device", MISSING_GPU, "--port", "0")
    assert_refused(out, f"--device {MISSING_GPU}: ", "use --device cpu" if MISSING_GPU == "cuda" else "cuda:0")
