"""`tirl ablate`'s files are rewritten whole or not at all: a write that fails half way leaves no torn file.

``ablation.png`` is rewritten after every run (an interrupted ablation keeps the table of what finished), and
each seed's ``eval_before.json`` is copied into the other modes' run directories before they train (a resumed
arm reads it back instead of evaluating again).
"""

from __future__ import annotations

import errno
import json
import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.figure
import pytest

import tirl.ablation
from tirl.ablation import AblationPlan, RunResult, run_ablation
from tirl.ablation_report import plot


def _result(mode: str, seed: int) -> RunResult:
    return RunResult(
        mode=mode, seed=seed, run_dir="x", accuracy_before=0.5, accuracy_after=0.6, turns_mean=3.0,
        is_ratio_max=1.2, grad_norm_max=0.5, ratio_spike_steps=0, void_ratio_start=0.1, void_ratio_end=0.2,
        wall_s=1.0, void_ratio=[0.1, 0.2], is_ratio=[1.0, 1.2], reward=[0.3, 0.4],
    )  # fmt: skip


def test_a_plot_that_fails_half_way_keeps_the_previous_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    png = plot([_result("off", 0), _result("drop", 0)], tmp_path / "ablation.png")
    good = png.read_bytes()
    assert good.startswith(b"\x89PNG")

    def savefig_fails_half_way(self: Any, fname: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(fname, (str, Path)):
            Path(fname).write_bytes(good[:100])
        else:
            fname.write(good[:100])
        raise OSError(errno.EIO, "Input/output error")  # a full disk or a kill: the rest never comes

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig_fails_half_way)
    with pytest.raises(OSError, match="Input/output error"):
        plot([_result("off", 0), _result("drop", 0), _result("off", 1)], png)
    assert png.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ablation.png"]  # no temporary file left either


@pytest.fixture
def file_size_limit() -> Iterator[None]:
    """Restore this process's file-size limit and SIGXFSZ after the test (which lowers them)."""
    limits, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.getsignal(signal.SIGXFSZ)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)


def test_a_copy_of_eval_before_that_fails_half_way_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_size_limit: None
) -> None:
    """The second mode's copy of the first one's eval_before.json hits a file-size limit (EFBIG) half way."""
    record = {"accuracy": 0.5, "n": 2, "tasks": ["x" * 1000] * 200}  # ~200 KB

    def fake_train(run_dir: Path, overrides: list[str], log: Path) -> None:
        assert not (run_dir / "eval_before.json").exists(), "only the first mode evaluates"
        (run_dir / "eval_before.json").write_text(json.dumps(record), encoding="utf-8")
        # from here on no file may grow past 64 KiB: the copy into the next mode's directory is cut short
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    monkeypatch.setattr(tirl.ablation, "_train", fake_train)
    monkeypatch.setattr(tirl.ablation, "read_run", lambda run_dir, mode, seed, wall: _result(mode, seed))
    plan = AblationPlan(modes=("off", "drop"), seeds=(0,), steps=1)
    with pytest.raises(OSError) as info:
        run_ablation(plan, tmp_path, echo=lambda line: None)
    assert info.value.errno == errno.EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert json.loads((tmp_path / "off-seed0" / "eval_before.json").read_text()) == record
    drop = tmp_path / "drop-seed0"
    assert sorted(p.name for p in drop.iterdir()) == []  # no torn eval_before.json for a resumed arm to read
