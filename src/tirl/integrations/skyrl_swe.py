"""SkyRL-style rows for tirl's swe-lite: read one (``env_class: "swe-lite"``) and write a file of them.

A SkyRL dataset row names its environment in ``env_class`` and hands the rest
of the row to it (``extra_info``, ``reward_spec``). tirl's skyrl-gym adapter
(:mod:`tirl.integrations.skyrl_gym`, ``--env skyrl-gym``) reads rows whose
``env_class`` is ``swe-lite`` with :func:`swe_row_task` and runs them in
tirl's own :class:`~tirl.envs.swe_lite.SweLiteEnv` (``swe-lite`` is tirl's
env class, resolved before skyrl-gym's registry, which has no SWE env)::

    {"data_source": "tirl/swe-lite",
     "prompt": [{"role": "user", "content": "`python3 check.py` fails in ..."}],
     "env_class": "swe-lite",
     "reward_spec": {"method": "hidden_tests"},
     "extra_info": {"instance_id": "calc-1", "repo": "repos/calc-1", "hidden_tests": "hidden/calc-1"}}

* ``prompt``: the chat (``env.prompt_key``), checked as every task file's is; a
  chat without a system message gets swe-lite's system prompt first.
* ``extra_info.repo``, ``extra_info.hidden_tests``, ``extra_info.test_command``:
  swe-lite's JSONL fields (:func:`tirl.envs.tasks.swe_gen.repo_fields`: the same
  checks, paths relative to the file), so ``hidden_tests`` alone is judged by
  :mod:`tirl.envs.scorer`, which the agent cannot forge.
* ``reward_spec.method`` (optional) states the verdict: ``hidden_tests`` (the
  judge; a ``test_command`` is then refused) or ``test_command`` (the command's
  own verdict, as forgeable as the command). No ground truth is read.
* the id: ``id``, else ``extra_info.instance_id`` (SWE-bench's name), else
  ``extra_info.index``, else ``<file stem>-<row>``.

:func:`export_tasks` writes tasks (the generated curriculum, or a user's
JSONL tasks) as a directory: ``skyrl.jsonl`` (these rows), ``swe-lite.jsonl``
(the same tasks in swe-lite's own format) and, for generated tasks,
``repos/<id>/`` and ``hidden/<id>/``; ``tirl tasks export`` calls it.

Not covered: SWE-Gym/SWE-bench rows as SkyRL-v0 writes them (``env_class:
"null"``, an ``instance`` with ``repo`` as ``owner/name``, ``base_commit``,
a container image): tirl clones and installs nothing, the ``repo`` is a local
directory (docs/envs.md says how to convert one by hand).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.envs.base import Task
from tirl.envs.tasks.files import TaskFileSpec, row_messages
from tirl.envs.tasks.swe_gen import KIND, RepoFields, repo_fields
from tirl.envs.workspace import write_tree
from tirl.errors import InputError, OutputError
from tirl.fileio import check_output_dir, staged_dir
from tirl.types import Role

__all__ = ["DATA_SOURCE", "ENV_CLASS", "METHODS", "Exported", "export_tasks", "swe_row_task"]

ENV_CLASS = "swe-lite"  # tirl's env class in a SkyRL row (skyrl-gym's registry has no SWE env)
DATA_SOURCE = "tirl/swe-lite"
#: ``reward_spec.method`` of a swe-lite row -> what decides the reward
METHODS = {
    "hidden_tests": "the hidden tests, judged by tirl's scorer (the agent cannot forge the verdict)",
    "test_command": "extra_info.test_command's own verdict (as forgeable as the command)",
}


def _place(path: Path, row: int) -> tuple[int | None, str]:
    """InputError's line and prefix: JSONL rows are lines, parquet rows are named in the text."""
    return (None, f"row {row}: ") if path.suffix.lower() in (".parquet", ".pq") else (row, "")


def _check_method(spec: Any, fields: RepoFields, path: Path, row: int) -> None:
    line, at = _place(path, row)
    if spec is None:
        return
    method = spec.get("method") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or method not in (None, *METHODS):
        got = f"reward_spec.method {method!r}" if isinstance(spec, dict) else f"reward_spec {spec!r}"
        raise InputError(str(path), line, f"{at}{got} is not a swe-lite verdict",
                         'use {"method": "hidden_tests"} (judged, unforgeable) or {"method": "test_command"}, '
                         "or leave reward_spec out")  # fmt: skip
    if method == "hidden_tests" and fields.test_command is not None:
        raise InputError(str(path), line, f"{at}reward_spec.method is 'hidden_tests' but extra_info.test_command "
                         "is set, and the command would decide the reward",
                         'remove extra_info.test_command (the judge runs the hidden tests) or set "method": '
                         '"test_command"')  # fmt: skip
    if method == "test_command" and fields.test_command is None:
        raise InputError(str(path), line, f"{at}reward_spec.method is 'test_command' but the row has no "
                         "extra_info.test_command", 'add "test_command": ... to extra_info, or set "method": '
                         '"hidden_tests"')  # fmt: skip


def _task_id(record: dict[str, Any], extra: dict[str, Any], path: Path, row: int) -> str:
    for value in (record.get("id"), extra.get("instance_id"), extra.get("index")):
        if value is not None:
            return str(value)
    return f"{path.stem}-{row}"


def swe_row_task(record: dict[str, Any], spec: TaskFileSpec, path: Path, row: int) -> Task:
    """The swe-lite task of one SkyRL-style row (see the module docstring); problems name file, row and field."""
    line, at = _place(path, row)
    messages = row_messages(record, spec, path, row)
    extra = record.get("extra_info")
    if not isinstance(extra, dict):
        got = "none" if extra is None else type(extra).__name__
        raise InputError(str(path), line, f"{at}a swe-lite row needs an extra_info object with its repository, "
                         f"got {got}", 'add "extra_info": {"repo": "repos/x", "hidden_tests": "hidden/x"} '
                         "(paths relative to the file)")  # fmt: skip
    fields = repo_fields(extra, path, line, prefix="extra_info.", at=at)
    _check_method(record.get("reward_spec"), fields, path, row)
    prompt = next(m.content or "" for m in reversed(messages) if m.role is Role.USER)
    data: dict[str, Any] = {**fields.data(), "env_class": ENV_CLASS, "source": str(path), "row": row}
    data["extra_info"] = dict(extra)
    if isinstance(record.get("data_source"), str):
        data["data_source"] = record["data_source"]
    return Task(id=_task_id(record, extra, path, row), prompt=prompt, kind=KIND, data=data, messages=messages)


# ------------------------------------------------------------------------------------------------ export
@dataclass(frozen=True, slots=True)
class Exported:
    """What :func:`export_tasks` wrote: the directory, the two task files and the number of tasks."""

    out: Path
    skyrl_file: Path
    swe_file: Path
    tasks: int


def _dir_name(task_id: str, used: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("._") or "task"
    base, i = name, 1
    while name in used:
        i += 1
        name = f"{base}-{i}"
    used.add(name)
    return name


def _task_paths(task: Task, root: Path, used: set[str]) -> tuple[str, str | None, str | None]:
    """``(repo, hidden_tests, test_command)`` of ``task`` as the files will say them (generated: written here)."""
    if "repo" in task.data:  # a user's task (swe-lite JSONL): its own directories, referenced by absolute path
        hidden = task.data.get("hidden_tests")
        return str(task.data["repo"]), hidden if isinstance(hidden, str) else None, task.data.get("test_command")
    files, hidden_files = task.data.get("files"), task.data.get("hidden_tests")
    if not isinstance(files, dict) or not isinstance(hidden_files, dict):
        raise ValueError(f"swe-lite task {task.id!r} has neither data['repo'] nor data['files']")
    name = _dir_name(task.id, used)
    write_tree(root / "repos" / name, files)
    write_tree(root / "hidden" / name, hidden_files)
    return f"repos/{name}", f"hidden/{name}", None


def _rows(task: Task, repo: str, hidden: str | None, command: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The SkyRL-style row and the swe-lite JSONL row of one task."""
    chat = [m.to_dict() for m in task.messages] or [{"role": "user", "content": task.prompt}]
    extra: dict[str, Any] = {"instance_id": task.id, "repo": repo}
    native: dict[str, Any] = {"id": task.id, "repo": repo, "prompt": task.prompt}
    for key, value in (("hidden_tests", hidden), ("test_command", command)):
        if value is not None:
            extra[key] = native[key] = value
    method = "test_command" if command is not None else "hidden_tests"
    skyrl = {"data_source": DATA_SOURCE, "prompt": chat, "env_class": ENV_CLASS, "reward_spec": {"method": method},
             "extra_info": extra}  # fmt: skip
    return skyrl, native


def export_tasks(tasks: Sequence[Task], out: str | Path) -> Exported:
    """Write ``tasks`` into the new directory ``out`` (see the module docstring); all of it or nothing.

    ``out`` must not exist, or be an empty directory: nothing is overwritten. The directory is built beside
    ``out`` and renamed into place, so an interrupted export leaves no partial ``out``.
    """
    target = check_output_dir(out, staged=True)  # a file in the way is refused with its name
    if target.is_dir() and any(target.iterdir()):
        raise OutputError(str(target), None, "exists and is not an empty directory",
                          "give a new directory (an export never overwrites)")  # fmt: skip
    if not tasks:
        raise ValueError("no tasks to export")
    target.parent.mkdir(parents=True, exist_ok=True)
    with staged_dir(target, replace=False) as tmp:
        used: set[str] = set()
        skyrl_rows, native_rows = [], []
        for task in tasks:
            skyrl, native = _rows(task, *_task_paths(task, tmp, used))
            skyrl_rows.append(skyrl)
            native_rows.append(native)
        for name, rows in (("skyrl.jsonl", skyrl_rows), ("swe-lite.jsonl", native_rows)):
            text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
            (tmp / name).write_text(text, encoding="utf-8")
    return Exported(out=target, skyrl_file=target / "skyrl.jsonl", swe_file=target / "swe-lite.jsonl",
                    tasks=len(tasks))  # fmt: skip
