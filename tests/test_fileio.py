"""``tirl.fileio.staged_dir``: a directory output appears whole at its target or not at all.

The swap of an existing target is checked by killing a child process (SIGKILL) at every line of fileio that
the swap runs, once with the atomic exchange and once with the two-rename fallback.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tirl import fileio
from tirl.errors import OutputError
from tirl.fileio import clean_staged, staged_dir


def _tree(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): p.read_text() for p in sorted(directory.rglob("*")) if p.is_file()}


def _fill(directory: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return directory


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Boom(Exception):
    pass


def test_create_onto_a_missing_target(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with staged_dir(target, replace=False) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".out.") and tmp.is_dir()
        assert stat.S_IMODE(tmp.stat().st_mode) == 0o700  # private while it is filled
        _fill(tmp, {"a.txt": "a", "sub/b.txt": "b"})
        assert not target.exists()  # nothing at the target until the block ends
    assert _tree(target) == {"a.txt": "a", "sub/b.txt": "b"}
    assert stat.S_IMODE(target.stat().st_mode) == 0o777 & ~_umask()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_what_is_published_gets_the_users_modes(tmp_path: Path, mask: int) -> None:
    """``tirl model init`` published ``model.safetensors`` as 0600 (safetensors' save_file writes through a private
    temporary file) beside 0644 files: every file now gets ``0o666 & ~umask``, a file its owner may run and
    every directory ``0o777 & ~umask``, whatever the writer left. The real save_file writes here."""
    import tempfile

    import torch
    from safetensors.torch import save_file

    old = os.umask(mask)
    try:
        target = tmp_path / "model"
        with staged_dir(target, replace=False) as tmp:
            save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))
            assert stat.S_IMODE((tmp / "model.safetensors").stat().st_mode) == 0o600  # the writer's own mode
            _fill(tmp, {"config.json": "{}", "run.sh": "true\n"})
            (tmp / "run.sh").chmod(0o700)
            Path(tempfile.mkdtemp(dir=tmp)).rename(tmp / "sub")  # 0700, as mkdtemp makes it
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [target, *target.iterdir()]}
    finally:
        os.umask(old)
    files, runnable = 0o666 & ~mask, 0o777 & ~mask
    assert modes == {"model": runnable, "model.safetensors": files, "config.json": files, "run.sh": runnable,
                     "sub": runnable}  # fmt: skip


def test_create_onto_an_empty_directory(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    with staged_dir(str(target), replace=False) as tmp:
        _fill(tmp, {"a.txt": "new"})
    assert _tree(target) == {"a.txt": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("what", ["non-empty directory", "file"])
def test_create_onto_something_there_is_refused_before_the_block(tmp_path: Path, what: str) -> None:
    target = tmp_path / "out"
    if what == "file":
        target.write_text("mine")
    else:
        _fill(target, {"keep.txt": "mine"})
    ran = False
    with pytest.raises(OutputError, match="exists and is not an empty directory"), staged_dir(target, replace=False):
        ran = True
    assert not ran
    assert target.read_text() == "mine" if what == "file" else _tree(target) == {"keep.txt": "mine"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_swaps_an_existing_directory_whole(tmp_path: Path) -> None:
    target = _fill(tmp_path / "out", {"old.txt": "old", "shared.txt": "old"})
    with staged_dir(target, replace=True) as tmp:
        _fill(tmp, {"shared.txt": "new"})
        assert _tree(target) == {"old.txt": "old", "shared.txt": "old"}  # the old one stays until the block ends
    assert _tree(target) == {"shared.txt": "new"}  # no file of the old directory survives
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # neither the temporary nor the .old one


def test_replace_onto_a_missing_target(tmp_path: Path) -> None:
    with staged_dir(tmp_path / "out", replace=True) as tmp:
        _fill(tmp, {"a.txt": "a"})
    assert _tree(tmp_path / "out") == {"a.txt": "a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("exc", [Boom, KeyboardInterrupt])
def test_an_exception_removes_the_temporary_and_keeps_the_old_target(
    tmp_path: Path, replace: bool, exc: type[BaseException]
) -> None:
    target = tmp_path / "out"
    if replace:
        _fill(target, {"old.txt": "old"})
    else:
        target.mkdir()
    before = _tree(target)
    with pytest.raises(exc), staged_dir(target, replace=replace) as tmp:
        _fill(tmp, {"half.txt": "half"})
        raise exc()
    assert target.is_dir() and _tree(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("replace", [False, True])
def test_every_file_and_directory_is_fsynced_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replace: bool
) -> None:
    """What the rename publishes is on disk: a power cut after it cannot leave empty files under the new name."""
    target = tmp_path / "out"
    if replace:
        _fill(target, {"old.txt": "old"})
    synced: list[str] = []
    at_rename: list[set[str]] = []
    real_fsync, real_rename, real_exchange = os.fsync, os.rename, fileio._exchange

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def rename(src: str | Path, dst: str | Path) -> None:
        at_rename.append(set(synced))
        real_rename(src, dst)

    def exchange(a: Path, b: Path) -> bool:
        at_rename.append(set(synced))
        return real_exchange(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", rename)
    monkeypatch.setattr(fileio, "_exchange", exchange, raising=False)
    with staged_dir(target, replace=replace) as tmp:
        _fill(tmp, {"a.txt": "a", "sub/deeper/b.txt": "b"})
        (tmp / "link").symlink_to("/dev/zero")  # a link is not followed (fsync of /dev/zero would be the tell)
        written = {str(tmp / rel) for rel in ("a.txt", "sub/deeper/b.txt", "sub/deeper", "sub", ".")}
    monkeypatch.undo()
    assert at_rename, "no rename or exchange was seen"
    before = {os.path.normpath(p) for p in at_rename[0]}  # the first rename or exchange puts the new one in place
    assert {os.path.normpath(p) for p in written} <= before
    assert "/dev/zero" not in synced and _tree(target) == {"a.txt": "a", "sub/deeper/b.txt": "b"}


def _no_exchange(a: Path, b: Path) -> bool:
    return False  # a file system that refuses RENAME_EXCHANGE (NFS, some FUSE ones)


@pytest.fixture
def exchange_works(tmp_path: Path) -> None:
    a, b = _fill(tmp_path / ".probe-a", {"f": "a"}), _fill(tmp_path / ".probe-b", {"f": "b"})
    swapped = fileio._exchange(a, b)
    for probe in (a, b):
        _remove_tree(probe)
    if not swapped:
        pytest.skip(f"{tmp_path}'s file system refuses renameat2(RENAME_EXCHANGE)")


def _remove_tree(path: Path) -> None:
    for p in sorted(path.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    path.rmdir()


def test_a_failed_second_rename_puts_the_old_directory_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the system cannot exchange: the swap is two renames, and a failing second one is undone."""
    target = _fill(tmp_path / "out", {"old.txt": "old", "sub/x.txt": "x"})
    real_replace = os.replace
    calls: list[str] = []

    def second_rename_fails(src: str | Path, dst: str | Path) -> None:
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(fileio, "_exchange", _no_exchange, raising=False)
    monkeypatch.setattr(os, "replace", second_rename_fails)
    with pytest.raises(OSError, match="Input/output error"), staged_dir(target, replace=True) as tmp:
        _fill(tmp, {"new.txt": "new"})
    monkeypatch.undo()
    assert len(calls) >= 2  # the failure did hit the second rename
    assert _tree(target) == {"old.txt": "old", "sub/x.txt": "x"}  # the old one is back, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no .out.old.*, no staging directory


def test_a_failed_exchange_leaves_the_old_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange_works: None
) -> None:
    target = _fill(tmp_path / "out", {"old.txt": "old"})

    def exchange_fails(a: Path, b: Path) -> bool:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fileio, "_exchange", exchange_fails)
    with pytest.raises(OSError, match="Input/output error"), staged_dir(target, replace=True) as tmp:
        _fill(tmp, {"new.txt": "new"})
    assert _tree(target) == {"old.txt": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_onto_a_dangling_link_replaces_the_link(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.symlink_to(tmp_path / "nowhere")
    with staged_dir(target, replace=True) as tmp:
        _fill(tmp, {"a.txt": "a"})
    assert not target.is_symlink() and _tree(target) == {"a.txt": "a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# Kills itself (SIGKILL: no handler, no finally) at the N-th line that runs in tirl/fileio.py once the block ends.
_KILLED_CHILD = """
import os, signal, sys
from pathlib import Path
import tirl.fileio as fileio

target, kill_at = Path(sys.argv[1]), int(sys.argv[2])
if sys.argv[3] == "no-exchange":
    fileio._exchange = lambda a, b: False
lines = 0

def trace(frame, event, arg):
    global lines
    if frame.f_code.co_filename != fileio.__file__:
        return None
    if event == "line":
        lines += 1
        if lines == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    return trace

with fileio.staged_dir(target, replace=True) as tmp:
    for i in range(3):
        (tmp / f"new{i}.txt").write_text("new")
    sys.settrace(trace)
sys.settrace(None)
"""
OLD = {"old0.txt": "old", "old1.txt": "old"}
NEW = {f"new{i}.txt": "new" for i in range(3)}


def _kill_at_every_line(tmp_path: Path, mode: str) -> list[tuple[int, Path]]:
    """Run the replace once per line of fileio it executes, killed at that line; (line, run directory) each."""
    script = tmp_path / "child.py"
    script.write_text(_KILLED_CHILD)
    env = {**os.environ, "PYTHONPATH": str(Path(fileio.__file__).parents[1])}
    killed: list[tuple[int, Path]] = []
    for n in range(1, 400):
        parent = tmp_path / f"kill-{n}"
        _fill(parent / "out", OLD)
        proc = subprocess.run([sys.executable, str(script), str(parent / "out"), str(n), mode], env=env, check=False)
        if proc.returncode == 0:  # ran to the end: fewer than n lines
            assert _tree(parent / "out") == NEW and sorted(p.name for p in parent.iterdir()) == ["out"]
            return killed
        assert proc.returncode == -signal.SIGKILL, proc.returncode
        killed.append((n, parent))
    raise AssertionError("the replace never finished")


def test_a_kill_at_any_line_of_the_swap_leaves_the_old_or_the_new_target_whole(
    tmp_path: Path, exchange_works: None
) -> None:
    killed = _kill_at_every_line(tmp_path, "exchange")
    assert len(killed) > 5
    seen = set()
    for n, parent in killed:
        target = parent / "out"
        whole = _tree(target) if target.is_dir() else None
        assert whole in (OLD, NEW), f"killed at line {n}: {sorted(p.name for p in parent.iterdir())}"
        seen.add("old" if whole == OLD else "new")
        assert clean_staged(target) is False
        assert _tree(target) == whole and sorted(p.name for p in parent.iterdir()) == ["out"], n
    assert seen == {"old", "new"}  # the kills fell on both sides of the swap


def test_where_the_system_cannot_exchange_a_kill_between_the_renames_is_repaired(
    tmp_path: Path,
) -> None:
    killed = _kill_at_every_line(tmp_path, "no-exchange")
    missing = 0
    for n, parent in killed:
        target = parent / "out"
        before = _tree(target) if target.is_dir() else None
        if before is None:  # between the two renames: the old one is whole in .out.old.*/out
            missing += 1
            (aside,) = parent.glob(".out.old.*/out")
            assert _tree(aside) == OLD, n
        else:
            assert before in (OLD, NEW), n
        assert clean_staged(target) is (before is None)
        assert _tree(target) == (before or OLD) and sorted(p.name for p in parent.iterdir()) == ["out"], n
    assert missing >= 1  # the kills did hit the window this mode cannot close


def test_clean_staged_touches_only_its_own_leftovers(tmp_path: Path) -> None:
    target = tmp_path / "out"
    _fill(tmp_path / ".out.abc123", {"half.txt": "half"})  # a killed block
    _fill(tmp_path / ".out.old.xyz" / "out", OLD)  # a killed swap's old one
    for other in (".outer.abc", ".out", ".out-x", "out.bak"):
        _fill(tmp_path / other, {"mine.txt": "mine"})
    assert clean_staged(target) is True
    assert _tree(target) == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out", ".out-x", ".outer.abc", "out", "out.bak"]
    _fill(tmp_path / ".out.old.later" / "out", {"older.txt": "x"})
    assert clean_staged(target) is False  # out is there: the set-aside one is removed, not put back
    assert _tree(target) == OLD and not (tmp_path / ".out.old.later").exists()


def test_a_parent_that_takes_no_entry_names_the_target(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "out"
    with (
        pytest.raises(OutputError, match="give a path in a writable directory") as info,
        staged_dir(target, replace=False),
    ):
        pass
    assert str(info.value).startswith(f"{target}: cannot write in {target.parent} (")
    fix = "give --out a writable one"
    with pytest.raises(OutputError, match=f"{fix}$"), staged_dir("/proc/tirl-staged", replace=True, fix=fix):
        pass
