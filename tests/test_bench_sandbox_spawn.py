"""benchmarks/bench_sandbox_spawn.py: one shrunk round, both sides, through real bubblewrap and a real eval.

Checks that both ways of setting a child up ran (the per-command figures are each side's own), that the
two ``tirl eval`` subprocesses solved the same tasks the same way (greedy: the set-up must not change an
episode), and bad input. About 30 s on an idle 2-core machine. Not covered: the figures (a quiet machine).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_sandbox_spawn.py"


def test_one_round_runs_both_sides() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", "--repeats", "1", "--n", "3", "--parent-mb", "200",
         "--eval-tasks", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    (round_,) = res["rounds"]
    assert round_["order"] == ["helpers", "preexec_fn"]
    for side in ("helpers", "preexec_fn"):
        assert round_["per_command"][side]["wall_ms_p50"] > 0 and round_["per_command"][side]["parent_cpu_ms"] >= 0
        assert len(round_["eval"][side]["outcomes"]) == 2 and round_["eval"][side]["wall_s"] > 0
    assert res["same_outcomes"] is True
    cmd = round_["per_command"]
    assert res["per_command_wall_fallback_over_helpers"]["median"] == (
        cmd["preexec_fn"]["wall_ms_p50"] / cmd["helpers"]["wall_ms_p50"]
    )


def test_bad_arguments_exit_2() -> None:
    for args in (["--n", "0"], ["--parent-mb", "-1"]):
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
        assert proc.returncode == 2 and "--n and --repeats" in proc.stderr
