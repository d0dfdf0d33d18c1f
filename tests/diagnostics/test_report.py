"""`tirl report`: a self-contained HTML page; rendered in headless Chromium, every image must load."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from diag_synth import as_verl, issue10_run, tirl_log, trace, write_jsonl

from tirl.cli import main
from tirl.diagnostics import write_report
from tirl.diagnostics.adapters import load_metrics
from tirl.diagnostics.render import verdict_line
from tirl.diagnostics.report import CSP
from tirl.diagnostics.training import diagnose_training
from tirl.trainer.run import write_report as write_report_summary

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHECK_SCRIPT = """<script>
function check(){var imgs=[...document.images];
var ok=imgs.filter(function(i){return i.complete&&i.naturalWidth>0}).length;
var d=document.createElement('div');d.id='imgcheck';d.textContent='loaded '+ok+' of '+imgs.length;
document.body.appendChild(d);}
if(document.readyState==='complete'){check()}else{window.addEventListener('load',check)}
</script>"""


def full_run_dir(root: Path) -> Path:
    run = root / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", tirl_log(seed=1, inject="void_leak"))
    write_jsonl(run / "pipeline_trace.jsonl", trace("runner", 0))
    user = {"role": "user", "content": "17*23?"}
    write_jsonl(
        run / "trajectories.jsonl",
        [
            {"id": "a", "answer": "391", "messages": [user, {"role": "assistant", "content": "\\boxed{391}"}]},
            {"id": "b", "answer": "391", "messages": [user, {"role": "assistant", "content": "hmm"}]},
        ],
    )
    before = {
        "accuracy": 0.4,
        "n": 200,
        "correct": 80,
        "mean_turns": 5.2,
        "terminations": {"answered": 150, "max_turns": 50},
    }
    after = {"accuracy": 0.9, "n": 200, "correct": 180, "mean_turns": 3.9, "terminations": {"answered": 198, "void": 2}}
    paired = {"n": 200, "both": 80, "gained": 100, "lost": 0, "neither": 20, "p_value": 1.6e-30}
    summary = {"steps": 200, "eval/before": before, "eval/after": after, "eval/paired": paired}
    summary["built_with"] = "torch 2.13.0+cpu (ATen CPU kernels AVX2, MKL branch auto), transformers 5.25.0, Test <CPU>"
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "config.json").write_text(json.dumps({"model": {"generator": "hf", "device": "cpu"}}))
    (run / "tb").mkdir()
    (run / "tb" / "events.out.tfevents.1.host").write_bytes(b"")
    return run


def _chromium(*args: str, user_dir: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={user_dir}", *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(full_run_dir(tmp_path_factory.mktemp("report")))


def test_report_is_self_contained_with_all_sections(report: Path) -> None:
    out = report
    assert out.name == "report.html" and out.parent.name == "run"
    page = out.read_text(encoding="utf-8")
    srcs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    # eval bars; reward, valid/void, void share, IS min/max, grad norm, max len, loss, entropy+KL; queues, utilisation
    assert len(srcs) == 11
    assert "learning rate (warm-up): no values in the log" in page  # the synthetic log has no train/lr
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "http://" not in page and "https://" not in page and "<script" not in page
    for text in ("Training: ", "void_leak", "Pipeline: ", "runner", "backpressure", "Trajectory audit", "1 void"):
        assert text in page
    assert "accuracy 0.400 → 0.900" in page and "<td>max_turns</td><td>50</td><td>0</td>" in page
    assert "Task by task: 100 solved after only, 0 before only, 80 both, 20 neither (McNemar exact p = 1.6e-30)" in page
    assert 'class="verdict expected">runner (normal for this job)' in page  # the in-process CPU generator
    assert (
        "Ran with torch 2.13.0+cpu (ATen CPU kernels AVX2, MKL branch auto), transformers 5.25.0, Test &lt;CPU&gt;:"
        in page
    )
    assert "events" not in page or "1 event file(s)" in page


def test_a_runner_verdict_is_a_problem_when_generation_is_elsewhere(tmp_path: Path) -> None:
    run = full_run_dir(tmp_path)
    (run / "config.json").write_text(json.dumps({"model": {"generator": "openai", "device": "cpu"}}))
    page = write_report(run).read_text(encoding="utf-8")
    assert 'class="verdict bad">runner<' in page and "normal for this job" not in page


def test_report_shows_void_drift_with_its_onset(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", issue10_run("drop_collapse", 0))
    page = write_report(run).read_text(encoding="utf-8")
    assert 'Training: <span class="verdict bad">void_drift</span>' in page
    assert "the void share rose over many steps and stayed up" in page and "onset_step" in page
    assert 'alt="void share (void_drift: a sustained rise)"' in page
    assert "fill of capacity" not in page  # no trace in this run directory


def test_missing_parts_are_reported_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partial = tmp_path / "partial"
    partial.mkdir()
    write_jsonl(partial / "metrics.jsonl", tirl_log(seed=1, inject="void_leak"))
    capsys.readouterr()
    assert main(["report", str(partial)]) == 0
    assert capsys.readouterr().err == ""  # an absent part is said in the page, not warned about
    page = (partial / "report.html").read_text()
    assert "pipeline_trace.jsonl is absent" in page and "trajectories.jsonl is absent" in page


def test_report_prints_the_training_verdict_line_of_tirl_train(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tirl report RUN` printed only the page's path: now also the verdict line `tirl train` ends with."""
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", issue10_run("drop_collapse", 0))
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(run / "report.html")
    assert out[1:] == [verdict_line(diagnose_training(load_metrics(run / "metrics.jsonl")))]
    assert out[1].startswith("training diagnosis: void_drift (void_drift at steps ")
    assert write_report_summary(run)["training_verdict"] == out[1]  # the very line `tirl train` prints
    (run / "metrics.jsonl").unlink()
    write_jsonl(run / "pipeline_trace.jsonl", trace("runner", 0))
    assert main(["report", str(run)]) == 0
    assert capsys.readouterr().out.splitlines() == [str(run / "report.html")]  # no training log: no verdict line


def test_the_report_says_not_judged_for_a_queue_without_capacity(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "pipeline_trace.jsonl", trace("overall", 0, caps=False))  # steady deep queues, no caps
    page = write_report(run).read_text(encoding="utf-8")
    assert page.count("<td>not judged (capacity unknown)</td>") == 3 and "<td>no</td>" not in page


def test_an_unreadable_part_is_one_warning_line_per_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The error was only inside the HTML: exit 0 and a silent stderr for a corrupt metrics line or a torn file."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (broken / "pipeline_trace.jsonl").write_text('{"t": 0}\n')
    (broken / "summary.json").write_text("{not json")  # read by two sections, warned about once
    (broken / "trajectories.jsonl").write_text('{"id": "a", "messages": []}\n{"id": "b", "mess')  # torn
    capsys.readouterr()
    assert main(["report", str(broken)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith(f"warning: {broken}/") for line in err), err
    named = sorted(line.split(": ", 2)[1].split(":")[0].rsplit("/", 1)[1] for line in err)
    assert named == ["metrics.jsonl", "pipeline_trace.jsonl", "summary.json", "trajectories.jsonl"]
    assert any(f"{broken}/trajectories.jsonl:2: not valid JSON" in line for line in err)
    page = (broken / "report.html").read_text()
    assert "could not read" in page and "keys found: epoch" in page and "not valid JSON" in page


@pytest.mark.parametrize(
    ("make", "problem"),
    [("empty", "holds no run: none of metrics.jsonl, pipeline_trace.jsonl, trajectories.jsonl, summary.json, tb/"),
     ("notes", "holds no run: none of metrics.jsonl"), ("missing", "does not exist"), ("file", "is not a directory")],
)  # fmt: skip
def test_a_path_without_a_run_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str, problem: str
) -> None:
    """An empty directory (or one with only notes.txt) gave exit 0 and an all-absent report; a missing path
    was "not a directory"."""
    path = tmp_path / make
    if make in ("empty", "notes"):
        path.mkdir()
    if make == "notes":
        (path / "notes.txt").write_text("hi")
    if make == "file":
        path.write_text("hi")
    capsys.readouterr()
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: {problem}"), err
    assert err[0].endswith(" — give a run directory written by tirl train")
    assert not (path / "report.html").exists() and not (tmp_path / "report.html").exists()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make sysdeps installs it)")
def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    probe = tmp_path / "probe.html"
    page = report.read_text(encoding="utf-8").replace(f'content="{CSP}"', 'content=""')  # the probe's own script
    probe.write_text(page.replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", probe.as_uri(), user_dir=tmp_path / "ud1")
    m = re.search(r'id="imgcheck">loaded (\d+) of (\d+)<', dom.stdout)
    assert m, f"no image check in the DOM; stderr: {dom.stderr[-2000:]}"
    assert m.group(1) == m.group(2) == "11"
    shot = tmp_path / "report.png"
    res = _chromium("--window-size=1200,2400", f"--screenshot={shot}", report.as_uri(), user_dir=tmp_path / "ud2")
    assert shot.is_file(), res.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000  # a rendered page, not a blank one


def test_a_trace_that_cannot_be_judged_is_not_healthy_in_the_report(tmp_path: Path) -> None:
    """A killed run's one snapshot: the section was `healthy` with a table of numbers no verdict stands on."""
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "pipeline_trace.jsonl", trace("healthy", 0)[:1])
    page = write_report(run).read_text(encoding="utf-8")
    assert 'Pipeline: <span class="verdict expected">cannot_judge</span>' in page
    assert "Cannot judge the pipeline: only one snapshot" in page and "fill of capacity" not in page


def test_a_healthy_pipeline_verdict_that_could_not_check_starved_says_only_in_part(tmp_path: Path) -> None:
    """A trace without gpu_util: the section was a green `healthy` with no word of what it could not check."""
    run = tmp_path / "run"
    run.mkdir()
    rows = trace("healthy", 0)
    for r in rows:
        r["gpu_util"] = None
    write_jsonl(run / "pipeline_trace.jsonl", rows)
    page = write_report(run).read_text(encoding="utf-8")
    assert 'Pipeline: <span class="verdict expected">healthy (only in part)</span>' in page
    said = "Not (fully) checked on this trace: starved (the trace has no gpu_util, so an idle generator cannot be seen)"
    assert f"<p>{said}.</p>" in page  # the words of `tirl diagnose pipeline`
    write_jsonl(run / "pipeline_trace.jsonl", trace("healthy", 0))
    page = write_report(run).read_text(encoding="utf-8")
    assert 'Pipeline: <span class="verdict healthy">healthy</span>' in page and "Not (fully) checked" not in page


def test_a_torn_last_line_is_a_note_on_stderr_and_in_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A killed run's torn last lines were skipped in silence by `tirl report` (and by the report `tirl train`
    writes); the notes are those of `tirl diagnose training|pipeline`."""
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", tirl_log(seed=1))
    write_jsonl(run / "pipeline_trace.jsonl", trace("runner", 0))
    for name, half in (("metrics.jsonl", '{"step": 200, "train/is_r'), ("pipeline_trace.jsonl", '{"t": 300.0, "ini')):
        with (run / name).open("a", encoding="utf-8") as fh:
            fh.write(half)
    torn = "the last line is torn (no newline at its end and not valid JSON: a run killed mid-write) and was skipped"
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"note: {run}/metrics.jsonl:201: {torn}", f"note: {run}/pipeline_trace.jsonl:401: {torn}"], err
    page = (run / "report.html").read_text(encoding="utf-8")
    assert f"note: {run}/metrics.jsonl:201: {torn}" in page and f"note: {run}/pipeline_trace.jsonl:401: " in page


def test_a_healthy_training_section_says_what_it_did_not_check(tmp_path: Path) -> None:
    """Six steps of a verl log (no counts): the page said "healthy" and "No symptom of the void-turn table."
    where `tirl diagnose training` lists five rules it could not (fully) run; it now shows that same line."""
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", as_verl(tirl_log(seed=3))[:6])
    (run / "config.json").write_text(json.dumps({"filter": {"mode": "off"}}))
    page = write_report(run).read_text(encoding="utf-8")
    assert 'Training: <span class="verdict healthy">healthy</span>' in page
    assert "<p>No symptom of the void-turn table.</p>" not in page
    assert (
        "No symptom of the void-turn table: no IS-ratio spike; no entropy collapse, no KL blow-up; not (fully) "
        "checked on this log: void_leak (only" in page
    )
    assert "empty_batch (the log has no valid count or void share)" in page
    assert "filter.mode=off: void trajectories are counted but stay in the update." in page


def test_a_training_section_with_findings_names_unmatched_spikes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = tirl_log(seed=1, inject="void_leak")
    rows[60]["train/is_ratio_max"] = 33.0  # no longest trajectory, no filter drop in that step
    write_jsonl(run / "metrics.jsonl", rows)
    page = write_report(run).read_text(encoding="utf-8")
    assert 'Training: <span class="verdict bad">void_leak</span>' in page
    assert "Also an IS-ratio spike at step 60 matched no row of the table" in page


HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"


def _hostile_run(tmp_path: Path) -> Path:
    """A shared run whose files carry markup where text or numbers belong (ids, termination names and counts)."""
    run = full_run_dir(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    summary["eval/before"]["terminations"] = {HOSTILE: 1, "void": HOSTILE}
    (run / "summary.json").write_text(json.dumps(summary))
    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    rows[1]["id"] = HOSTILE
    write_jsonl(run / "trajectories.jsonl", rows)
    return run


def test_markup_in_a_shared_run_never_enters_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A count of ``<script>...`` in summary.json went into the page unescaped; now that section is a warning."""
    run = _hostile_run(tmp_path)
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "<script" not in page and "<img src=x" not in page
    assert "&lt;script&gt;" in page  # the id, shown as text
    assert f"{run / 'summary.json'}: eval/before.terminations is not a table of counts" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["x", [0.5], True])
def test_an_accuracy_that_is_not_a_number_is_a_warning_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: object
) -> None:
    run = full_run_dir(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    summary["eval/after"]["accuracy"] = value
    summary["eval/paired"] = {"n": "many"}
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(run)]) == 0
    assert "eval/after.accuracy is" in capsys.readouterr().err
    summary["eval/after"]["accuracy"] = 0.5  # the comparison record alone
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(run)]) == 0
    assert "its comparison before/after cannot be read (ValueError" in capsys.readouterr().err


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make sysdeps installs it)")
def test_the_pages_policy_stops_a_script_that_got_through(report: Path, tmp_path: Path) -> None:
    """Were an escape missed, the page's Content-Security-Policy still runs no script: the title stays."""
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text(encoding="utf-8").replace("</body>", HOSTILE + "</body>"))
    dom = _chromium("--virtual-time-budget=3000", "--dump-dom", probe.as_uri(), user_dir=tmp_path / "ud")
    assert "<title>tirl report</title>" in dom.stdout, dom.stderr[-2000:]
    unprotected = tmp_path / "unprotected.html"
    unprotected.write_text(probe.read_text(encoding="utf-8").replace(f'content="{CSP}"', 'content=""'))
    dom = _chromium("--virtual-time-budget=3000", "--dump-dom", unprotected.as_uri(), user_dir=tmp_path / "ud2")
    assert "<title>pwned</title>" in dom.stdout  # the probe itself works: without the policy the script runs


@pytest.mark.parametrize("name", ["summary.json", "config.json"])
def test_a_fifo_among_the_runs_files_is_a_warning_not_a_hang(tmp_path: Path, name: str) -> None:
    """A shared run with ``summary.json`` (or ``config.json``) a FIFO: the report waited for a writer forever."""
    run = full_run_dir(tmp_path)
    (run / name).unlink()
    os.mkfifo(run / name)
    cmd = [sys.executable, "-m", "tirl.cli", "report", str(run), "--out", str(tmp_path / "r.html")]
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "r.html").is_file()
    if name == "summary.json":
        assert f"{run / name}: is not a regular file" in got.stderr


def _report_with_home(tmp_path: Path, home: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``tirl report`` in a real process with ``HOME=home``, matplotlib's variables unset but ``env``."""
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", tirl_log(seed=1))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    clean = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    clean.update(HOME=str(home), TMPDIR=str(scratch), **env)
    cmd = [sys.executable, "-m", "tirl.cli", "report", str(run), "--out", str(tmp_path / "r.html")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env=clean), scratch


def test_a_home_that_cannot_be_written_is_no_problem(tmp_path: Path) -> None:
    """``HOME`` read-only: matplotlib printed "mkdir -p failed ..." and "Matplotlib created a temporary cache
    directory ..." on stderr. ``HOME`` under a file is unwritable even for root, who writes into a 0o555 one."""
    (tmp_path / "a-file").write_text("")
    got, scratch = _report_with_home(tmp_path, tmp_path / "a-file" / "home")
    assert got.returncode == 0, got.stderr
    assert "matplotlib" not in got.stderr.lower() and "mkdir" not in got.stderr, got.stderr
    assert (tmp_path / "r.html").is_file() and "data:image/png;base64," in (tmp_path / "r.html").read_text()
    assert list(scratch.iterdir()) == []  # the process's own matplotlib directory went with it


def test_the_report_writes_nothing_into_home(tmp_path: Path) -> None:
    """A writable ``HOME`` got ``~/.cache/matplotlib/fontlist-*.json`` and ``~/.config/matplotlib``."""
    home = tmp_path / "home"
    home.mkdir()
    got, _ = _report_with_home(tmp_path, home)
    assert got.returncode == 0, got.stderr
    assert list(home.rglob("*")) == []


def test_a_users_own_matplotlib_directory_is_used(tmp_path: Path) -> None:
    """``MPLCONFIGDIR`` set by the user is left to matplotlib: its font cache goes there, as the user asked."""
    home, mine = tmp_path / "home", tmp_path / "mpl"
    home.mkdir()
    mine.mkdir()
    got, _ = _report_with_home(tmp_path, home, MPLCONFIGDIR=str(mine))
    assert got.returncode == 0, got.stderr
    assert list(mine.glob("fontlist-*.json")) and list(home.rglob("*")) == []
