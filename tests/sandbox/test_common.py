"""Output capping and result building, against plain references."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tirl.errors import SetupError
from tirl.sandbox._common import CappedBuffer, build_result, cut_text, memory_exceeded
from tirl.sandbox.bwrap import _python_prefix


@given(st.lists(st.binary(max_size=50), max_size=30), st.integers(1, 40))
def test_capped_buffer_keeps_exactly_the_head_and_tail_of_the_stream(chunks: list[bytes], keep: int) -> None:
    buf = CappedBuffer(keep)
    for c in chunks:
        buf.feed(c)
    whole = b"".join(chunks)
    assert buf.total == len(whole)
    assert buf.head == whole[:keep]
    rest = whole[len(buf.head) :]
    assert bytes(buf.tail) == rest[-keep:]
    assert buf.dropped == (len(whole) > 2 * keep)


@given(st.text(max_size=300), st.integers(64, 200))
def test_cut_text_is_identity_when_short_and_head_marker_tail_when_long(text: str, cap: int) -> None:
    out, cut = cut_text(text, cap)
    if len(text) <= cap:
        assert (out, cut) == (text, False)
    else:
        half = cap // 2
        assert cut and out.startswith(text[:half]) and out.endswith(text[-half:])
        assert f"{len(text) - 2 * half} characters cut" in out


def test_invalid_utf8_becomes_replacement_characters() -> None:
    buf = CappedBuffer(100)
    buf.feed(b"a\xffb")
    text, truncated = buf.text(100)
    assert (text, truncated) == ("a\ufffdb", False)


def test_sigxcpu_counts_as_a_timeout_and_memoryerror_as_memory() -> None:
    empty = CappedBuffer(10)
    assert build_result(empty, empty, -24, timed_out=False, wall_s=1.0, max_chars=100).timed_out
    assert memory_exceeded(1, "Traceback...\nMemoryError\n")
    assert not memory_exceeded(0, "MemoryError")


def test_an_interpreter_prefix_that_would_expose_home_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "python"
    with pytest.raises(SetupError, match="not in a self-contained installation"):
        _python_prefix(str(fake))  # tmp_path has no lib/python3*: not an installation
    assert _python_prefix("/usr/bin/python3") is None


def _random_tree(root: Path, seed: int, outside: Path) -> None:
    """Files, directories, links (one to ``outside``) and odd modes, a few levels deep."""
    import random

    rng = random.Random(seed)
    dirs = [root]
    for i in range(60):
        parent = rng.choice(dirs)
        kind = rng.choice(["file", "dir", "link", "outlink"])
        p = parent / f"e{i}"
        if kind == "file":
            p.write_text("x")
            p.chmod(rng.choice([0o644, 0o777, 0o4755, 0o2775, 0o1666, 0o400]))
        elif kind == "dir":
            p.mkdir()
            dirs.append(p)
        elif kind == "link":
            p.symlink_to("e0")
        else:
            p.symlink_to(outside)
    for d in dirs[1:]:
        d.chmod(rng.choice([0o755, 0o777, 0o2777, 0o1777, 0o700]))


@pytest.mark.parametrize("seed", range(3))
def test_restore_tree_matches_a_reference_walk(tmp_path: Path, seed: int) -> None:
    import os
    import stat

    from tirl.sandbox._tree import restore_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    (outside / "keep").chmod(0o666)  # world-writable: a walk that followed the link would strip it
    outside.chmod(0o777)
    outside_mode = (outside / "keep").stat().st_mode
    root = tmp_path / "root"
    root.mkdir()
    _random_tree(root, seed, outside)
    bad = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH
    expected = {}
    for dirpath, dirnames, filenames in os.walk(root):  # the plain reference (no links followed)
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            expected[os.path.join(dirpath, name)] = st.st_mode if stat.S_ISLNK(st.st_mode) else st.st_mode & ~bad
    restore_tree(str(root), None, strip=True)
    got = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            got[os.path.join(dirpath, name)] = os.lstat(os.path.join(dirpath, name)).st_mode
    assert got == expected
    assert (outside / "keep").stat().st_mode == outside_mode
    assert outside.stat().st_mode & 0o777 == 0o777


DEEP = "d" * 10


def _remove_deep(root: Path) -> None:
    """Independent of the code under test: descend by chdir, remove bottom-up."""
    import os

    here = os.getcwd()
    try:
        os.chdir(root)
        depth = 0
        while os.path.isdir(DEEP):
            os.chdir(DEEP)
            depth += 1
        for _ in range(depth):
            os.chdir("..")
            shutil.rmtree(DEEP)
    finally:
        os.chdir(here)


@pytest.mark.parametrize("seed", range(2))
def test_empty_dir_removes_everything_below_and_follows_no_link(tmp_path: Path, seed: int) -> None:
    from tirl.sandbox._tree import empty_dir

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    root = tmp_path / "root"
    root.mkdir()
    _random_tree(root, seed, outside)
    import os

    fd = os.open(root, os.O_RDONLY)
    for _ in range(1100):  # deeper than the recursion limit, and 12,000 characters (PATH_MAX: 4096)
        os.mkdir(DEEP, dir_fd=fd)
        child = os.open(DEEP, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    try:
        empty_dir(str(root))
        assert list(root.iterdir()) == []
        assert (outside / "keep").read_text() == "k"
    finally:  # pytest's own tmp_path cleanup (shutil.rmtree) cannot remove a tree this deep
        _remove_deep(root)


def test_walk_refuses_more_entries_than_its_budget(tmp_path: Path) -> None:
    from tirl.sandbox._tree import TreeTooLarge, empty_dir

    for i in range(20):
        (tmp_path / f"f{i}").write_text("")
    with pytest.raises(TreeTooLarge):
        empty_dir(str(tmp_path), max_entries=10)
