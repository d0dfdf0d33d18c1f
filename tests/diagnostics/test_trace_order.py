"""A pipeline trace whose time runs backwards is refused with its line (issue 22); tirl's own writer never makes one.

Covered: ``load_trace`` and ``tirl diagnose pipeline`` (in process, through ``main``) refuse a trace where
``t`` decreases, naming the file, the line and both times (the old reader sorted the rows and called the
trace healthy); equal times pass; non-finite, huge or missing times and negative or NaN depths are refused
with their line (an ``Infinity`` depth reads as a full queue, as the CLI contract tests want); a resumed
run's tracer (a new :class:`PipelineTracer` with a fresh clock appending to the same file)
continues ``t`` from the file's last snapshot, also past a torn last line.
Not covered: a torn line in the middle of a file (a killed writer followed by a resume) is refused as
invalid JSON, not repaired.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from diag_synth import trace, write_jsonl

from tirl.cli import main
from tirl.diagnostics.pipeline import diagnose_pipeline, load_trace
from tirl.errors import InputError
from tirl.rollout.trace import PipelineTracer, StageBoard


def _backwards(tmp_path: Path) -> Path:
    rows = trace("evaluator", 0, n=40)
    rows[20]["t"], rows[21]["t"] = rows[21]["t"], rows[20]["t"]
    return write_jsonl(tmp_path / "pipeline_trace.jsonl", rows)


def test_time_running_backwards_is_refused_with_the_line(tmp_path: Path) -> None:
    path = _backwards(tmp_path)
    with pytest.raises(InputError) as exc:
        load_trace(path)
    text = str(exc.value)
    assert f"{path}:22" in text and "time runs backwards" in text and "line 21" in text, text


def test_cli_refuses_a_backwards_trace_with_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _backwards(tmp_path)
    assert main(["diagnose", "pipeline", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}:22") and captured.out == "", lines


def test_blank_lines_keep_the_file_line_numbers(tmp_path: Path) -> None:
    rows = [{"t": t, "init_queue": 1, "run_queue": 0, "eval_queue": 0} for t in (0.0, 1.0, 0.5)]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows).replace("\n", "\n\n") + "\n")
    with pytest.raises(InputError, match=r"t\.jsonl:5: .*t=0\.5 after t=1 on line 3"):
        load_trace(path)


def test_equal_times_pass(tmp_path: Path) -> None:
    rows = [{"t": t, "init_queue": 1, "run_queue": 0, "eval_queue": 0} for t in (0.0, 1.0, 1.0, 2.0)]
    assert len(load_trace(write_jsonl(tmp_path / "t.jsonl", rows))) == 4


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"t": float("nan")}, "has a non-number: t=nan"),
        ({"t": float("inf")}, "t=inf is not a time"),
        ({"t": -1e308}, r"t=-1e\+308 is not a time"),
        ({"run_queue": -1}, "run_queue=-1 is negative"),
        ({"eval_queue": float("nan")}, "has a non-number: eval_queue=nan"),
        ({"init_queue": "many"}, "has a non-number: init_queue='many'"),  # it said "lacks", of a key it has
        ({"run_queue": None}, "has a non-number: run_queue=None"),
    ],
)
def test_out_of_range_values_are_refused_with_the_line(tmp_path: Path, bad: dict[str, object], needle: str) -> None:
    rows = [{"t": float(t), "init_queue": 1, "run_queue": 0, "eval_queue": 0} for t in range(4)]
    rows[2].update(bad)
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(InputError, match=needle) as exc:
        load_trace(path)
    assert f"{path}:3" in str(exc.value)


def test_a_resumed_tracer_continues_the_clock(tmp_path: Path) -> None:
    path = tmp_path / "run" / "pipeline_trace.jsonl"
    board = StageBoard()
    now = [100.0]
    first = PipelineTracer(path, 1.0, clock=lambda: now[0])
    for _ in range(3):
        now[0] += 1.0
        first.snapshot(board, step=1)
    now[0] = 5.0  # a new process: the loop clock starts anywhere, often lower
    resumed = PipelineTracer(path, 1.0, clock=lambda: now[0])
    for _ in range(2):
        now[0] += 0.5
        resumed.snapshot(board, step=1)
    ts = [row["t"] for row in load_trace(path)]
    assert ts == [1.0, 2.0, 3.0, 3.5, 4.0], ts
    assert diagnose_pipeline(load_trace(path)).verdict


def test_the_last_time_is_found_past_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"t": 7.5, "init_queue": 0, "run_queue": 0, "eval_queue": 0}\n{"t": 9')
    tracer = PipelineTracer(path, 1.0, clock=lambda: 0.0)
    assert tracer.snapshot(StageBoard(), step=0)["t"] == 7.5
