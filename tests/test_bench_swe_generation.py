"""benchmarks/bench_swe_generation.py: one real, shrunk round of the SWE job with the prefix cache on and off.

Both sides are ``tirl train --env swe-lite`` subprocesses (tiny-swe, real workspaces and pytest), shrunk
by ``--set`` to 2 episodes of 3 turns; the test checks that both sides ran the same episodes (the cache
must not change what is sampled), that the ratio is read from each side's own metrics, and bad input.
About 40 s on an idle 2-core machine. Not covered: the figures (a quiet machine and the full job).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_swe_generation.py"
SMALL = ["--set", "algo.group_size=2", "--set", "env.max_turns=3", "--set", "rollout.run_workers=2"]


def test_one_round_runs_both_sides_on_the_same_episodes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", "--repeats", "1", "--prompts", "1", "--keep", str(tmp_path),
         "--on", "generation.prefix_cache_mb=2048", *SMALL],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["same_episodes"] is True
    (round_,) = res["rounds"]
    assert round_["order"] == ["on", "off"]
    for side in ("on", "off"):
        metrics = [json.loads(x) for x in (tmp_path / round_[side]["run"] / "metrics.jsonl").read_text().splitlines()]
        assert round_[side]["rollout_s"] == sum(m["time/rollout_s"] for m in metrics if "time/rollout_s" in m) > 0
        (ep,) = round_[side]["episodes"]
        assert ep[1] is not None and ep[2] > 0  # valid trajectories and generated tokens were read
    for side, mb in (("on", 2048.0), ("off", 0.0)):  # each side's run saved the setting it ran with
        cfg = json.loads((tmp_path / round_[side]["run"] / "config.json").read_text())
        assert cfg["generation"]["prefix_cache_mb"] == mb and cfg["env"]["max_turns"] == 3
    assert res["rollout_off_over_on"]["median"] == round_["off"]["rollout_s"] / round_["on"]["rollout_s"]


def test_bad_arguments_exit_2() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--repeats", "0"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--repeats" in proc.stderr
    for flag in ("--off", "--on"):
        proc = subprocess.run([sys.executable, str(SCRIPT), flag, "nothing"], capture_output=True, text=True)
        assert proc.returncode == 2 and f"{flag} 'nothing' is not KEY=VALUE" in proc.stderr
