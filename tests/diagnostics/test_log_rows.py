"""What `tirl diagnose training` refuses in a log's rows, and what it still reads (:mod:`tirl.diagnostics.log_rows`).

Each refusal is one ``error: FILE:LINE: …`` line and exit 2, through ``tirl.cli.main``; before, each of these
logs was read (a junk cell as missing, ``true`` as 1.0, the last file's value, a step made up) and the verdict
was ``healthy`` with exit 0. Covered: junk metric cells in JSONL and wandb CSV, a log of nulls only, files
that disagree on a step (both orders), bad steps (twice with other values, missing, ``"x"``, negative,
``1.5``), CSV rows longer or shorter than the header, a TSV saved as ``.csv``, and a torn last JSONL line (read,
with a note). Still read: numeric strings, null/NaN/empty cells, a file without any step column, rows of one step
that do not disagree.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
from diag_synth import tirl_log, write_jsonl

from tirl.cli import main
from tirl.diagnostics.adapters import load_logs, load_metrics


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["diagnose", "training", *map(str, argv)])
    got = capsys.readouterr()
    return code, got.out, got.err


def _refused(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    """Exit 2, nothing on stdout, exactly one ``error:`` line on stderr; that line."""
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "", (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _log(n: int = 20, seed: int = 0) -> list[dict[str, Any]]:
    return tirl_log(n=n, seed=seed)


# ------------------------------------------------------------------ metric cells
@pytest.mark.parametrize("cell", ["big", "n/a", True, False, [1.5, 2.0], "0x10"])
def test_a_metric_cell_that_is_not_a_number_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cell: Any
) -> None:
    rows = _log()
    rows[5]["train/is_ratio_max"] = cell
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    line = _refused(capsys, path, "--json")
    assert line.startswith(f"error: {path}:6: train/is_ratio_max={json.dumps(cell)} is not a number")


@pytest.mark.parametrize("cell", [None, math.nan, "0.5", " 2.5 ", "", "inf", "NaN"])
def test_numbers_in_strings_and_missing_cells_are_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cell: Any
) -> None:
    rows = _log()
    rows[5]["train/is_ratio_max"] = cell
    code, out, err = _run(capsys, write_jsonl(tmp_path / "m.jsonl", rows), "--json")
    assert code == 0 and err == "" and json.loads(out)["verdict"] == "healthy"


def test_a_junk_cell_in_a_wandb_csv_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "export.csv"
    lines = ["Step,run - train/is_ratio_max,run - filter/valid_trajectories"]
    lines += [f"{s},{'oops' if s == 4 else 1.2},14" for s in range(10)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _refused(capsys, path).startswith(f'error: {path}:6: train/is_ratio_max="oops" is not a number')


def test_a_cell_of_a_key_no_adapter_reads_is_not_checked(tmp_path: Path) -> None:
    rows = [{**r, "note": "big", "tags": ["a"]} for r in _log()]
    assert len(load_metrics(write_jsonl(tmp_path / "m.jsonl", rows))) == 20


def test_a_log_of_nulls_only_is_nothing_to_diagnose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{k: (v if k == "step" else None) for k, v in r.items()} for r in _log()]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    line = _refused(capsys, path, "--json")  # --json prints no "healthy" either
    assert line.startswith(f"error: {path}: none of the 29 keys the tirl format reads has a value") and (
        "nothing to diagnose" in line
    )


# ------------------------------------------------------------------ several files, one step
def test_files_that_disagree_on_a_step_are_an_error_in_either_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", _log(seed=0))
    b_rows = _log(seed=0)
    b_rows[7]["train/is_ratio_max"] = 9.5  # one value differs
    b = write_jsonl(tmp_path / "b.jsonl", b_rows)
    first = _refused(capsys, a, b)
    assert first.startswith(f"error: {b}:8: step 7: train/is_ratio_max=9.5 here but ") and f"in {a}:8" in first
    second = _refused(capsys, b, a)
    assert second.startswith(f"error: {a}:8: step 7: train/is_ratio_max=") and f"9.5 in {b}:8" in second


def test_files_that_agree_or_hold_other_keys_are_joined(tmp_path: Path) -> None:
    rows = _log()
    is_part = [  # the IS ratio as a string: "1.5" and 1.5 agree
        {
            "step": r["step"],
            "train/is_ratio_max": None if r["train/is_ratio_max"] is None else str(r["train/is_ratio_max"]),
        }
        for r in rows
    ]
    rest = [{k: v for k, v in r.items()} | {"_runtime": r["step"] * 30.0 + 1} for r in rows]
    a, b = write_jsonl(tmp_path / "a.jsonl", is_part), write_jsonl(tmp_path / "b.jsonl", rest)
    ab, ba = load_logs([a, b])[0], load_logs([b, a])[0]
    assert ab.steps == ba.steps == list(range(20)) and ab.series == ba.series


def test_the_join_keeps_step_order_and_a_missing_value_never_conflicts() -> None:
    from tirl.diagnostics.log_rows import FileRows, file_steps, merge_by_step

    a = FileRows("a", [{"step": 3, "train/loss": 1.0}, {"step": 1, "train/loss": None}], [1, 2])
    b = FileRows("b", [{"step": 1, "train/loss": 2.0, "x": "w"}, {"step": 3, "train/loss": "1"}], [1, 2])
    steps, rows = merge_by_step([(a, file_steps(a)), (b, file_steps(b))], frozenset({"train/loss"}))
    assert steps == [1, 3] and rows == [{"step": 1, "train/loss": 2.0, "x": "w"}, {"step": 3, "train/loss": 1.0}]


# ------------------------------------------------------------------ the step column
def _steps_mutated(tmp_path: Path, change: str) -> tuple[Path, int]:
    rows = _log()
    at = 4  # the row on line 5
    if change == "every row step 1":
        rows = [{**r, "step": 1} for r in rows]
        at = 1
    elif change == "missing":
        del rows[at]["step"]
    elif change == "null":
        rows[at]["step"] = None
    else:
        rows[at]["step"] = {"x": "x", "negative": -3, "fraction": 1.5, "true": True}[change]
    return write_jsonl(tmp_path / "m.jsonl", rows), at + 1


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("every row step 1", "step 1 again, with train/is_ratio_min="),
        ("missing", "the row has no step (no 'step', which other rows have)"),
        ("null", "the row has no step"),
        ("x", 'step="x" is not a step number'),
        ("true", "step=true is not a step number"),
        ("negative", "step=-3 is negative"),
        ("fraction", "step=1.5 is not a whole number"),
    ],
)
def test_a_bad_step_is_an_error_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, problem: str
) -> None:
    path, line = _steps_mutated(tmp_path, change)
    assert _refused(capsys, path).startswith(f"error: {path}:{line}: {problem}")


def test_a_file_without_a_step_column_is_numbered_in_order(tmp_path: Path) -> None:
    rows = [{k: v for k, v in r.items() if k != "step"} for r in _log()]
    assert load_metrics(write_jsonl(tmp_path / "m.jsonl", rows)).steps == list(range(20))


def test_rows_of_one_step_that_do_not_disagree_are_one_step(tmp_path: Path) -> None:
    rows = _log()
    split = []
    for r in rows:  # a logger that writes each step in two calls, and once the same value twice
        split += [{"step": r["step"], "train/is_ratio_max": r["train/is_ratio_max"]}, r]
    log = load_metrics(write_jsonl(tmp_path / "m.jsonl", split))
    assert log.steps == list(range(20)) and log.get("is_max") == [r["train/is_ratio_max"] for r in rows]


# ------------------------------------------------------------------ CSV rows and headers
@pytest.mark.parametrize(("row", "cells"), [("2,1.3,14,9", 4), ("2,1.3", 2)])
def test_a_csv_row_longer_or_shorter_than_the_header_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str, cells: int
) -> None:
    path = tmp_path / "export.csv"
    body = [f"{s},1.2,14" for s in range(10)]
    body.insert(2, row)
    path.write_text("Step,train/is_ratio_max,filter/valid_trajectories\n" + "\n".join(body) + "\n", encoding="utf-8")
    line = _refused(capsys, path)
    assert line.startswith(f"error: {path}:4: the row has {cells} cells for the header's 3 columns")


def test_a_tsv_saved_as_csv_is_a_short_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _log(n=30)
    path = tmp_path / "export.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(list(rows[0]))
        writer.writerows([list(r.values()) for r in rows])
    line = _refused(capsys, path)
    assert line.startswith(f"error: {path}:1: the header is one column holding tabs") and "comma" in line
    assert len(line) < 300 + len(str(path)), len(line)  # was ~2,000 characters of echoed header


def test_an_unknown_header_is_cut_in_the_keys_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"x" * 3000: 1}) + "\n", encoding="utf-8")
    line = _refused(capsys, path)
    assert "cannot recognise the log format" in line and "(3000 characters)" in line and len(line) < 1500


# ------------------------------------------------------------------ a torn last line
def test_a_torn_last_line_is_skipped_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "metrics.jsonl", _log())
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"step": 20, "train/is_ra')
    code, out, err = _run(capsys, path, "--json")
    assert code == 0 and json.loads(out)["steps"] == 20  # the torn line is not a step
    assert err == f"note: {path}:21: the last line is torn (no newline at its end and not valid JSON: a run " \
        "killed mid-write) and was skipped\n"  # fmt: skip
    code, out, err = _run(capsys, path)
    assert code == 0 and "20 steps" in out and err.startswith("note: ")
