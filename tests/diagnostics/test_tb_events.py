"""`tirl diagnose training` on TensorBoard event files (:mod:`tirl.diagnostics.tb_events`).

Every event file here is written by a real writer (torch's ``SummaryWriter``, the one tirl, verl and SkyRL use),
and TensorBoard's own ``EventAccumulator`` is the reference for which value each step reads (a resumed run's
purge included). Covered: the checksum against TensorBoard's, a tirl log and a verl log read from event files
give the verdict their JSONL gives, a restart with ``purge_step``, a tag logged twice, TF2 scalar tensors, a
torn last record (note), a damaged record (one ``error:`` line naming the byte), a log directory of two runs
(``--run``), files without scalars. Before, every event file and ``tb/`` directory was refused.
"""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest
from diag_synth import as_verl, tirl_log, write_jsonl
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tb_masked_crc32c
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.writer import FileWriter

from tirl.cli import main
from tirl.diagnostics.adapters import load_metrics
from tirl.diagnostics.tb_events import masked_crc32c, read_tensorboard


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _rows(n: int = 60, inject: str | None = "void_leak") -> list[dict[str, Any]]:
    """A synthetic tirl log whose numbers are float32 (what TensorBoard stores), so both files hold equal values."""
    rows = tirl_log(n=n, seed=3, inject=inject, at=(40,))
    kept = [row for row in rows if row["train/is_ratio_max"] is not None]  # a step of nulls has no event to hold it
    return [{k: (v if k == "step" or v is None else _f32(float(v))) for k, v in row.items()} for row in kept]


def _write_tb(log_dir: Path, rows: list[dict[str, Any]], step_key: str = "step", **kw: Any) -> None:
    writer = SummaryWriter(log_dir=str(log_dir), **kw)
    for row in rows:
        for key, value in row.items():
            if key != step_key and value is not None:
                writer.add_scalar(key, value, global_step=row[step_key])
    writer.close()


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["diagnose", "training", *map(str, argv)])
    got = capsys.readouterr()
    return code, got.out, got.err


def _verdict(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> dict[str, Any]:
    code, out, err = _run(capsys, *argv, "--json")
    assert code in (0, 1), (code, out, err)
    got: dict[str, Any] = json.loads(out)
    got.pop("log", None)
    got.pop("path", None)
    return got


def test_the_checksum_is_tensorboards() -> None:
    rng = random.Random(0)
    for n in (*range(0, 40), 1000, 4097):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert masked_crc32c(data) == tb_masked_crc32c(data), n


@pytest.mark.parametrize("fmt", ["tirl", "verl"])
def test_an_event_log_gives_the_verdict_its_jsonl_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    rows = _rows() if fmt == "tirl" else as_verl(_rows())
    step_key = "step" if fmt == "tirl" else "training/global_step"
    jsonl = write_jsonl(tmp_path / "metrics.jsonl", rows)
    run = tmp_path / "run"
    _write_tb(run / "tb", rows, step_key)
    from_jsonl = _verdict(capsys, jsonl)
    assert from_jsonl["verdict"] != "healthy"  # the injected spike is found: the comparison is not vacuous
    for arg in (run, run / "tb", next((run / "tb").iterdir())):
        assert _verdict(capsys, arg) == from_jsonl, arg
    log = load_metrics(run / "tb")
    assert log.format == fmt and log.steps == [r[step_key] for r in rows if any(v is not None for v in r.values())]


def test_a_resumed_run_reads_what_tensorboard_shows(tmp_path: Path) -> None:
    """A writer with ``purge_step`` drops the older values at and after it; a tag logged twice keeps the later."""
    tb = tmp_path / "tb"
    first = [{"step": s, "train/grad_norm": float(s), "train/is_ratio_max": 1.5} for s in range(1, 11)]
    _write_tb(tb, first)
    resumed = [{"step": s, "train/grad_norm": 100.0 + s} for s in range(7, 13)]
    _write_tb(tb, resumed, purge_step=7)
    writer = SummaryWriter(log_dir=str(tb))  # a restart without a purge step re-logs step 12
    writer.add_scalar("train/grad_norm", 999.0, global_step=12)
    writer.close()
    (part,) = read_tensorboard(tb).values()
    acc = EventAccumulator(str(tb))
    acc.Reload()
    for tag in ("train/grad_norm", "train/is_ratio_max"):
        want = {}
        for e in acc.Scalars(tag):
            want[e.step] = e.value  # the accumulator keeps both points of a re-logged step; the later is shown last
        got = {row["step"]: row[tag] for row in part.rows if tag in row}
        assert got == want, tag
    assert {r["step"]: r.get("train/is_ratio_max") for r in part.rows}[8] is None  # purged, not re-logged
    assert any("dropped" in n for n in part.notes) and any("logged again" in n for n in part.notes)


def test_tf2_scalar_tensors_are_read_and_other_plugins_skipped(tmp_path: Path) -> None:
    writer = FileWriter(str(tmp_path))
    for step, (f, d) in enumerate([(0.5, 1.25), (0.75, 2.5)]):
        values = []
        pairs = (("train/grad_norm", 1, "float_val", f), ("train/is_ratio_max", 2, "double_val", d))
        for tag, dtype, field, x in pairs:
            value = summary_pb2.Summary.Value(tag=tag)
            value.metadata.plugin_data.plugin_name = "scalars"
            value.tensor.dtype = dtype
            getattr(value.tensor, field).append(x)
            values.append(value)
        other = summary_pb2.Summary.Value(tag="text")
        other.metadata.plugin_data.plugin_name = "text"
        other.tensor.dtype = 7
        other.tensor.string_val.append(b"hello")
        values.append(other)
        writer.add_event(event_pb2.Event(summary=summary_pb2.Summary(value=values)), step=step)
    writer.close()
    (part,) = read_tensorboard(tmp_path).values()
    assert part.rows == [
        {"step": 0, "train/grad_norm": 0.5, "train/is_ratio_max": 1.25},
        {"step": 1, "train/grad_norm": 0.75, "train/is_ratio_max": 2.5},
    ]


def test_a_torn_last_record_is_skipped_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_tb(tmp_path, _rows(inject=None))
    (event,) = tmp_path.iterdir()
    whole = event.read_bytes()
    event.write_bytes(whole[:-7])
    code, out, err = _run(capsys, tmp_path, "--json")
    assert code == 0 and json.loads(out)["steps"] >= 50
    assert err.startswith(f"note: {event}: the last record (byte ") and "cut short" in err


def test_a_damaged_record_is_one_error_naming_the_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_tb(tmp_path, _rows(inject=None))
    (event,) = tmp_path.iterdir()
    data = bytearray(event.read_bytes())
    data[len(data) // 2] ^= 0xFF
    event.write_bytes(bytes(data))
    code, out, err = _run(capsys, tmp_path)
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"error: {event}: the record at byte ") and "checksum" in lines[0]


def test_a_log_directory_of_two_runs_gives_two_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_tb(tmp_path / "a", _rows(inject=None))
    _write_tb(tmp_path / "b" / "x", _rows(inject="void_leak"))
    both = _verdict(capsys, tmp_path)["runs"]
    assert [r["verdict"] == "healthy" for r in both] == [True, False]
    err = _run(capsys, tmp_path, "--run", "c")[2]
    assert err.startswith(f"error: {tmp_path}: no run named 'c'; runs found: 'a', 'b/x'")
    picked = _verdict(capsys, tmp_path, "--run", "b/x")
    assert picked.pop("run") == "b/x" and picked == _verdict(capsys, tmp_path / "b" / "x")
    assert _verdict(capsys, tmp_path, "--run", "a")["verdict"] == "healthy"


def test_event_files_without_scalars_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_text("note", "no scalars here", global_step=0)
    writer.close()
    code, out, err = _run(capsys, tmp_path / "tb")
    assert code == 2 and out == "" and err.startswith(f"error: {tmp_path / 'tb'}: the event files hold no scalar")


def test_an_empty_event_file_is_no_scalar_and_garbage_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "e" / "events.out.tfevents.1.host"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    assert _run(capsys, empty)[2].startswith(f"error: {empty}: the event files hold no scalar")
    junk = tmp_path / "j" / "events.out.tfevents.1.host"
    junk.parent.mkdir()
    junk.write_bytes(os.urandom(64))
    code, _, err = _run(capsys, junk.parent)
    assert code == 2 and err.startswith(f"error: {junk}: the record at byte 0 has a bad length checksum")
