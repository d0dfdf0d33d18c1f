"""Re-judge a rewarded swe-lite episode: replay its commands, then judge its edits on the task's own files alone.

A reward is *earned* when the edits the agent made to the repository's own files make the hidden
tests pass. :func:`rejudge` checks that for one recorded trajectory:

1. **Replay.** A fresh :class:`~tirl.envs.swe_lite.SweLiteEnv` (same sandbox, same action rule) is
   reset on the task and given the recorded assistant messages in order, as the episode gave them;
   the judge then scores the replayed workspace (``replayed``).
2. **The task's own files.** Before that judge runs, the replayed workspace is read from the host
   without following links: every regular file at a path the task's template has (its source files)
   is kept; what the agent added (``conftest.py``, a ``.pth``, a stale ``.pyc``, a helper module, a
   link) is listed in ``extra_files`` and left out. A second fresh workspace gets those files, and the
   judge scores it (``clean``). A template file the agent deleted, replaced by a link or a directory,
   or grew past :data:`MAX_SOURCE_BYTES` is deleted in the clean copy too.

The status (:data:`STATUSES`):

* ``confirmed`` — the replay earns the recorded reward, and so do the task's own files;
* ``outside_sources`` — the replay earns it, the task's own files do not: the reward depends on files
  the agent added (a forging sign; a legitimate fix that adds a module lands here too, and its
  ``extra_files`` say which);
* ``not_reproduced`` — the replay does not earn the recorded reward (the trajectory file was edited,
  or the episode depended on something the replay does not repeat: time, randomness, another
  episode's files);
* ``unresolved`` — the task could not be found (:func:`find_task`), so nothing was run.

Covered tasks: the built-in generators' (``swec-…`` curriculum ids and ``swes-…`` spec-curriculum ids,
``swe-s…`` planted-bug ids), and
any task given in ``tasks`` (a JSONL task file's, by id). Not covered: a task with its own
``test_command`` is judged by that command, as in training, so its rejudge is only as strong as the
command; replays run the recorded messages, not the recorded tool outputs, so a command whose output
differs between runs may send the replay elsewhere (counted, not hidden: ``not_reproduced``).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tirl.envs.base import Task
from tirl.envs.swe_lite import SweLiteEnv
from tirl.envs.tasks.swe_curriculum import ID_PREFIXES
from tirl.envs.workspace import materialise
from tirl.types import Role, Trajectory

Status = Literal["confirmed", "outside_sources", "not_reproduced", "unresolved"]
STATUSES: tuple[Status, ...] = ("confirmed", "outside_sources", "not_reproduced", "unresolved")
#: a source file larger than this is not carried to the clean copy (it is deleted there)
MAX_SOURCE_BYTES = 1 << 20
#: the most workspace entries read; beyond it the rest are not listed (and not carried)
MAX_ENTRIES = 20_000
EXTRA_SHOWN = 10
#: a curriculum task id (plain or spec, :data:`~tirl.envs.tasks.swe_curriculum.ID_PREFIXES`) and its sample suffix
_CURRICULUM_ID = re.compile(r"^((" + "|".join(map(re.escape, ID_PREFIXES)) + r").+)-s\d+-\d+$")
_PLANTED_ID = re.compile(r"^swe-s(\d{1,20})-(\d{1,7})-")  # bounded: a hostile id's 5,000 digits are no number
_STEP_PREFIX = re.compile(r"^s\d+-\d+-(.+)$")


@dataclass(frozen=True, slots=True)
class Rejudgement:
    """One trajectory's re-judged reward (rewards are ``None`` where that judge did not run)."""

    traj_id: str
    task_id: str
    status: Status
    recorded: float
    replayed: float | None = None
    clean: float | None = None
    extra_files: tuple[str, ...] = ()
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        """The JSON shape (``tirl audit --rejudge --json``: ``verdicts.rejudged.items``)."""
        return {
            "id": self.traj_id,
            "task": self.task_id,
            "status": self.status,
            "recorded": self.recorded,
            "replayed": self.replayed,
            "clean": self.clean,
            "extra_files": list(self.extra_files),
            "detail": self.detail,
        }


def find_task(task_id: str, tasks: Mapping[str, Task] | None = None) -> Task | None:
    """The task with ``task_id``: from ``tasks`` first, else the built-in swe-lite generators; ``None`` if unknown.

    The trainer names a step's tasks ``s<step>-<i>-<task id>`` (:mod:`tirl.trainer.wiring`); that prefix
    is tried off as well. The task returned carries ``task_id`` as its id.
    """
    step = _STEP_PREFIX.match(task_id)
    for candidate in (task_id, step.group(1)) if step else (task_id,):
        found = _find_one(candidate, tasks)
        if found is not None:
            return Task(id=task_id, prompt=found.prompt, kind=found.kind, data=found.data, messages=found.messages)
    return None


def _find_one(task_id: str, tasks: Mapping[str, Task] | None) -> Task | None:
    if tasks and task_id in tasks:
        return tasks[task_id]
    found = _CURRICULUM_ID.match(task_id)
    if found:
        from tirl.envs.tasks.swe_curriculum import pools

        for pool in pools(spec=found.group(2) == ID_PREFIXES[1]).values():
            for task in pool:
                if task.id == found.group(1):
                    return task
        return None
    planted = _PLANTED_ID.match(task_id)
    if planted:
        from tirl.envs.tasks.swe_gen import generate_swe_tasks

        seed, index = int(planted.group(1)), int(planted.group(2))
        if index > 100_000:  # an id from elsewhere: do not generate that many
            return None
        made = generate_swe_tasks(index + 1, seed=seed)[index]
        return made if made.id == task_id else None
    return None


def _tree_entries(root: Path, limit: int = MAX_ENTRIES) -> tuple[dict[str, os.stat_result], bool]:
    """Every non-directory under ``root`` by relative path with its ``lstat``, links never followed (any depth)."""
    found: dict[str, os.stat_result] = {}
    stack = [""]
    seen = 0
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(root / rel if rel else root))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return found, True
            path = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
            else:
                found[path] = st  # a file, a link or a special file: only regular files are ever read
    return found, False


def _read_regular(path: Path) -> bytes | None:
    """The bytes of a regular file at ``path`` (no link followed at the last step), or ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_SOURCE_BYTES + 1)
        return data if len(data) <= MAX_SOURCE_BYTES else None
    finally:
        os.close(fd)


def _own_files(workspace: Path, sources: set[str]) -> tuple[dict[str, bytes | None], list[str]]:
    """The workspace's version of each source path (``None``: gone or not a plain file) and the extra paths."""
    present, truncated = _tree_entries(workspace)
    own: dict[str, bytes | None] = {}
    for rel in sorted(sources):
        st = present.get(rel)
        own[rel] = _read_regular(workspace / rel) if st is not None and stat.S_ISREG(st.st_mode) else None
    extra = sorted(p for p in present if p not in sources)
    if truncated:
        extra.append(f"... (more than {MAX_ENTRIES} entries)")
    return own, extra


def _template_sources(task: Task, cache_dir: Path) -> set[str]:
    """The paths of the task's own files: the template's regular files (a user repository's ``.git`` left out)."""
    template = materialise(task, cache_dir)
    files, _ = _tree_entries(template.repo)
    return {p for p, st in files.items() if stat.S_ISREG(st.st_mode) and not p.startswith(".git/")}


def _write_own(workspace: Path, own: Mapping[str, bytes | None]) -> None:
    """Put the replay's versions of the source files into a fresh workspace (``None``: delete it there)."""
    for rel, data in own.items():
        target = workspace / rel
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


async def rejudge(traj: Trajectory, task: Task, make_env: Callable[[], SweLiteEnv]) -> Rejudgement:
    """Replay ``traj`` on ``task`` and judge the replay and the task's own files (see the module docstring).

    ``make_env`` returns a fresh env per call (two are used). Raises what the env raises for an
    infrastructure failure (:class:`~tirl.envs.base.EnvError`: the sandbox broke).
    """
    recorded = float(traj.reward or 0.0)
    env = make_env()
    try:
        await env.reset(task)
        for message in (m for m in traj.messages if m.role is Role.ASSISTANT):
            result = await env.step(message)
            if result.terminated or result.truncated:
                break
        assert env.workspace is not None
        own, extra = _own_files(env.workspace, _template_sources(task, env.cache_dir))
        replayed = (await env.evaluate()).reward
    finally:
        await env.close()
    shown = tuple(extra[:EXTRA_SHOWN]) + ((f"... {len(extra) - EXTRA_SHOWN} more",) if len(extra) > EXTRA_SHOWN else ())
    if replayed + 1e-9 < recorded:
        return Rejudgement(traj.id, task.id, "not_reproduced", recorded, replayed, None, shown,
                           f"the replay earns {replayed:g}, the record says {recorded:g}")  # fmt: skip
    clean_env = make_env()
    try:
        await clean_env.reset(task)
        assert clean_env.workspace is not None
        _write_own(clean_env.workspace, own)
        clean = (await clean_env.evaluate()).reward
    finally:
        await clean_env.close()
    if clean + 1e-9 < recorded:
        detail = f"the task's own files earn {clean:g}; the replay with the agent's other files earns {replayed:g}"
        return Rejudgement(traj.id, task.id, "outside_sources", recorded, replayed, clean, shown, detail)
    return Rejudgement(traj.id, task.id, "confirmed", recorded, replayed, clean, shown)


async def rejudge_rewarded(
    trajectories: list[Trajectory],
    make_env: Callable[[], SweLiteEnv],
    tasks: Mapping[str, Task] | None = None,
) -> list[Rejudgement]:
    """:func:`rejudge` every trajectory with a reward above 0, one at a time; its task is ``traj.group``.

    A trajectory whose task :func:`find_task` cannot find is ``unresolved`` (listed, nothing run).
    """
    out: list[Rejudgement] = []
    for traj in trajectories:
        recorded = float(traj.reward or 0.0)
        if recorded <= 1e-9:
            continue
        task_id = traj.group or ""
        task = find_task(task_id, tasks)
        if task is None:
            detail = "no task with this id in the built-in generators or the run's task file"
            out.append(Rejudgement(traj.id, task_id, "unresolved", recorded, detail=detail))
        else:
            out.append(await rejudge(traj, task, make_env))
    return out


__all__ = ["MAX_SOURCE_BYTES", "STATUSES", "Rejudgement", "find_task", "rejudge", "rejudge_rewarded"]
