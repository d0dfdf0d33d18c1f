"""Task files in the formats users have: verl and SkyRL parquet or JSONL, with a chat ``prompt``.

One row is one task::

    {"prompt": [{"role": "system", "content": "..."}, {"role": "user", "content": "What is 6*7?"}],
     "reward_model": {"ground_truth": "42"},          # verl   (or "reward_spec": {...} for SkyRL)
     "data_source": "gsm8k", "extra_info": {"index": 7, "split": "train"}}

* the file is parquet (``.parquet``, read with pyarrow, nested columns as
  structs/lists) or JSONL (anything else: one object per line, ``#`` lines and
  blank lines skipped);
* ``prompt`` (``env.prompt_key``, a dotted path) is a list of ``{role,
  content}`` messages (roles ``system``/``user``/``assistant``; at least one
  ``user``) or a plain string (one user message);
* the ground truth (``env.answer_key``, a dotted path) is by default the first
  present of ``reward_model.ground_truth`` (verl), ``reward_spec.ground_truth``
  (SkyRL) and ``answer``; a string or a number;
* ``extra_info`` and ``data_source`` are kept on the :class:`TaskRow`; ``id``
  (or ``extra_info.index``) names the task, else ``<file stem>-<row>``.

Every malformed row raises :class:`~tirl.errors.InputError` naming the file,
the row (1-based; the line for JSONL) and the fix. Not covered: several
ground truths per row (a list), multimodal content (a list of parts instead
of a string), reading only part of a huge parquet file (the whole file is
loaded; ``n`` only truncates).

>>> rows = read_task_rows("tests/envs/data/verl_tasks.jsonl")  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.config import EnvConfig
from tirl.envs.base import Task
from tirl.errors import InputError
from tirl.inputs import input_file
from tirl.types import Message, Role

__all__ = [
    "DEFAULT_ANSWER_KEYS",
    "TaskFileSpec",
    "TaskRow",
    "iter_records",
    "load_tasks_file",
    "read_task_row",
    "read_task_rows",
    "row_messages",
    "uses_chat_format",
]

DEFAULT_ANSWER_KEYS = ("reward_model.ground_truth", "reward_spec.ground_truth", "answer")
_ROLES = {"system": Role.SYSTEM, "user": Role.USER, "assistant": Role.ASSISTANT}
_PARQUET_BATCH = 1024


@dataclass(frozen=True, slots=True)
class TaskFileSpec:
    """Where a row keeps its parts: dotted paths (``reward_model.ground_truth``); ``answer_key=None`` = auto."""

    prompt_key: str = "prompt"
    answer_key: str | None = None
    id_key: str = "id"


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One task of a file: the chat prompt, the ground truth, and what the file said besides."""

    id: str
    messages: tuple[Message, ...]
    answer: str
    source: str  # the file
    row: int  # 1-based row (the line number for JSONL)
    data_source: str | None = None
    extra_info: dict[str, Any] = field(default_factory=dict)

    @property
    def question(self) -> str:
        """The last user message (the task's text for logs and de-duplication)."""
        return next(m.content or "" for m in reversed(self.messages) if m.role is Role.USER)

    def to_task(self, kind: str = "tir-math") -> Task:
        """A :class:`~tirl.envs.base.Task` whose episode starts from this chat (``Task.messages``)."""
        data: dict[str, Any] = {"source": self.source, "row": self.row, "extra_info": self.extra_info}
        if self.data_source is not None:
            data["data_source"] = self.data_source
        return Task(id=self.id, prompt=self.question, answer=self.answer, kind=kind, data=data, messages=self.messages)


def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".pq")


def _parquet_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
        row = 0
        for batch in reader.iter_batches(batch_size=_PARQUET_BATCH):
            for record in batch.to_pylist():
                row += 1
                yield row, record
    except (pa.ArrowException, OSError) as exc:
        raise InputError(
            str(path), None, f"not a readable parquet file ({str(exc).splitlines()[0][:200]})", "check the file"
        ) from None


def iter_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row, object)`` for each row of a parquet or JSONL file (1-based rows; JSONL: line numbers)."""
    # a pipe is refused: the task file is read more than once (the preflight's sample, then the env)
    p = input_file(path, "check the path (env.tasks_file)", pipe_fix="save the tasks to a file first")
    if _is_parquet(p):
        yield from _parquet_records(p)
        return
    from tirl.envs.tasks.jsonl import read_jsonl

    yield from read_jsonl(p)


def _get(record: dict[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = record
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _where(path: Path, row: int) -> tuple[str, int | None, str]:
    """InputError's place: JSONL rows are lines (``file:N``); parquet rows are named in the text."""
    return (str(path), None, f"row {row}: ") if _is_parquet(path) else (str(path), row, "")


def _messages(value: Any, key: str, path: Path, row: int) -> tuple[Message, ...]:
    file, line, at = _where(path, row)
    fix = f'make {key!r} a list like [{{"role": "user", "content": "..."}}] (or set env.prompt_key)'
    if isinstance(value, str):
        if not value.strip():
            raise InputError(file, line, f"{at}{key!r} is an empty string", fix)
        return (Message(role=Role.USER, content=value),)
    if not isinstance(value, list | tuple) or not value:
        raise InputError(file, line, f"{at}{key!r} must be a non-empty list of messages, got {_kind(value)}", fix)
    out: list[Message] = []
    for i, item in enumerate(value):
        role = item.get("role") if isinstance(item, dict) else None
        content = item.get("content") if isinstance(item, dict) else None
        if not isinstance(role, str) or role not in _ROLES:
            raise InputError(file, line, f"{at}{key}[{i}] has role {role!r}", "use system, user or assistant")
        if not isinstance(content, str):
            raise InputError(file, line, f"{at}{key}[{i}] content must be a string, got {_kind(content)}", fix)
        out.append(Message(role=_ROLES[role], content=content))
    if not any(m.role is Role.USER and (m.content or "").strip() for m in out):
        raise InputError(file, line, f"{at}{key!r} has no non-empty user message", "add the question as a user turn")
    return tuple(out)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _answer(record: dict[str, Any], spec: TaskFileSpec, path: Path, row: int) -> str:
    file, line, at = _where(path, row)
    keys = (spec.answer_key,) if spec.answer_key else DEFAULT_ANSWER_KEYS
    for key in keys:
        found, value = _get(record, key)
        if not found:
            continue
        if isinstance(value, bool) or value is None:
            break
        if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
            return str(value)
        if isinstance(value, str) and value.strip():
            return value.strip()
        raise InputError(file, line, f"{at}ground truth {key!r} must be a string or a number, got {_kind(value)}",
                         f"write one answer as a string in {key!r}")  # fmt: skip
    names = " or ".join(repr(k) for k in keys)
    raise InputError(file, line, f"{at}no ground truth at {names}",
                     "add it there, or point env.answer_key at the field that holds it (a dotted path)")  # fmt: skip


def row_messages(record: dict[str, Any], spec: TaskFileSpec, path: Path, row: int) -> tuple[Message, ...]:
    """The chat prompt of one row (at ``spec.prompt_key``), checked like :func:`read_task_rows` checks it."""
    file, line, at = _where(path, row)
    found, prompt = _get(record, spec.prompt_key)
    if not found:
        raise InputError(file, line, f"{at}missing the prompt field {spec.prompt_key!r}",
                         "add a chat prompt there, or point env.prompt_key at the field that holds it")  # fmt: skip
    return _messages(prompt, spec.prompt_key, path, row)


def read_task_row(record: Any, spec: TaskFileSpec, path: Path, row: int) -> TaskRow:
    """One row of a task file (``row`` 1-based: the line for JSONL), checked like :func:`read_task_rows`."""
    if not isinstance(record, dict):
        file, line, at = _where(path, row)
        raise InputError(file, line, f"{at}expected an object, got {_kind(record)}", "write one object per row")
    return _row(record, spec, path, row)


def _row(record: dict[str, Any], spec: TaskFileSpec, path: Path, row: int) -> TaskRow:
    messages = row_messages(record, spec, path, row)
    answer = _answer(record, spec, path, row)
    extra = record.get("extra_info")
    extra_info = dict(extra) if isinstance(extra, dict) else {}
    found_id, task_id = _get(record, spec.id_key)
    if not found_id or task_id is None:
        task_id = extra_info.get("index")
    name = str(task_id) if task_id is not None else f"{path.stem}-{row}"
    source = record.get("data_source")
    return TaskRow(
        id=name,
        messages=messages,
        answer=answer,
        source=str(path),
        row=row,
        data_source=source if isinstance(source, str) else None,
        extra_info=extra_info,
    )


def read_task_rows(path: str | Path, spec: TaskFileSpec | None = None, *, n: int | None = None) -> list[TaskRow]:
    """The rows of a verl/SkyRL-style task file (first ``n`` when given); errors name the file, row and fix."""
    spec = spec or TaskFileSpec()
    p = Path(path)
    rows: list[TaskRow] = []
    seen: dict[str, int] = {}
    for number, record in iter_records(p):
        task = read_task_row(record, spec, p, number)
        if task.id in seen:
            file, line, at = _where(p, number)
            raise InputError(file, line, f"{at}duplicate id {task.id!r} (first on row {seen[task.id]})",
                             "give each task its own id")  # fmt: skip
        seen[task.id] = number
        rows.append(task)
        if n is not None and len(rows) >= n:
            break
    if not rows:
        raise InputError(str(p), None, "no tasks in the file",
                         'add rows like {"prompt": [{"role": "user", "content": "..."}], '
                         '"reward_model": {"ground_truth": "42"}}')  # fmt: skip
    return rows


def uses_chat_format(path: str | Path, spec: TaskFileSpec | None = None) -> bool:
    """Whether ``path`` is a verl/SkyRL-style file: parquet, or JSONL whose first row has the prompt field.

    tirl's own JSONL (``question``/``answer``) is not; :func:`tirl.envs.tasks.math_gen.load_math_tasks` reads it.
    """
    spec = spec or TaskFileSpec()
    p = Path(path)
    if _is_parquet(p):
        return True
    for _, record in iter_records(p):
        return isinstance(record, dict) and _get(record, spec.prompt_key)[0]
    return False


def load_tasks_file(config: EnvConfig, n: int | None = None, *, kind: str = "tir-math") -> list[Task]:
    """The tasks of ``config.tasks_file`` (first ``n``): verl/SkyRL rows, or tirl's ``question``/``answer`` JSONL."""
    if not config.tasks_file:
        raise ValueError("config.tasks_file is not set")
    spec = TaskFileSpec(prompt_key=config.prompt_key, answer_key=config.answer_key)
    path = Path(config.tasks_file)
    if not uses_chat_format(path, spec):
        from tirl.envs.tasks.math_gen import load_math_tasks

        return load_math_tasks(path)[:n]
    return [row.to_task(kind) for row in read_task_rows(path, spec, n=n)]
