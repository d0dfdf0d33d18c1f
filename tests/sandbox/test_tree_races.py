"""The tree walker (``tirl.sandbox._tree``) against an entry swapped for a link between its lstat and its chmod.

The host runs :func:`~tirl.sandbox._tree.restore_tree` (handing a workspace back, as root) and
:func:`~tirl.sandbox._tree.empty_dir` (removing a workspace) on trees the sandboxed code built. Each
entry is lstat-ed, then changed by name: a process of the run still alive at that moment could put a
link to a host file in its place, and a chmod by name would change the host file. These tests make
that swap happen deterministically, at the worst moment (right after the walker's lstat), instead of
racing a real process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tirl.sandbox import _tree


class _SwappingEntry:
    """A ``DirEntry`` whose ``stat`` returns the real lstat, then replaces the entry with a link to ``target``."""

    def __init__(self, entry: os.DirEntry[str], dir_path: Path, target: Path) -> None:
        self._entry, self._path, self._target = entry, dir_path / entry.name, target
        self.name = entry.name

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        st = self._entry.stat(follow_symlinks=follow_symlinks)
        if self._path.is_dir() and not self._path.is_symlink():
            os.rename(self._path, self._path.with_name(self.name + ".moved"))
        else:
            self._path.unlink()
        self._path.symlink_to(self._target)
        return st


def _swap_on_scan(monkeypatch: pytest.MonkeyPatch, dir_path: Path, name: str, target: Path) -> None:
    real = os.scandir

    def scandir(fd: Any) -> Iterator[Any]:
        entries = list(real(fd))
        if isinstance(fd, int) and os.path.samefile(f"/proc/self/fd/{fd}", dir_path):
            return iter([_SwappingEntry(e, dir_path, target) if e.name == name else e for e in entries])
        return iter(entries)

    monkeypatch.setattr(_tree.os, "scandir", scandir)


def test_restore_tree_never_chmods_through_a_link_swapped_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "host_secret"
    victim.write_text("secret")
    victim.chmod(0o600)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("x")
    (root / "f").chmod(0o4644)  # set-uid: the hand-back strips it, with the mode the run chose
    _swap_on_scan(monkeypatch, root, "f", victim)
    _tree.restore_tree(str(root), None, strip=True)
    assert victim.stat().st_mode & 0o7777 == 0o600, "the host file's mode was changed through the link"


def test_empty_dir_never_chmods_through_a_link_swapped_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "host_dir"
    victim.mkdir()
    victim.chmod(0o711)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "d").mkdir()
    (root / "d").chmod(0o500)  # not 0o700: the walker opens it up before it descends
    _swap_on_scan(monkeypatch, root, "d", victim)
    with pytest.raises(OSError):  # the link is not a directory to descend into: the walk stops, unfollowed
        _tree.empty_dir(str(root))
    assert victim.stat().st_mode & 0o7777 == 0o711, "the host directory's mode was changed through the link"


def test_chmod_of_an_unreadable_directory_still_works(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    (root / "a" / "b").chmod(0)
    (root / "a").chmod(0)
    _tree.empty_dir(str(root))
    assert list(root.iterdir()) == []
