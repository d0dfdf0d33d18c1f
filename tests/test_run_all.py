"""benchmarks/run_all.py: the load gate, the repeats, the page's structure, and its one-line errors.

The runs are real: each benchmark is a real subprocess (``bench_async`` and
``bench_pipeline --virtual`` at their smallest sizes, about a second each).
Only the load average is stubbed (``--loadavg-file``), because a test cannot
choose the machine's load; the gate's reading of ``/proc/loadavg`` itself is
covered by the default path in :func:`test_the_real_loadavg_is_read`. Not
covered: the other benchmarks' figure readers against real output (their runs
take minutes; ``run_all.py --quick`` runs them all).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "run_all.py"
CHEAP = ["--quick", "--only", "async", "--only", "pipeline"]


def load(tmp: Path, value: float) -> Path:
    path = tmp / "loadavg"
    path.write_text(f"{value:.2f} 0.50 0.40 1/200 12345\n")
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=240, check=False
    )


def module() -> ModuleType:
    return load_benchmark("run_all")


def test_quick_run_writes_one_table_per_benchmark_with_ranges_runs_and_a_plot(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "results.md"
    proc = run(*CHEAP, "--repeats", "3", "--out", str(out), "--loadavg-file", str(load(tmp_path, 0.1)))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert re.search(r"commit `[0-9a-f]{7,}(\+dirty)?`", text)
    assert re.search(r"Machine: \d+ cores \(\d+ usable\), .+; CPython 3\.\d+\.\d+; torch \S+\.", text)
    assert "Quick mode" in text and "not results" in text
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert [s.splitlines()[0] for s in sections] == ["pipeline", "async"]
    for sec in sections:
        assert re.search(r"Command \(each run\): `python benchmarks/bench_\w+\.py --json [^`]*`", sec)
        figures = [r for r in sec.splitlines() if r.startswith("| ") and r.endswith(" of 3 |")]
        assert figures, sec
        measured = [r for r in figures if "| 3 of 3 |" in r]
        assert measured, "no figure was read from the benchmark's JSON"
        for row in measured:  # | name | **median** | lo – hi or one value | target | 3 of 3 |
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert cells[1].startswith("**") and re.search(r"\d", cells[2]), row
        runs = re.findall(
            r"^\| (\d) \| \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| 0\.10 → 0\.10 \| [\d.]+ \| quiet \|$", sec, re.M
        )
        assert runs == ["1", "2", "3"]
    async_sec = sections[1]
    assert (
        "| shared device: async ÷ sync (steps/s) | **" in async_sec and "![async](img/results_async.png)" in async_sec
    )
    assert (out.parent / "img" / "results_async.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert "| heavy-tail: peak live environments, pipeline | **" in sections[0]
    assert "![pipeline](img/results_pipeline.png)" in sections[0]
    assert (out.parent / "img" / "results_pipeline.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_load_above_the_gate_is_refused_and_the_old_page_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    out.write_text("the old page\n")
    proc = run(*CHEAP, "--out", str(out), "--wait-s", "0", "--loadavg-file", str(load(tmp_path, 9.0)))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the 1-minute load average is 9.00 before pipeline run 1")
    assert "--max-load 0.5" in lines[0] and "--allow-noisy" in lines[0]
    assert out.read_text() == "the old page\n"
    assert not (tmp_path / "img").exists()


def test_allow_noisy_runs_and_marks_every_run(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    proc = run(*CHEAP, "--repeats", "1", "--out", str(out), "--wait-s", "0", "--allow-noisy",
               "--loadavg-file", str(load(tmp_path, 9.0)))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "2 run(s) started above it (`--allow-noisy`) and are marked **noisy**" in text
    assert text.count("| **noisy** |") == 2 and "| quiet |" not in text


def test_the_gate_waits_for_the_load_to_fall(tmp_path: Path) -> None:
    ra = module()
    path = load(tmp_path, 3.0)
    gate = ra.Gate(max_load=0.5, loadavg_file=path, wait_s=30.0, allow_noisy=False, poll_s=0.05)
    threading.Timer(0.3, lambda: load(tmp_path, 0.2)).start()
    t0 = time.monotonic()
    assert gate.wait("x") == (pytest.approx(0.2), False)
    assert 0.25 < time.monotonic() - t0 < 10


def test_the_real_loadavg_is_read() -> None:
    ra = module()
    gate = ra.Gate(max_load=1e9, loadavg_file=Path("/proc/loadavg"), wait_s=0, allow_noisy=False)
    value, noisy = gate.wait("x")
    assert value >= 0 and not noisy


def test_a_failing_benchmark_stops_the_run_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ra = module()
    broken = ra.Bench("broken", "bench_async.py", "bench_async with a bad argument", (), ("--steps", "0"), ())
    monkeypatch.setattr(ra, "BENCHMARKS", (broken,))
    out = tmp_path / "results.md"
    assert ra.main(["--quick", "--out", str(out), "--loadavg-file", str(load(tmp_path, 0.0))]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: broken run 1 exited 2 (error: --tasks, --steps")
    assert "python benchmarks/bench_async.py --json --steps 0" in err[0] and not out.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--repeats", "2"], "--repeats 2: use at least 3"),
        (["--only", "nope"], "argument --only: invalid choice: 'nope'"),
        (["--max-load", "inf"], "--max-load"),
        (["--out", "/proc/version/x.md"], "/proc/version/x.md"),
        (["--out", "."], "."),
    ],
)
def test_bad_input_is_one_error_line_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    proc = run(*args, "--loadavg-file", str(load(tmp_path, 0.0)))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert needle in lines[0] and not proc.stdout


def test_keep_replaces_the_remeasured_section_and_keeps_the_others_with_their_provenance(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    old = (
        "# Measured results\n\nWritten by `python benchmarks/run_all.py --repeats 3` on 2026-11-30 10:00 UTC "
        "(3.0 min), commit `abc1234`.\n\n## filter\n\nthe old filter table\n\n## async\n\nthe old async table\n\n"
        "## nosuchbench\n\ndropped\n"
    )
    out.write_text(old)
    loadavg = str(load(tmp_path, 0.1))
    proc = run("--quick", "--only", "async", "--keep", "--out", str(out), "--loadavg-file", loadavg)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    names = re.findall(r"^## (\S+)$", text, flags=re.M)
    assert names == ["filter", "async"]  # BENCHMARKS order; an unknown section is not kept
    filt, asy = re.split(r"^## ", text, flags=re.M)[1:]
    assert filt.splitlines()[2] == "Measured 2026-11-30 10:00 UTC, commit `abc1234` (kept from an earlier page)."
    assert "the old filter table" in filt and "the old async table" not in text and "dropped" not in text
    assert re.match(r"Measured \d{4}-\d\d-\d\d \d\d:\d\d UTC, commit `[0-9a-f]{7,}", asy.splitlines()[2])
    assert "Sections kept from an earlier page (`--keep`): `filter`" in text
    # a second --keep run keeps the new async section's own line, not the page head's
    proc = run("--quick", "--only", "filter", "--keep", "--out", str(out), "--loadavg-file", loadavg,
               "--wait-s", "0")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    again = re.split(r"^## ", out.read_text(), flags=re.M)[1:]
    assert again[1].splitlines()[2] == asy.splitlines()[2] and "the old filter table" not in again[0]


def test_without_keep_the_page_holds_only_this_run(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    out.write_text("# old\n\nWritten by `x` on 2026-11-30 10:00 UTC (1 min), commit `abc1234`.\n\n## filter\n\nold\n")
    proc = run("--quick", "--only", "async", "--out", str(out), "--loadavg-file", str(load(tmp_path, 0.1)))
    assert proc.returncode == 0, proc.stderr
    assert re.findall(r"^## (\S+)$", out.read_text(), flags=re.M) == ["async"]


def test_a_benchmark_with_fixed_runs_runs_that_often_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ra = module()
    fixed = ra.dataclasses.replace(
        next(b for b in ra.BENCHMARKS if b.name == "async"),
        args=("--tasks", "4", "--steps", "4"),
        runs=(1, "its seeds are its repeats"),
    )
    monkeypatch.setattr(ra, "BENCHMARKS", (fixed,))
    out = tmp_path / "results.md"
    argv = ["--only", "async", "--repeats", "1", "--out", str(out), "--loadavg-file", str(load(tmp_path, 0.0))]
    assert ra.main(argv) == 0
    text = out.read_text()
    assert "1 run(s) whatever `--repeats` says: its seeds are its repeats" in text
    assert re.findall(r"^\| (\d) \| \d{4}-", text, flags=re.M) == ["1"]
    # --repeats below 3 is still refused for a benchmark without a fixed count
    with pytest.raises(SystemExit) as exc:
        ra.parse(["--only", "filter", "--repeats", "1"])
    assert exc.value.code == 2


def test_the_staleness_figures_read_the_per_seed_spread() -> None:
    ra = module()
    bench = next(b for b in ra.BENCHMARKS if b.name == "staleness")
    k1 = {"diff_vs_k0": {"0": -0.02, "1": 0.01, "2": 0.005}, "diff_vs_k0_mean": -0.0017}
    result = {"by_k": {"0": {"accuracy_after_mean": 0.9, "diff_vs_k0": {"0": 0.0, "1": 0.0}}, "1": k1}}
    read = {f.name: f.read(result) for f in bench.figures}
    assert read["K = 1: smallest paired difference over the seeds"] == pytest.approx(-0.02)
    assert read["K = 1: largest paired difference over the seeds"] == pytest.approx(0.01)
    assert read["K = 2: smallest paired difference over the seeds"] is None
    assert bench.runs is not None and bench.runs[0] == 1


def test_bench_arg_reaches_the_named_benchmark_and_the_page_shows_it(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    trace = tmp_path / "traces"
    proc = run("--quick", "--only", "pipeline", "--bench-arg", f"pipeline=--trace-dir={trace}", "--out", str(out),
               "--loadavg-file", str(load(tmp_path, 0.1)))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert any(trace.iterdir())  # the benchmark got the argument
    assert f"--trace-dir={trace}`" in out.read_text()  # the command on the page carries it
    assert f"--bench-arg pipeline=--trace-dir={trace}" in out.read_text()
    bad = run("--bench-arg", "nosuch=--x", "--loadavg-file", str(load(tmp_path, 0.1)))
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "NAME=ARG" in bad.stderr
