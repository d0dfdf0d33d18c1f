"""``tirl.fileio.staged_dir``: a directory output appears whole at its target or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tirl.errors import OutputError
from tirl.fileio import staged_dir


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


def test_a_crash_between_the_two_renames_leaves_the_old_one_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _fill(tmp_path / "out", {"old.txt": "old"})
    real_replace = os.replace
    calls: list[str] = []

    def second_rename_fails(src: str | Path, dst: str | Path) -> None:
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_rename_fails)
    with pytest.raises(OSError, match="Input/output error"), staged_dir(target, replace=True) as tmp:
        _fill(tmp, {"new.txt": "new"})
    monkeypatch.undo()
    assert not target.exists()  # documented: the swap is two renames, not one
    (old,) = tmp_path.iterdir()
    assert old.name.startswith(".out.old.") and _tree(old) == {"out/old.txt": "old"}


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
