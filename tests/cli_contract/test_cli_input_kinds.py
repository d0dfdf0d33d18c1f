"""An input path that is no regular file is named for what it is, with the fix — never "file not found".

``tirl review DIR`` and ``tirl diagnose pipeline /dev/stdin`` (standard input a terminal) said "file not found";
``tirl filter -`` said the file does not exist without saying that tirl reads no ``-``. Covered, through the
real CLI on real paths: a directory, a device, a dangling link and ``-`` given to every command that reads a
file, a pipe given to a reader that reads its input twice (``diagnose training``) and to one that reads it once
(``diagnose pipeline``, in a real process), ``/dev/stdin`` on a real pseudo-terminal. Not covered: a socket (it
takes the same branch as a directory) and permissions (the suite runs as root, who may read anything).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli_contract.cli_run import TRAJ, assert_refused, run_cli, trace_row, write_jsonl

TIRL = [sys.executable, "-m", "tirl.cli"]

#: Every command that reads one file, as argv with ``{}`` where the path goes.
READERS = [
    ["review", "{}", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"],
    ["diagnose", "pipeline", "{}"],
    ["diagnose", "training", "{}"],
    ["filter", "{}", "--verdicts", "{out}/v.jsonl"],
    ["audit", "{}"],
    ["compare", "{}"],
    ["sandbox", "exec", "{}"],
    ["config", "show", "--config", "{}"],
]


def _argv(command: list[str], path: str | Path, out: Path) -> list[str]:
    return [a.format(path, out=out) if a.startswith("{") else a for a in command]


@pytest.mark.parametrize("command", [c for c in READERS if c[0] != "compare"], ids=lambda c: " ".join(c[:2]))
def test_a_directory_is_named_a_directory(capsys, tmp_path, command) -> None:
    """(``tirl compare`` reads a run directory: it says the directory has no summary.json.)"""
    given = tmp_path / "somedir"
    given.mkdir()
    got = run_cli(capsys, *_argv(command, given, tmp_path))
    assert_refused(got, str(given), "is a directory")
    assert "not found" not in got.err and "does not exist" not in got.err
    assert not (tmp_path / "v.jsonl").exists()


@pytest.mark.parametrize("command", READERS, ids=lambda c: " ".join(c[:2]))
def test_a_device_a_dangling_link_and_a_dash_say_what_they_are(capsys, tmp_path, command) -> None:
    assert_refused(run_cli(capsys, *_argv(command, "/dev/null", tmp_path)), "/dev/null", "is a device")
    link = tmp_path / "gone.jsonl"
    link.symlink_to(tmp_path / "moved.jsonl")
    assert_refused(run_cli(capsys, *_argv(command, link, tmp_path)), f"is a link to {tmp_path / 'moved.jsonl'}")
    got = run_cli(capsys, *_argv(command, "-", tmp_path))
    assert_refused(got, "-: " if command[0] != "config" else "config file -", "does not read '-' as standard input")


@pytest.mark.parametrize("command", [["filter", "{}", "--verdicts", "{out}/v.jsonl"], ["diagnose", "pipeline", "{}"]])
def test_a_dash_names_dev_stdin_where_a_pipe_is_read(capsys, tmp_path, command) -> None:
    """The CLI's convention: no command reads ``-``; a reader that takes a pipe says to give /dev/stdin."""
    assert_refused(run_cli(capsys, *_argv(command, "-", tmp_path)), "give /dev/stdin to read standard input")


def test_a_pipe_to_a_reader_that_reads_twice_is_named_a_pipe(capsys, tmp_path) -> None:
    """``diagnose training`` sniffs the log's format, then reads it: a FIFO is refused (stat only: no hang)."""
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    assert_refused(run_cli(capsys, "diagnose", "training", fifo), "is a pipe", "save the log to a file first")


def test_a_trace_piped_into_dev_stdin_is_diagnosed(tmp_path) -> None:
    """``diagnose pipeline`` reads its trace once, so a pipe works (an empty one is a trace with no snapshots)."""
    trace = "".join(json.dumps(trace_row(t / 2)) + "\n" for t in range(4))
    got = subprocess.run([*TIRL, "diagnose", "pipeline", "/dev/stdin", "--json"], input=trace, capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert got.returncode == 0 and '"verdict"' in got.stdout, got.stderr
    got = subprocess.run([*TIRL, "diagnose", "pipeline", "/dev/stdin"], input="", capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert got.returncode == 2 and "/dev/stdin: the trace has no snapshots" in got.stderr, got.stderr


@pytest.mark.parametrize("argv", [["diagnose", "pipeline", "/dev/stdin"], ["config", "show", "--config", "/dev/stdin"]])
def test_dev_stdin_on_a_terminal_says_nothing_is_piped_in(tmp_path, argv) -> None:
    """Standard input a terminal: it said "file not found" (pipeline); a config read would wait for typing."""
    leader, follower = os.openpty()
    try:
        got = subprocess.run(
            [*TIRL, *argv], stdin=follower, capture_output=True, text=True, timeout=60, check=False
        )  # the old config reader waited here for typing
    finally:
        os.close(leader)
        os.close(follower)
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 2 and len(lines) == 1, got.stderr
    assert "/dev/stdin" in lines[0] and "is the terminal: nothing is piped into standard input" in lines[0]


def test_a_regular_file_still_reads(capsys, tmp_path) -> None:
    """The checks refuse only what is no file: an ordinary trajectory file is audited as before."""
    got = run_cli(capsys, "audit", write_jsonl(tmp_path / "t.jsonl", [TRAJ]))
    assert got.code == 0, got.err


@pytest.mark.parametrize("argv", [["filter", "/dev/stdin", "--verdicts", "{out}/v.jsonl"], ["audit", "/dev/stdin"]])
def test_dev_stdin_when_standard_input_is_closed_says_so(tmp_path, argv) -> None:
    """``tirl ... /dev/stdin <&-``: it said "/dev/stdin: does not exist"; it is standard input, and it is closed."""
    command = " ".join([*TIRL, *(a.replace("{out}", str(tmp_path)) for a in argv)]) + " <&-"
    got = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, check=False)
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 2 and len(lines) == 1, got.stderr
    assert lines[0].startswith("error: /dev/stdin: is standard input, and this process's standard input is closed")
    assert "does not exist" not in lines[0] and not (tmp_path / "v.jsonl").exists()
