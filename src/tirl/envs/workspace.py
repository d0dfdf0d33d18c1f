"""Isolated per-episode workspaces copied from cached templates (the swe-lite Initializer work).

A *template* is a read-only directory: for a generated task it is written
once into the cache (``<cache>/<content hash>/repo`` and ``.../hidden``,
atomically, so concurrent episodes of the same task share one copy); for a
task loaded from JSONL it is the user's repository itself (never written
to). A *workspace* is a fresh copy of the template under ``work_root``,
owned by one episode and deleted by :meth:`Workspace.remove`.

The copy uses ``shutil.copytree`` (symlinks kept as links). Its time is
returned so the env can record it (``info["copy_s"]``).

Limits: when tirl runs as root, a workspace is its own tmpfs (``size=``
``disk_mb``, ``nr_inodes=`` ``inodes``, ``nosuid``, ``nodev``) mounted on
the host for the episode and unmounted by :meth:`Workspace.remove`, so the
agent's commands cannot write more than that in bytes or files. Without root
(or where the kernel refuses the mount) the workspace is a plain directory:
only the sandbox's per-file size limit applies, not the total size or the
number of files. Removal and the hand-back of ownership walk the tree
without recursion (:mod:`tirl.sandbox._tree`), so no tree depth breaks them.

Not covered: huge repositories (no copy-on-write or overlay file systems are
used; a ``.git`` directory is copied like any other; as root a repository
larger than the cap cannot be provisioned); a workspace kept with
``keep_workspace`` stays mounted until someone unmounts it.

A crash of the tirl process (``kill -9``) leaves its open workspaces behind (as root, mounted tmpfs holding
the agent's files in memory). Each workspace's directory names its writer (``tirl-swe-w<pid>-<host>-XXXX``;
``<host>`` hashes the machine's name and pid namespace, :func:`tirl.fileio.host_tag`), and the first
:func:`provision` of a process under a ``work_root`` removes (and unmounts) the ones there whose writer is
provably dead: the same host part and no process with that pid (:func:`sweep_dead_workspaces`). Not covered:
workspaces named before this rule (``tirl-swe-XXXX``), and two machines with the same host name and pid
namespace sharing one ``work_root``.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tirl.envs.base import EnvError, Task
from tirl.fileio import host_tag, process_alive
from tirl.sandbox._tree import empty_dir

DISK_MB = 64
INODES = 16384
_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2


def default_cache_dir() -> Path:
    """``$TIRL_CACHE_DIR/swe-lite`` or ``~/.cache/tirl/swe-lite``."""
    root = os.environ.get("TIRL_CACHE_DIR")
    return Path(root) / "swe-lite" if root else Path.home() / ".cache" / "tirl" / "swe-lite"


@dataclass(frozen=True, slots=True)
class Template:
    """Where a task's repository and hidden tests live (``hidden`` may be None)."""

    repo: Path
    hidden: Path | None
    cached: bool  # True when this call found it already materialised (or it is a user path)


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Write generated task files (relative path -> text) under ``root``; ValueError for a path that escapes it."""
    for rel, text in files.items():
        target = (root / rel).resolve()
        if root.resolve() not in target.parents:
            raise ValueError(f"task file path {rel!r} escapes the repository")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def materialise(task: Task, cache_dir: Path) -> Template:
    """The template of ``task``: a user repository as is, or generated files written once to the cache."""
    if "repo" in task.data:
        hidden = task.data.get("hidden_tests")
        return Template(Path(task.data["repo"]), Path(hidden) if isinstance(hidden, str) else None, True)
    files = task.data.get("files")
    hidden_files = task.data.get("hidden_tests") or {}
    if not isinstance(files, dict) or not isinstance(hidden_files, dict):
        raise ValueError(f"swe-lite task {task.id!r} has neither data['repo'] nor data['files']")
    key = hashlib.sha256(json.dumps([files, hidden_files], sort_keys=True).encode()).hexdigest()[:20]
    final = cache_dir / key
    if not (final / "done").exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache_dir / f".{key}.{uuid.uuid4().hex}"
        write_tree(tmp / "repo", files)
        write_tree(tmp / "hidden", hidden_files)
        (tmp / "done").write_text("", encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:  # another episode won the race; its copy is identical
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            return Template(final / "repo", final / "hidden", False)
    return Template(final / "repo", final / "hidden", True)


@dataclass(slots=True)
class Workspace:
    """One episode's writable copy of a template (``mounted``: it is its own capped tmpfs)."""

    path: Path
    copy_s: float
    mounted: bool = False

    def remove(self) -> None:
        """Delete the workspace, whatever the agent left in it (idempotent)."""
        if self.mounted:
            _umount(self.path)
            self.mounted = False
        clear_path(self.path)


def clear_path(path: Path) -> None:
    """Remove whatever is at ``path``; nothing there is fine.

    A link or file is unlinked (never followed), a directory emptied at any depth and removed.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        empty_dir(str(path))
        os.rmdir(path)
    else:
        os.unlink(path)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(path: Path, disk_mb: int, inodes: int) -> bool:
    """Mount a capped tmpfs on ``path`` (root only); False when not root or the kernel refuses."""
    if os.geteuid() != 0:
        return False
    opts = f"size={disk_mb * 1024 * 1024},nr_inodes={inodes},mode=0755".encode()
    flags = _MS_NOSUID | _MS_NODEV
    return _libc().mount(b"tirl-workspace", os.fsencode(path), b"tmpfs", flags, opts) == 0


def _umount(path: Path) -> None:
    _libc().umount2(os.fsencode(path), _MNT_DETACH)


def provision(
    template: Template, work_root: Path | None = None, *, disk_mb: int = DISK_MB, inodes: int = INODES
) -> Workspace:
    """Copy ``template.repo`` into a fresh directory under ``work_root`` (default: the system temp dir).

    As root the directory is a tmpfs capped at ``disk_mb`` and ``inodes`` (see the module docstring).
    """
    root = Path(work_root) if work_root is not None else Path(tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and not _traversable(root):
        raise EnvError(
            f"work_root {root} is not reachable by other users, but the sandbox runs code as an unprivileged "
            "uid when tirl runs as root — use a directory whose parents are all world-executable, e.g. /tmp"
        )
    if root.resolve() not in _SWEPT:
        _SWEPT.add(root.resolve())
        sweep_dead_workspaces(root)
    parent = Path(tempfile.mkdtemp(prefix=f"tirl-swe-w{os.getpid()}-{host_tag()}-", dir=root))
    os.chmod(parent, 0o711)  # the sandbox may run as another uid: it must be able to reach repo/
    path = parent / "repo"
    path.mkdir()
    ws = Workspace(path=path, copy_s=0.0, mounted=_mount_tmpfs(path, disk_mb, inodes))
    start = time.perf_counter()
    try:
        shutil.copytree(template.repo, path, symlinks=True, dirs_exist_ok=True)
    except BaseException as exc:
        ws.remove()
        shutil.rmtree(parent, ignore_errors=True)
        if isinstance(exc, OSError) and (exc.errno == errno.ENOSPC or "[Errno 28]" in str(exc)):
            raise EnvError(
                f"repository {template.repo} does not fit in a workspace of {disk_mb} MB and {inodes} files; "
                "raise the workspace caps"
            ) from exc
        raise
    os.chmod(path, 0o755)
    ws.copy_s = time.perf_counter() - start
    return ws


_OWNED = re.compile(r"tirl-swe-w(?P<pid>[1-9][0-9]{0,8})-(?P<host>[0-9a-f]{8})-[a-z0-9_]{8}")
_SWEPT: set[Path] = set()  # the work roots this process has swept (once each)


def sweep_dead_workspaces(root: Path) -> list[Path]:
    """Remove the workspaces under ``root`` whose writer died without removing them; the paths removed.

    Only directories named ``tirl-swe-w<pid>-<host>-XXXXXXXX`` with this machine's host part and no process
    ``pid`` are judged (module docstring); a mounted workspace is unmounted first. Best effort: an entry that
    cannot be removed is left as it is.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        match = _OWNED.fullmatch(entry.name)
        if match is None or match["host"] != host_tag() or process_alive(int(match["pid"])):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            repo = Path(entry.path) / "repo"
            if os.path.ismount(repo):
                _umount(repo)
            clear_path(Path(entry.path))
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def unmount_under(root: Path) -> None:
    """Unmount every workspace tmpfs directly under ``root`` (``root/*/repo``); nothing mounted is fine.

    For clean-ups of envs that were never closed (a test that failed before its ``close``).
    """
    for repo in root.glob("*/repo"):
        if os.path.ismount(repo):
            _umount(repo)


def _traversable(path: Path) -> bool:
    """Whether any user can reach ``path`` (every directory on the way is world-executable)."""
    for p in (path.resolve(), *path.resolve().parents):
        try:
            if not os.stat(p).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


# pytest and its pure-Python dependencies (the back-ports only where this Python has them installed); the judge
# imports nothing else from site-packages, and stubs pygments (colour only).
PYTEST_MODULES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py.py", "exceptiongroup", "tomli")


def pytest_bundle(cache_dir: Path) -> Path:
    """A zip of this interpreter's pytest (and its pure-Python dependencies), built once into the cache.

    The sandbox's interpreter has no site-packages of ours (bubblewrap hides
    the project's virtual environment), so the evaluator copies this zip into
    the workspace and puts it on ``sys.path``. Sources and ``.pyc`` files
    (unchecked-hash, for this Python version) are both stored: another
    Python version ignores the ``.pyc`` and compiles the sources.
    """
    import importlib.util
    import marshal

    import pytest

    site = Path(pytest.__file__).resolve().parent.parent
    version = f"{pytest.__version__}-{importlib.util.MAGIC_NUMBER.hex()}"
    target = cache_dir / f"pytest-{version}.zip"
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".pytest-{uuid.uuid4().hex}.zip"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zf:
        for name in PYTEST_MODULES:
            src = site / name
            if not src.exists():
                continue
            files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
            for f in files:
                if "__pycache__" in f.parts:
                    continue
                rel = f.relative_to(site).as_posix()
                zf.write(f, rel)
                if f.suffix == ".py":
                    source = f.read_bytes()
                    code = compile(source, rel, "exec", dont_inherit=True)
                    header = importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little")
                    zf.writestr(rel[:-3] + ".pyc", header + importlib.util.source_hash(source) + marshal.dumps(code))
    os.replace(tmp, target)
    return target
