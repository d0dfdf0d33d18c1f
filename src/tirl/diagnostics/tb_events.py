"""Training logs from TensorBoard event files: the scalars of ``events.out.tfevents.*`` as per-step rows.

:func:`read_tensorboard` reads an event file, or every event file under a directory (a run's ``tb/``, a
TensorBoard ``--logdir`` of several runs), into :class:`~tirl.diagnostics.log_rows.FileRows`: one row per step
holding every scalar logged at that step under its tag (``actor/grad_norm``, ``train/is_ratio_max``), so the
adapters of :mod:`tirl.diagnostics.adapters` read verl's, SkyRL's, TRL's and tirl's own TensorBoard logs with
the key tables they use for JSONL. The event files of one directory are one run; a directory with event files
in several sub-directories gives one run per sub-directory, named by its path (``--run NAME`` picks one).

The file format is read here, not through TensorBoard's loaders, so that a bad file is an error naming the file
and the byte: each record is a little-endian length, its masked CRC-32C, the ``Event`` protobuf and the data's
masked CRC-32C. A last record cut short (a run killed mid-write) is skipped with a note; a checksum that does not
match anywhere else, or a record that does not parse, is an error. Files of a run are read in the order of their
first event's wall time. Values read as TensorBoard shows them: a ``SessionLog.START`` event at step ``s`` (what
a writer's ``purge_step`` writes when a run resumes) drops every value logged earlier at a step ``>= s``; a tag
logged again at a step it already has, with no such event between (a restart without a purge step), keeps the
later value. Each is counted in a note.

Read: scalar summaries — ``simple_value`` (``SummaryWriter.add_scalar`` in torch and tensorboardX) and
TF2 ``tf.summary.scalar`` tensors (plugin ``scalars``, one float or double). Not covered: histograms, images,
text and every other plugin (skipped); TF1 event files before ``brain.Event:2`` with their out-of-order-step
purge rule; compressed or remote (``gs://``, ``s3://``) logs.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.diagnostics.log_rows import FileRows, Position
from tirl.errors import InputError

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
MAX_RECORD_BYTES = 1 << 30  # a length beyond this is a corrupt header, not an event
_FIX = "a TensorBoard event file is damaged past its end: diagnose the run's metrics.jsonl, or the other event files"
_DT_FLOAT, _DT_DOUBLE = 1, 2


def is_event_file(p: Path) -> bool:
    """Whether ``p``'s name is a TensorBoard event file's (``events.out.tfevents.*``)."""
    return "tfevents" in p.name


def event_files(root: Path) -> list[Path]:
    """Every event file under ``root`` (``root`` itself when it is one), sorted by path."""
    if root.is_file():
        return [root] if is_event_file(root) else []
    return sorted(p for p in root.rglob("*tfevents*") if p.is_file())


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli) of ``data``, rotated right by 15 bits plus 0xA282EAD8."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(p: Path, notes: list[str]) -> Iterator[tuple[int, bytes]]:
    """``(byte offset, event bytes)`` of each record of ``p``; a record cut short at the end adds a note."""
    data = p.read_bytes()
    pos = 0
    while pos < len(data):
        header = data[pos : pos + 12]
        if len(header) < 12:
            notes.append(f"{p}: the last record (byte {pos}) is cut short (a run killed mid-write) and was skipped")
            return
        (length,) = _LENGTH.unpack_from(header)
        if _CRC.unpack_from(header, 8)[0] != masked_crc32c(header[:8]) or length > MAX_RECORD_BYTES:
            raise InputError(str(p), None, f"the record at byte {pos} has a bad length checksum", _FIX)
        body = data[pos + 12 : pos + 12 + length + 4]
        if len(body) < length + 4:
            notes.append(f"{p}: the last record (byte {pos}) is cut short (a run killed mid-write) and was skipped")
            return
        if _CRC.unpack_from(body, length)[0] != masked_crc32c(body[:length]):
            raise InputError(str(p), None, f"the record at byte {pos} has a bad data checksum", _FIX)
        yield pos, body[:length]
        pos += 12 + length + 4


@dataclass(slots=True)
class _Event:
    """What one event holds for this reader: its step and wall time, a restart mark, its scalars."""

    offset: int
    step: int
    wall_time: float
    restart: bool
    scalars: list[tuple[str, float]]


def _scalar_of(value: Any) -> float | None:
    """A summary value's number: ``simple_value``, or a TF2 ``scalars`` tensor of one float or double."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if not value.HasField("tensor") or value.metadata.plugin_data.plugin_name != "scalars":
        return None
    t = value.tensor
    if t.dtype == _DT_FLOAT:
        nums = list(t.float_val) or [x for (x,) in struct.iter_unpack("<f", t.tensor_content)]
    elif t.dtype == _DT_DOUBLE:
        nums = list(t.double_val) or [x for (x,) in struct.iter_unpack("<d", t.tensor_content)]
    else:
        return None
    return float(nums[0]) if len(nums) == 1 else None


def _events(p: Path, notes: list[str]) -> list[_Event]:
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    out = []
    for offset, raw in records(p, notes):
        try:
            event = event_pb2.Event.FromString(raw)
        except DecodeError:
            raise InputError(str(p), None, f"the record at byte {offset} is not a TensorBoard event", _FIX) from None
        restart = event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START
        scalars = []
        if event.HasField("summary"):
            for value in event.summary.value:
                number = _scalar_of(value)
                if number is not None:
                    scalars.append((value.tag, number))
        out.append(_Event(offset, event.step, event.wall_time, restart, scalars))
    return out


@dataclass(slots=True)
class _RunValues:
    """The values of one run as TensorBoard shows them, filled event by event (see the module docstring)."""

    values: dict[tuple[str, int], float] = field(default_factory=dict)
    where: dict[int, Position] = field(default_factory=dict)
    purged: int = 0
    replaced: int = 0

    def add(self, p: Path, event: _Event) -> None:
        if event.restart:
            gone = [key for key in self.values if key[1] >= event.step]
            self.purged += len(gone)
            for key in gone:
                del self.values[key]
        for tag, number in event.scalars:
            self.replaced += (tag, event.step) in self.values
            self.values[tag, event.step] = number
            self.where.setdefault(event.step, f"{p.name} byte {event.offset}")

    def file_rows(self, label: str, notes: list[str]) -> FileRows:
        rows: dict[int, dict[str, object]] = {}
        for (tag, step), number in self.values.items():
            rows.setdefault(step, {"step": step})[tag] = number
        if self.purged:
            notes.append(
                f"{label}: {self.purged} values logged before a restart at or after its step were dropped "
                "(SessionLog.START, as TensorBoard drops them)"
            )
        if self.replaced:
            notes.append(f"{label}: {self.replaced} values were logged again at a step they had; the later are read")
        steps = sorted(rows)
        return FileRows(label, [rows[s] for s in steps], [self.where[s] for s in steps], notes)


def read_tensorboard(path: str | Path, files: list[Path] | None = None) -> dict[str | None, FileRows]:
    """The scalar rows of each run in an event file or under a directory (module docstring).

    ``files``: :func:`event_files` of ``path`` when the caller has already listed them. Raises
    :class:`InputError` naming the path when it holds no event file or no scalar at all, and naming the file
    and byte of a record that is damaged anywhere but at its end.
    """
    root = Path(path)
    files = event_files(root) if files is None else files
    if not files:
        raise InputError(str(root), None, "no TensorBoard event file here", "point at a run's tb/ directory")
    groups: dict[Path, list[Path]] = {}
    for f in files:
        groups.setdefault(f.parent, []).append(f)
    out: dict[str | None, FileRows] = {}
    for parent, members in groups.items():
        notes: list[str] = []
        loaded = [(f, _events(f, notes)) for f in members]
        loaded.sort(key=lambda fe: (fe[1][0].wall_time if fe[1] else float("inf"), fe[0].name))
        run = _RunValues()
        for f, events in loaded:
            for event in events:
                run.add(f, event)
        name = None if len(groups) == 1 else (parent.relative_to(root).as_posix() if root.is_dir() else None)
        label = str(root if len(groups) == 1 else parent)
        out[name] = run.file_rows(label, notes)
    if all(not part.rows for part in out.values()):
        raise InputError(str(root), None, "the event files hold no scalar", "point at the run's training scalars")
    return out
