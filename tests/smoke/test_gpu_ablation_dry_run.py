"""``benchmarks/gpu_ablation.sh`` on the CPU: the dry run, its refusals, and the whole script with stand-ins.

Covered, with the real script in real processes:

* ``--dry-run`` prints the dose command, the test command at every level and every ``tirl train`` command
  those would run (checked by ``tirl ablate --dry-run`` itself); each printed run's ``--set`` list is
  resolved here again with :func:`tirl.config.load_config`, and must hold the GPU settings (vLLM, CUDA, the
  model) and, at the dose levels, the bf16 generator; nothing is written.
* bad input (a setting, an unknown argument, a missing model, a bad ``--set`` in ``EXTRA``) is one
  ``error:`` line and exit 2; without a GPU the real run refuses at once.
* the non-dry path end to end (dose → accepted level → test → ``report.md`` + ``gpu_ablation.json``) with two
  stand-ins for what this machine lacks: an ``nvidia-smi`` script on ``PATH`` and an empty ``vllm`` module;
  ``EXTRA`` turns the runs back to the CPU generator and shrinks them (the settings come last, so they win).

Not covered: vLLM and a GPU themselves (none here), and any figure of a real model.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tirl.ablation import DOSE_LEVELS
from tirl.config import load_config
from tirl.errors import ConfigError
from tirl.trainer.wiring import engine_dtype

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_ablation.sh"
BASH = shutil.which("bash") or "/bin/bash"


def _run(tmp_path: Path, *args: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), **env}
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=timeout,
                          cwd=tmp_path)  # fmt: skip


def _sets(command: list[str]) -> list[str]:
    return [command[i + 1] for i, a in enumerate(command) if a == "--set"]


def test_dry_run_prints_and_checks_every_command(tmp_path: Path) -> None:
    """Four tirl processes (two ablate dry runs, config show per level...): ~10 s idle, ~40 s on a busy machine."""
    model = tmp_path / "Qwen2.5-0.5B-Instruct"  # not here: the dry run checks the commands only
    proc = _run(tmp_path, "--dry-run", MODEL=str(model), LEVELS="mismatch,mismatch-ood")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    trains = [shlex.split(x) for x in lines if " -m tirl.cli train " in x]
    assert len(trains) == 3 * 2 + 10 * 5 * 2  # dose: 3 seeds x 2 levels; test: 10 seeds x 5 arms x 2 levels
    for cmd in trains:
        sets = _sets(cmd)
        cfg = load_config(None, sets)  # every printed run resolves
        assert (cfg.model.generator, cfg.model.device, cfg.model.path) == ("vllm", "cuda", str(model))
        assert engine_dtype(cfg) == "bfloat16" and cfg.model.dtype == "float32"  # vLLM in bf16, the trainer fp32
        assert cfg.algo.lr == 1e-6 and cfg.generation.max_total_tokens == 4096  # the GPU settings win
    modes = {load_config(None, _sets(c)).filter.mode for c in trains}
    assert modes == {"off", "mask", "drop", "penalize", "roc"}
    test_runs = [c for c in trains if "/test/" in c[c.index("--run-dir") + 1]]
    assert all(load_config(None, _sets(c)).env.eval_split == "validation" for c in test_runs)
    ablates = [shlex.split(x[2:]) for x in lines if x.startswith("+ ") and " ablate " in x]
    assert len(ablates) == 3 and "--dose" in ablates[0]  # the dose step, then the test at each level
    assert [x for x in lines if x.startswith("config ok: level ")] == ["config ok: level mismatch",
                                                                      "config ok: level mismatch-ood"]  # fmt: skip
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--dry-run"], {"SEEDS": "ten"}, "SEEDS=ten"),
        (["--bogus"], {}, "--bogus"),
        ([], {}, "MODEL is not set"),
        (["--dry-run"], {"EXTRA": "algo.lr=-1"}, "algo.lr"),
        (["--dry-run"], {"LEVELS": "mismatch,huge"}, "--levels"),
        ([], {"MODEL": "."}, "MODEL=. is not a model directory"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path: Path, args: list[str], env: dict[str, str], words: str) -> None:
    proc = _run(tmp_path, *args, **env)
    errors = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(errors) == 1 and errors[0].startswith("error:"), proc.stderr
    assert words in errors[0] and not (tmp_path / "out").exists()


def test_without_a_gpu_the_real_run_refuses_at_once(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    bare = tmp_path / "bin"  # a PATH without nvidia-smi, with bash's own tools
    bare.mkdir()
    for tool in ("date", "dirname", "sed", "mkdir", "tee"):
        (bare / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    proc = _run(tmp_path, MODEL=str(model), PATH=str(bare))
    assert proc.returncode == 2 and proc.stderr.startswith("error: no GPU here"), proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_whole_script_runs_with_stand_ins_for_the_gpu(tmp_path: Path) -> None:
    """Dose (1 level x 1 seed x 1 step) and the test (2 arms x 1 seed) for real on the CPU: ~1-3 min."""
    from tests.tiny_run import save_tiny_model

    model = save_tiny_model(tmp_path / "tiny")
    fake = tmp_path / "fake"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text('"""A stand-in: the script only checks that vllm imports."""\n')
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA Stand-in, 1 MiB'\n")
    smi.chmod(0o755)
    cpu = " ".join(["model.generator=hf", "model.device=cpu", "env.eval_size=2", "trainer.prompts_per_step=2",
                    "algo.group_size=2", "generation.max_new_tokens=16", "generation.max_total_tokens=200",
                    "rollout.run_workers=4", "trainer.threads=1"])  # fmt: skip
    env = {"MODEL": str(model), "PATH": f"{fake}:{os.environ['PATH']}", "EXTRA": cpu, "LEVELS": "mismatch",
           "DOSE_SEEDS": "1", "SEEDS": "1", "STEPS": "1", "MODES": "off,drop",
           "PYTHONPATH": f"{fake}:{os.environ.get('PYTHONPATH', '')}"}  # fmt: skip
    proc = _run(tmp_path, timeout=900, **env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    data = json.loads((out / "gpu_ablation.json").read_text())
    assert data["settings"]["model"] == str(model) and data["settings"]["gpu"] == "NVIDIA Stand-in, 1 MiB"
    assert [d["level"] for d in data["dose"]["dose"]] == ["mismatch"]
    assert "generation.dtype=bfloat16" in data["dose"]["dose"][0]["stress"]
    report = (out / "report.md").read_text()
    assert "## Dose finding" in report and "| `mismatch` |" in report
    if data["dose"]["accepted_level"] == "mismatch":  # 1 step of a random model: collapsed (reward 0) or not
        assert data["test"]["paired"] is True and set(data["test"]["modes"]) == {"off", "drop"}
        assert "## The test" in report and "not run" not in report
    else:
        assert data["test"] is None and "No stress level was accepted" in report
    cfg = json.loads((out / "dose" / "mismatch" / "off-seed0" / "config.json").read_text())
    assert cfg["generation"]["dtype"] == "bfloat16" and cfg["model"]["path"] == str(model)


def test_the_levels_the_script_reads_are_the_dose_levels() -> None:
    assert len(DOSE_LEVELS) >= 3
    with pytest.raises(ConfigError):  # the GPU run's bf16 generator against a float16 engine is refused
        load_config(None, ["model.generator=vllm", "model.vllm_dtype=float16", *DOSE_LEVELS["mismatch"]])
