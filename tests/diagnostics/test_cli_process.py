"""The diagnostics commands as a user runs them: a real `python -m tirl.cli` process on real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from diag_synth import as_verl, tirl_log, write_wandb_csv

TIRL = [sys.executable, "-m", "tirl.cli"]


def test_diagnose_wandb_csv_in_a_process(tmp_path: Path) -> None:
    csv_path = write_wandb_csv(tmp_path / "wandb_export.csv", as_verl(tirl_log(seed=7, inject="void_leak", at=(77,))))
    res = subprocess.run(
        [*TIRL, "diagnose", "training", str(csv_path), "--format", "verl", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["verdict"] == "void_leak" and out["findings"][0]["step"] == 77
    bad = subprocess.run(
        [*TIRL, "diagnose", "training", str(tmp_path / "missing.jsonl")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "missing.jsonl: does not exist" in bad.stderr and "Traceback" not in bad.stderr
