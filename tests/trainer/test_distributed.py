"""Data-parallel training (``--nproc``): 2 CPU processes equal 1 on the same global batch; set-up errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model, with_sets

from tirl.cli import main
from tirl.distributed.launch import free_port
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.trainer.logging import read_metrics

HERE = Path(__file__).resolve().parent
WORKER = HERE / "dist_worker.py"
TINY = TINY_TRAIN_ARGS


def _worker(rank: int, world: int, port: int, out: Path, n: int = 12) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(rank), str(world), str(port), str(out), str(n)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("n", [12, 3], ids=["even_shares", "rank1_share_empty"])
def test_two_cpu_processes_equal_one_on_the_same_global_batch(tmp_path: Path, n: int) -> None:
    """DDP (gloo) on 2 ranks vs 1 process; n=3 gives mini-batches [2 rows, 1 row]: rank 1's share of the second is
    empty, and it still takes part in the synced pass (a zero-weighted dummy row)."""
    port = free_port()
    procs = [_worker(r, 2, port, tmp_path / f"r{r}.pt", n) for r in range(2)]
    procs.append(_worker(0, 1, 0, tmp_path / "single.pt", n))
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out
    single = torch.load(tmp_path / "single.pt")
    ranks = [torch.load(tmp_path / f"r{r}.pt") for r in range(2)]
    (s_losses, s_norms, s_metrics), (d_losses, d_norms, d_metrics) = single["stats"][0], ranks[0]["stats"][0]
    assert len(s_losses) == len(d_losses) == 4  # 2 epochs x 2 mini-batches, every step taken
    assert d_losses == pytest.approx(s_losses, rel=1e-4, abs=1e-6)
    assert d_norms == pytest.approx(s_norms, rel=1e-4)
    assert ranks[0]["stats"][1][0] == pytest.approx(single["stats"][1][0], rel=1e-4, abs=1e-6)
    # the token statistics cover both ranks' shares (rank 0's alone: half the loss tokens)
    assert d_metrics["train/loss_tokens"] == s_metrics["train/loss_tokens"] > 0
    for key in ("train/is_ratio_min", "train/is_ratio_max", "train/is_ratio_mean", "train/clip_frac",
                "train/entropy", "train/tis_weight_mean", "train/gen_logprob_gap_max"):  # fmt: skip
        assert d_metrics[key] == pytest.approx(s_metrics[key], rel=1e-4, abs=1e-6), key
    moved = False
    for name, p in single["params"].items():
        for r in ranks:
            torch.testing.assert_close(r["params"][name], p, rtol=1e-4, atol=1e-5)
        moved |= not torch.equal(p, build_tiny_model(_spec(), seed=0)[0].get_parameter(name))
    assert moved  # the update really changed the weights


def _spec() -> TinyModelSpec:
    sys.path.insert(0, str(HERE))
    from dist_worker import SPEC

    return SPEC


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


@pytest.mark.slow
def test_tirl_train_nproc_2_logs_world_size_and_resumes_at_nproc_1(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--model", str(model_dir), "--run-dir", str(run_dir), *TINY]
    assert main([*args, "--steps", "2", "--nproc", "2", "--set", "trainer.checkpoint_every=1"]) == 0
    rows = read_metrics(run_dir)
    assert [r["dist/world_size"] for r in rows] == [2, 2]
    assert all(r["train/optimizer_steps"] for r in rows)
    assert (run_dir / "checkpoints" / "step-2").is_dir()
    # the checkpoint is the full model and optimiser: the run continues at another N
    assert main(["train", "--resume", str(run_dir), "--steps", "3", "--no-progress"]) == 0
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[-1]["dist/world_size"] == 1


def _error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


def test_nproc_larger_than_the_machine_is_one_error(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = (os.cpu_count() or 1) + 1
    line = _error(
        ["train", "--model", str(model_dir), "--run-dir", str(tmp_path / "r"), *TINY, "--nproc", str(n)], capsys
    )
    assert "--nproc" in line and "CPUs" in line
    assert not (tmp_path / "r").exists()  # no partial run directory, no checkpoint


def test_global_batch_not_divisible_by_nproc_names_the_fix(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if (os.cpu_count() or 1) < 3:
        args = [*with_sets(TINY, "trainer.prompts_per_step=1", "algo.group_size=3"), "--nproc", "2"]
    else:
        args = [*TINY, "--nproc", "3"]
    line = _error(["train", "--model", str(model_dir), "--run-dir", str(tmp_path / "r"), *args], capsys)
    assert "does not divide by --nproc" in line and "trainer.prompts_per_step" in line
    assert not (tmp_path / "r").exists()


def test_master_port_in_use_is_one_error(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        args = [*TINY, "--nproc", "2", "--master-port", str(port)]
        line = _error(["train", "--model", str(model_dir), "--run-dir", str(tmp_path / "r"), *args], capsys)
    assert f"--master-port {port} is in use" in line


def test_master_port_with_ray_ranks_is_one_error(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ray Train picks the rendezvous of ``--backend ray`` ranks: a ``--master-port`` would be ignored silently."""
    args = [*TINY, "--backend", "ray", "--nproc", "2", "--master-port", "29555", "--ray-address", "127.0.0.1:9"]
    line = _error(["train", "--model", str(model_dir), "--run-dir", str(tmp_path / "r"), *args], capsys)
    assert "--master-port" in line and "--backend ray" in line
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_rank_killed_mid_run_is_one_error_and_the_run_resumes(model_dir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "tirl.cli", "train", "--model", str(model_dir), "--run-dir", str(run_dir), *TINY]
    cmd += ["--steps", "5000", "--nproc", "2", "--set", "trainer.checkpoint_every=1"]  # far more than it reaches
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and max(_steps(run_dir), default=0) < 2:  # a tiny step is ~0.2 s: the
        time.sleep(0.1)  # newest checkpoints are kept (keep_last), so wait for any step >= 2, not step-2 itself
    assert max(_steps(run_dir), default=0) >= 2, proc.poll()
    ranks = _children(proc.pid, b"tirl.distributed.follower")
    assert ranks, "rank 1 not found"
    for pid in ranks:
        os.kill(pid, 9)  # a rank dies mid-run
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "--resume" in lines[0], lines
    last = max(_steps(run_dir))
    rc = main(["train", "--resume", str(run_dir), "--steps", str(last + 1), "--no-progress"])
    assert rc == 0
    rows = read_metrics(run_dir)
    assert rows[-1]["step"] == last + 1


def _steps(run_dir: Path) -> list[int]:
    """The steps of the complete checkpoints in ``run_dir`` (none yet: empty)."""
    ckpt = run_dir / "checkpoints"
    names = [p.name for p in ckpt.iterdir()] if ckpt.is_dir() else []
    return [int(n.split("-")[1]) for n in names if n.startswith("step-") and n.split("-")[1].isdigit()]


def _children(parent: int, needle: bytes) -> list[int]:
    """Direct children of ``parent`` whose command line contains ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = next(int(x.split()[1]) for x in (entry / "status").read_text().splitlines() if x.startswith("PPid:"))
            if ppid == parent and needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, StopIteration):
            continue
    return found
