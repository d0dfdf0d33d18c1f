"""Text from a file shown on the terminal is shown, never obeyed: no escape sequence, no rich markup.

A shared run's trajectory ids, an evaluation's model name or a path with ``[/x]`` in it reached the terminal
raw: ``ESC ] 52`` (write the clipboard), ``ESC ] 0`` (window title), ``ESC [ 2J`` (clear the screen) went
through, and rich read ``[/x]`` as a closing tag (a ``MarkupError`` traceback). The reviewer's answer is in
``tests/diagnostics/test_review.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import TRAJ, metrics_row, run_cli, write_jsonl

from tirl.errors import one_line, printable

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # sets the clipboard to "rm -rf ~"
HOSTILE = f"evil{OSC52}\x1b]0;title\x07\x1b[2J\x9b31m\u202eexe.txt"


def _obeyable(text: str) -> list[str]:
    return [ch for ch in text if (ch < " " and ch not in "\n\t") or "\x7f" <= ch <= "\x9f" or ch == "\u202e"]


def test_printable_and_one_line_escape_every_control() -> None:
    assert printable(HOSTILE) == "evil\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b]0;title\\x07\\x1b[2J\\x9b31m\\u202eexe.txt"
    assert printable("two\nlines\tand a tab") == "two\nlines\tand a tab"
    assert one_line("a\nb\x9bc") == "a\\nb\\x9bc"  # C1's CSI too, which one_line let through


def test_audit_shows_hostile_ids_as_text(capsys, tmp_path: Path) -> None:
    void = [*TRAJ["messages"][:1], {"role": "assistant", "content": "hmm"}]  # a void turn: its id is an example
    rows = [{**TRAJ, "id": "[/x]", "messages": void}, {**TRAJ, "id": HOSTILE, "messages": void}]
    got = run_cli(capsys, "audit", write_jsonl(tmp_path / "t.jsonl", rows))
    assert got.code == 0, got.err
    assert not _obeyable(got.out)
    assert "[/x]" in got.out and "evil\\x1b]52;c;" in got.out


@pytest.mark.parametrize("command", ["audit", "diagnose training"])
def test_a_path_that_reads_as_markup_is_printed_as_it_is(capsys, tmp_path: Path, command: str) -> None:
    (tmp_path / "runs[").mkdir()
    path = tmp_path / "runs[" / "x]"  # printed as ".../runs[/x]": a closing tag to rich
    if command == "audit":
        write_jsonl(path, [TRAJ])
    else:
        write_jsonl(path, [metrics_row(s) for s in range(1, 4)])
    got = run_cli(capsys, *command.split(), path)
    assert got.code == 0 and "Traceback" not in got.err, got.err
    assert f"{tmp_path}/runs[/x]" in got.out.replace("\n", "")


def test_compare_shows_a_hostile_model_name_as_text(capsys, tmp_path: Path) -> None:
    tasks = [{"id": f"t{i}", "correct": i % 2 == 0, "termination": "answered", "turns": 1} for i in range(4)]
    first = tmp_path / "a.json"
    first.write_text(json.dumps({"model": HOSTILE, "decoding": "greedy", "tasks": tasks}), encoding="utf-8")
    second = tmp_path / "b.json"
    second.write_text(json.dumps({"model": "m", "decoding": HOSTILE, "tasks": tasks}), encoding="utf-8")
    got = run_cli(capsys, "compare", first, second)
    assert got.code == 0, got.err
    assert not _obeyable(got.out) and not _obeyable(got.err)
    assert "model evil\\x1b]52;c;" in got.out
