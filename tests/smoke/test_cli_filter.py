"""`tirl filter` as a user runs it: real files, real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TIRL = [sys.executable, "-m", "tirl.cli"]

LINES = [
    {
        "id": "ok",
        "answer": "42",
        "messages": [
            {"role": "user", "content": "6*7?"},
            {"role": "assistant", "content": "```python\nprint(6*7)\n```"},
            {"role": "tool", "content": "42"},
            {"role": "assistant", "content": "\\boxed{42}"},
        ],
    },
    {
        "id": "void-correct",
        "answer": "42",
        "messages": [
            {"role": "assistant", "content": "Let me double-check."},
            {"role": "assistant", "content": "<answer>42</answer>"},
        ],
    },
    {
        "id": "tool-void",
        "messages": [
            {"role": "tool", "content": "```python\nprint(1)\n```"},
            {"role": "assistant", "content": "```output\n1\n```"},
        ],
    },
]


def write(path: Path, lines: list[object]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TIRL, *args], capture_output=True, text=True, timeout=60)


def test_filter_writes_verdicts_kept_and_audit(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    write(src, LINES)
    out, kept = tmp_path / "v.jsonl", tmp_path / "k.jsonl"
    res = run("filter", str(src), "--verdicts", str(out), "--kept", str(kept))
    assert res.returncode == 0, res.stderr
    verdicts = [json.loads(x) for x in out.read_text().splitlines()]
    assert verdicts == [
        {"id": "ok", "void": False, "void_turns": []},
        {"id": "void-correct", "void": True, "void_turns": [0]},
        {"id": "tool-void", "void": True, "void_turns": [0]},
    ]
    assert [json.loads(x) for x in kept.read_text().splitlines()] == [LINES[0]]
    assert "3 trajectories: 1 valid, 2 void" in res.stdout
    assert "1 of 2 void trajectories still ended with the correct answer" in res.stdout
    assert "void-correct" in res.stdout


def test_filter_json_summary_and_exec_langs_flag(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    write(src, LINES)
    res = run("filter", str(src), "--verdicts", str(tmp_path / "v.jsonl"), "--exec-langs", "bash", "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["void"] == 3  # python is no longer executable
    assert summary["void_but_correct_ids"] == ["ok", "void-correct"]


def test_filter_config_file_sets_languages(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    write(src, LINES)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[filter]\nexec_langs = ["output"]\n')
    res = run("filter", str(src), "--verdicts", str(tmp_path / "v.jsonl"), "--config", str(cfg), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["void"] == 2  # the ```output turn now counts as code


def test_bad_json_line_names_file_and_line_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(LINES[0]) + "\n{not json\n")
    out = tmp_path / "v.jsonl"
    res = run("filter", str(src), "--verdicts", str(out), "--kept", str(tmp_path / "k.jsonl"))
    assert res.returncode == 2
    assert f"{src}:2: not valid JSON" in res.stderr
    assert "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_missing_messages_names_line(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    write(src, [LINES[0], {"id": "x"}])
    res = run("filter", str(src), "--verdicts", str(tmp_path / "v.jsonl"))
    assert res.returncode == 2
    assert f"{src}:2: missing the required field 'messages'" in res.stderr
    assert not (tmp_path / "v.jsonl").exists()


def test_unknown_config_key_is_a_clear_error(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    write(src, LINES)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[filter]\nexec_lang = ['python']\n")
    res = run("filter", str(src), "--verdicts", str(tmp_path / "v.jsonl"), "--config", str(cfg))
    assert res.returncode == 2
    assert "unknown config key 'filter.exec_lang'" in res.stderr and "exec_langs" in res.stderr


def _big_input(path: Path, n: int = 600, bad_at: int | None = None) -> Path:
    """``n`` trajectories (both verdicts, ids absent on some), optionally a bad line at ``bad_at`` (1-based)."""
    lines = []
    for i in range(n):
        row: dict[str, object] = dict(LINES[i % len(LINES)])
        if i % 7:
            row["id"] = f"r{i}"
        else:
            row.pop("id")
        lines.append(json.dumps(row, ensure_ascii=i % 2 == 0))
    if bad_at is not None:
        lines[bad_at - 1] = '{"messages": [{"role": "robot", "content": "x"}]}'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_workers_write_the_same_files_as_one_process(tmp_path: Path) -> None:
    from tirl.filters.stream import reference_part
    from tirl.parsing import DEFAULT_RULES

    src = _big_input(tmp_path / "in.jsonl")
    outputs = []
    for workers in ("1", "3"):
        v, k = tmp_path / f"v{workers}", tmp_path / f"k{workers}"
        res = run("filter", str(src), "--verdicts", str(v), "--kept", str(k), "--workers", workers, "--json")
        assert res.returncode == 0, res.stderr
        outputs.append((v.read_bytes(), k.read_bytes(), json.loads(res.stdout)))
    assert outputs[0] == outputs[1]
    ref = reference_part(src, DEFAULT_RULES, keep=True)
    assert outputs[0][0] == "".join(ref.verdicts).encode()
    assert outputs[0][1] == b"".join(x for x in ref.kept if isinstance(x, bytes))
    assert b'"id": "line-1"' in outputs[0][0] and outputs[0][2]["void"] == ref.void > 0


def test_a_bad_line_in_a_later_worker_range_writes_nothing(tmp_path: Path) -> None:
    src = _big_input(tmp_path / "in.jsonl", bad_at=500)
    out = tmp_path / "v.jsonl"
    out.write_text("keep me\n")
    res = run("filter", str(src), "--verdicts", str(out), "--kept", str(tmp_path / "k.jsonl"), "--workers", "3")
    assert res.returncode == 2
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {src}:500: message") and "robot" in lines[0], res.stderr
    assert out.read_text() == "keep me\n" and not (tmp_path / "k.jsonl").exists()


def test_workers_out_of_range_is_one_error_line(tmp_path: Path) -> None:
    src = _big_input(tmp_path / "in.jsonl", n=3)
    res = run("filter", str(src), "--verdicts", str(tmp_path / "v.jsonl"), "--workers", "0")
    assert res.returncode == 2 and res.stderr.startswith("error: ") and "--workers" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "v.jsonl").exists()


def test_input_from_a_pipe_matches_the_file(tmp_path: Path) -> None:
    src = _big_input(tmp_path / "in.jsonl", n=50)
    from_file = run("filter", str(src), "--verdicts", str(tmp_path / "v1"), "--kept", str(tmp_path / "k1"))
    piped = subprocess.run(
        [*TIRL, "filter", "/dev/stdin", "--verdicts", str(tmp_path / "v2"), "--kept", str(tmp_path / "k2")],
        input=src.read_bytes(),
        capture_output=True,
        timeout=60,
    )
    assert from_file.returncode == 0 and piped.returncode == 0, piped.stderr
    assert (tmp_path / "v1").read_bytes() == (tmp_path / "v2").read_bytes()
    assert (tmp_path / "k1").read_bytes() == (tmp_path / "k2").read_bytes()


def test_a_file_without_void_trajectories_gives_no_rate_of_nothing(tmp_path: Path) -> None:
    """One valid trajectory (with or without a --config holding no [filter]) printed "0 of 0 void trajectories
    still ended with the correct answer (0.0%)": a rate of no trajectory. The counts are the file's."""
    src = tmp_path / "in.jsonl"
    write(src, LINES[:1])
    config = tmp_path / "f.toml"
    config.write_text('[env]\nname = "tir-math"\n', encoding="utf-8")
    for extra in ([], ["--config", str(config)]):
        res = run("filter", str(src), "--verdicts", str(tmp_path / "v.jsonl"), *extra)
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines()[0] == "1 trajectory: 1 valid, 0 void (void ratio 0.0%)"  # was "1 trajectories"
        assert "audit: no trajectory is void, so none could still end with the correct answer" in res.stdout
        assert "0 of 0" not in res.stdout


def test_json_has_no_rate_of_nothing(tmp_path: Path) -> None:
    """--json said "void_but_correct_rate": 0.0 for a file with no void trajectory: a rate over none is null."""
    src = tmp_path / "in.jsonl"
    write(src, LINES[:1])
    res = run("filter", str(src), "--verdicts", str(tmp_path / "v.jsonl"), "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["void"] == 0 and summary["void_but_correct"] == 0
    assert summary["void_but_correct_rate"] is None
