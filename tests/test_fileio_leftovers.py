"""A killed tirl's hidden leftovers beside an output are removed by the next write of that output, and only they.

Every test kills a real child process (SIGKILL: no handler, no ``finally``) in the middle of a write, then writes
the same output again in this process. Before, nothing removed the hidden ``.OUT.XXXXXXXX`` entries (their names
did not say whose they were, so removing them could have deleted a user's files) and, where the file system
cannot exchange, a kill between the two renames left ``OUT`` missing until a checkpoint-only clean ran.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tirl import fileio
from tirl.errors import OutputError
from tirl.fileio import staged_dir, write_text

_CHILD = """
import os, signal, sys
from pathlib import Path
import tirl.fileio as fileio

target, how = Path(sys.argv[1]), sys.argv[2]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
if how == "dir":  # killed while the block fills the staging directory
    with fileio.staged_dir(target, replace=True) as tmp:
        (tmp / "half.txt").write_text("half")
        die()
elif how == "file":  # killed while the block writes the temporary file
    with fileio.atomic_write(target) as fh:
        fh.write("half")
        fh.flush()
        die()
elif how == "between-renames":  # no exchange: killed after the old one moved aside, before the new one moved in
    fileio._exchange = lambda a, b: False
    rename = os.replace
    def replace(src, dst):
        if Path(dst) == target:  # the second rename (the first moves the old one aside)
            die()
        return rename(src, dst)
    os.replace = replace
    with fileio.staged_dir(target, replace=True) as tmp:
        (tmp / "new.txt").write_text("new")
"""


def _killed(tmp_path: Path, target: Path, how: str) -> tuple[int, list[Path]]:
    """Run the child on ``target`` until it kills itself; its pid and the hidden entries it left."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    before = set(target.parent.iterdir())
    env = {**os.environ, "PYTHONPATH": str(Path(fileio.__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, str(script), str(target), how], env=env)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    left = sorted(set(target.parent.iterdir()) - before)
    assert left and all(p.name.startswith(f".{target.name}.") for p in left), left
    return proc.pid, left


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("note: ")]


def test_a_killed_staged_dir_is_removed_by_the_next_write_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    pid, (left,) = _killed(tmp_path, out, "dir")
    assert (left / "half.txt").read_text() == "half" and left.name.startswith(f".out.w{pid}-")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tag = left.name.split(".")[2].split("-")[1]
        running = tmp_path / f".out.w{sleeper.pid}-{tag}.abcd1234"  # a writer still running: never removed
        elsewhere = tmp_path / ".out.w4242-00000000.abcd1234"  # another machine's: its pid means nothing here
        users = [tmp_path / n for n in (".out.bak", ".out.abcd1234", ".outer.abcd1234", "out.tmp")]
        for path in [running, elsewhere, *users]:
            path.mkdir()
            (path / "mine.txt").write_text("mine")
        capsys.readouterr()
        with staged_dir(out, replace=True) as tmp:
            (tmp / "new.txt").write_text("new")
        notes = _notes(capsys.readouterr().err)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not left.exists() and [p.name for p in out.iterdir()] == ["new.txt"]
    assert all((p / "mine.txt").read_text() == "mine" for p in [running, elsewhere, *users])
    assert f"note: removed {left}: left by tirl process {pid}, killed while writing {out}" in notes
    assert any(n.startswith(f"note: left {running}: process {sleeper.pid} is running; ") for n in notes)
    assert any(n.startswith(f"note: left {elsewhere}: it was written on another machine") for n in notes)
    assert len(notes) == 3  # a user's entries are not named


def test_a_killed_atomic_write_leaves_a_temporary_file_the_next_write_removes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "v.jsonl"
    out.write_text("old\n")
    pid, (left,) = _killed(tmp_path, out, "file")
    assert left.read_text() == "half" and left.name.endswith(".tmp")
    other = tmp_path / "w.jsonl"
    pid_other, (other_left,) = _killed(tmp_path, other, "file")  # another output's leftover: not this write's
    capsys.readouterr()
    write_text(out, "new\n")
    assert out.read_text() == "new\n" and not left.exists() and other_left.exists()
    assert _notes(capsys.readouterr().err) == [f"note: removed {left}: left by tirl process {pid}, killed while "
                                               f"writing {out}"]  # fmt: skip
    assert pid_other != pid


def test_an_output_set_aside_by_a_killed_swap_is_put_back_by_the_next_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where the file system cannot exchange, a kill between the renames leaves no OUT: the next write restores it."""
    out = tmp_path / "model"
    out.mkdir()
    (out / "old.txt").write_text("old")
    pid, left = _killed(tmp_path, out, "between-renames")
    assert not out.exists() and any((p / "model" / "old.txt").is_file() for p in left)
    capsys.readouterr()
    refused = pytest.raises(OutputError, match="exists and is not an empty directory")  # create-only: it is back
    with refused, staged_dir(out, replace=False):
        pass
    notes = _notes(capsys.readouterr().err)
    assert [p.name for p in out.iterdir()] == ["old.txt"] and sorted(tmp_path.iterdir()) == [tmp_path / "child.py", out]
    aside = next(p for p in left if ".old." in p.name)
    assert f"note: put back {out} from {aside}: tirl process {pid} was killed after moving it aside" in notes


@pytest.mark.slow
def test_tirl_model_init_killed_mid_write_is_cleaned_by_the_next_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command a user reruns after a kill: its note names what it removed, and the model is written."""
    from tirl.cli import main

    out = tmp_path / "m"
    env = {**os.environ, "PYTHONPATH": str(Path(fileio.__file__).parents[1])}
    code = "import sys; from tirl.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "model", "init", "--arch", "qwen2", "--out", str(out)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while not any(p.iterdir() for p in tmp_path.glob(".m.*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the staging directory holds a file
    proc.kill()
    assert proc.wait() == -signal.SIGKILL
    (left,) = tmp_path.glob(".m.*")
    capsys.readouterr()
    assert main(["model", "init", "--arch", "qwen2", "--out", str(out)]) == 0
    note = f"note: removed {left}: left by tirl process {proc.pid}, killed while writing {out}"
    assert note in _notes(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"] and (out / "config.json").is_file()
