"""Run ``tirl.cli.main`` in-process and check the CLI contract: one ``error:`` line, exit 2, no traceback."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tirl.cli import main


@dataclass
class Outcome:
    """The exit status and the captured streams of one in-process run."""

    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> Outcome:
    """``tirl ARGV`` in this process (argparse's SystemExit is the exit status)."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    got = capsys.readouterr()
    return Outcome(code, got.out, got.err)


def assert_refused(outcome: Outcome, *needles: str) -> None:
    """Exit 2, exactly one line on stderr starting ``error:``, no traceback; the line contains ``needles``."""
    lines = [line for line in outcome.err.splitlines() if line.strip()]
    assert outcome.code == 2, outcome
    assert len(lines) == 1 and lines[0].startswith("error: "), outcome.err
    assert "Traceback" not in outcome.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


TRAJ = {
    "id": "t0",
    "answer": "42",
    "messages": [
        {"role": "user", "content": "6*7?"},
        {"role": "assistant", "content": "```python\nprint(6*7)\n```"},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "\\boxed{42}"},
    ],
}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def metrics_row(step: int) -> dict[str, Any]:
    return {
        "step": step,
        "rollout/trajectories": 16,
        "filter/valid_trajectories": 14,
        "filter/void_trajectories": 2,
        "train/is_ratio_max": 1.2,
        "train/is_ratio_mean": 1.0,
        "rollout/max_seq_len": 300,
        "reward/mean": 0.5,
    }


def trace_row(t: float) -> dict[str, Any]:
    return {"t": t, "init_queue": 1, "run_queue": 2, "eval_queue": 0, "gpu_util": None}


DEEP = "[" * 100_000 + "]" * 100_000
LONG_INT = "9" * 5000
NOT_UTF8 = b'{"id": "\xff\xfe bad"}\n'
