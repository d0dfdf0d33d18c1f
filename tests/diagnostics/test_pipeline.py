"""Pipeline verdicts on seeded noisy traces, including backpressure and an update gap between collects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from diag_synth import trace, write_jsonl

from tirl.cli import main
from tirl.diagnostics.pipeline import NEXT_STEP, diagnose_pipeline, diagnose_trace_file, load_trace
from tirl.diagnostics.thresholds import PipelineThresholds
from tirl.errors import InputError

KINDS = ("healthy", "initializer", "runner", "evaluator", "overall", "starved")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(3))
def test_each_bottleneck_is_named(kind: str, seed: int) -> None:
    diag = diagnose_pipeline(trace(kind, seed))
    assert diag.verdict == kind
    assert diag.next_step == NEXT_STEP[kind]
    assert diag.evidence["capacity_known"] is True
    assert diag.not_checked == {}  # capacities, gpu_util and the blocked counts are in the trace: every rule ran


@pytest.mark.parametrize("seed", range(3))
def test_a_few_items_in_every_queue_of_a_busy_pipeline_is_healthy(seed: int) -> None:
    rows = trace("healthy_busy", seed)
    diag = diagnose_pipeline(rows)
    ev = diag.evidence
    assert all(q["mean"] >= 2.5 and q["nonempty_frac"] > 0.9 for q in ev["queues"].values())  # a few, always
    assert ev["generator_busy_frac"] > 0.9 and not any(ev["rising"].values())
    assert diag.verdict == "healthy"  # buffering, not a shortage: every fill is under 15 %
    assert all(q["fill_mean"] < 0.15 for q in ev["queues"].values())
    assert ev["workers"] == {"init": 4, "run": 16, "eval": 4}
    assert diagnose_pipeline(trace("healthy_busy", seed, caps=False)).verdict == "healthy"


@pytest.mark.parametrize(
    ("kind", "verdict"),
    [
        ("healthy", "healthy"),
        ("healthy_busy", "healthy"),
        ("initializer", "initializer"),  # generator idle while init_queue holds the work
        ("runner", "runner"),  # initializers blocked: run_queue is full
        ("evaluator", "evaluator"),  # rising
        ("evaluator_backpressure", "evaluator"),  # runners blocked: eval_queue is full
        ("starved", "starved"),
        ("overall", "healthy"),  # steady deep queues, nothing blocked: cannot be judged without capacities
    ],
)
def test_without_capacities_judged_by_blocking_trend_and_generator_use(kind: str, verdict: str) -> None:
    diag = diagnose_pipeline(trace(kind, 0, caps=False))
    assert diag.verdict == verdict
    assert diag.evidence["capacity_known"] is False
    assert all(q["capacity"] is None and q["fill_mean"] is None for q in diag.evidence["queues"].values())
    assert any("no queue capacities" in n for n in diag.evidence["notes"])


def test_full_run_queue_blocking_the_initializer_is_backpressure_not_an_initializer_fault() -> None:
    diag = diagnose_pipeline(trace("runner", 0))
    ev = diag.evidence
    assert ev["high"]["init_queue"] and ev["high"]["run_queue"]  # both high ...
    assert ev["queues"]["run_queue"]["fill_mean"] > 0.8 and ev["queues"]["init_queue"]["fill_mean"] > 0.25
    assert ev["stages"]["init_blocked_frac"] > 0.9
    assert diag.verdict == "runner"  # ... but the Initializer is not the bottleneck
    assert any("backpressure" in n for n in ev["notes"])


def test_all_high_with_runners_blocked_on_eval_queue_is_the_evaluator() -> None:
    diag = diagnose_pipeline(trace("evaluator_backpressure", 1))
    assert all(diag.evidence["high"].values())
    assert diag.verdict == "evaluator"


def test_every_queue_rising_while_the_generator_is_busy_is_overall() -> None:
    """The seed's row "all three high": queues still growing everywhere (not capped by backpressure) need more
    capacity everywhere, even though the runners end up blocked on the eval_queue (called evaluator before)."""
    diag = diagnose_pipeline(trace("overall_rising", 3))
    ev = diag.evidence
    assert all(ev["high"].values()) and all(ev["rising"].values()) and ev["generator_busy_frac"] > 0.9
    assert diag.verdict == "overall" and any("still rising" in n for n in ev["notes"])


def test_evidence_has_time_averages_trends_and_throughputs() -> None:
    ev = diagnose_pipeline(trace("evaluator", 2)).evidence
    eq = ev["queues"]["eval_queue"]
    assert eq["last_third_mean"] > eq["first_third_mean"] + 10 and eq["slope_per_s"] > 0
    assert ev["rising"]["eval_queue"]
    assert 0.85 < ev["generator_busy_frac"] <= 1.0
    assert ev["stages"]["run_throughput_per_s"] > 0
    # the 30 s update gap between the two collects is not counted as queue time
    assert ev["duration_s"] < 110


def test_time_average_weights_by_interval() -> None:
    rows = [
        {"t": 0.0, "init_queue": 10, "run_queue": 0, "eval_queue": 0, "gpu_util": 1.0},
        {"t": 1.0, "init_queue": 0, "run_queue": 0, "eval_queue": 0, "gpu_util": 1.0},
        {"t": 1.5, "init_queue": 0, "run_queue": 0, "eval_queue": 0, "gpu_util": 1.0},
        {"t": 2.0, "init_queue": 0, "run_queue": 0, "eval_queue": 0, "gpu_util": 1.0},
    ]
    # weights: 1.0, 0.5, 0.5 and the typical interval 0.5 for the last one -> 10*1/2.5
    assert diagnose_pipeline(rows).evidence["queues"]["init_queue"]["mean"] == pytest.approx(4.0)


STARVED_UNCHECKED = "the trace has no gpu_util, so an idle generator cannot be seen"


def test_no_gpu_util_is_said_not_guessed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A starved trace without gpu_util: healthy, only in part. It was plain healthy with a note under the table."""
    rows = trace("starved", 0)
    for r in rows:
        r["gpu_util"] = None
    diag = diagnose_pipeline(rows)
    assert diag.verdict == "healthy"
    assert diag.not_checked == {"starved": STARVED_UNCHECKED}  # init_queue rarely held work: initializer ran in full
    p = write_jsonl(tmp_path / "pipeline_trace.jsonl", rows)
    capsys.readouterr()
    assert main(["diagnose", "pipeline", str(p)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(
        f"verdict healthy (only in part) — not (fully) checked on this trace: starved ({STARVED_UNCHECKED})"
    )
    assert main(["diagnose", "pipeline", str(p), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["verdict"] == "healthy" and got["not_checked"] == {"starved": STARVED_UNCHECKED}


def test_without_gpu_util_an_init_queue_holding_work_checks_the_initializer_only_in_part() -> None:
    """The initializer rule's second half (init_queue non-empty most of the time while the generator is idle)."""
    rows = trace("healthy_busy", 0)
    for r in rows:
        r["gpu_util"] = None
    got = diagnose_pipeline(rows).not_checked
    assert got["initializer"] == (
        "only in part: whether the generator was idle while init_queue held work needs gpu_util in the trace"
    )
    assert list(got) == ["initializer", "starved"]


@pytest.mark.parametrize("seed", range(3))
def test_steady_deep_queues_without_capacities_are_healthy_only_in_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    """The 'overall' trace without its capacities: every queue 15-30 deep all the time, nothing blocked or rising.

    Healthy, because a steady depth is not judged without a capacity; it said so only in a note under the table.
    """
    diag = diagnose_pipeline(trace("overall", seed, caps=False))
    steady = (
        "only in part: init_queue, run_queue, eval_queue held work most of the time, and without their capacities "
        "in the trace a steady depth is not judged"
    )
    assert diag.verdict == "healthy"
    assert diag.not_checked == dict.fromkeys(("overall", "evaluator", "runner", "initializer"), steady)
    p = write_jsonl(tmp_path / "pipeline_trace.jsonl", trace("overall", seed, caps=False))
    capsys.readouterr()
    assert main(["diagnose", "pipeline", str(p)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(  # the four kinds share one reason: named together
        f"verdict healthy (only in part) — not (fully) checked on this trace: overall, evaluator, runner, "
        f"initializer ({steady})"
    )
    assert main(["diagnose", "pipeline", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_checked"] == diag.not_checked


def test_the_high_column_says_not_judged_for_a_queue_no_rule_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Steady deep queues without capacities: the table said "no" in the "high" column, a claim no rule made."""
    p = write_jsonl(tmp_path / "pipeline_trace.jsonl", trace("overall", 0, caps=False))
    capsys.readouterr()
    assert main(["diagnose", "pipeline", str(p)]) == 0
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("│ ")}
    for q in ("init_queue", "run_queue", "eval_queue"):
        assert rows[q].rstrip("│ ").endswith("not judged (capacity unknown)"), rows[q]
    assert main(["diagnose", "pipeline", str(p), "--json"]) == 0
    evidence = json.loads(capsys.readouterr().out)["evidence"]
    assert evidence["not_judged"] == ["init_queue", "run_queue", "eval_queue"]
    mostly_empty = write_jsonl(tmp_path / "empty.jsonl", trace("healthy", 0, caps=False))
    assert main(["diagnose", "pipeline", str(mostly_empty)]) == 0  # not high at any capacity: "no" is true
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("│ ")}
    assert all(rows[q].rstrip("│ ").endswith("│ no") for q in ("init_queue", "run_queue", "eval_queue")), rows
    with_caps = diagnose_pipeline(trace("healthy", 0))
    assert with_caps.evidence["not_judged"] == []


@pytest.mark.parametrize("seed", range(3))
def test_a_queue_that_is_mostly_empty_needs_no_capacity(seed: int) -> None:
    """Not high at any capacity (non-empty under busy_frac of the time): the missing capacity hid nothing."""
    diag = diagnose_pipeline(trace("healthy", seed, caps=False))
    assert all(q["nonempty_frac"] < 0.6 for q in diag.evidence["queues"].values())
    assert diag.verdict == "healthy" and diag.not_checked == {}


def test_a_verdict_names_only_the_rules_before_it_that_could_not_run() -> None:
    """The runner verdict without capacities: only the rules tried before it (the evaluator's, overall) count."""
    rows = trace("runner", 0, caps=False)
    for r in rows:
        r["eval_queue"] = 3  # steady, never rising, the runners never blocked on it: with a cap of 4 it was full
    diag = diagnose_pipeline(rows)
    assert diag.verdict == "runner"
    assert list(diag.not_checked) == ["overall", "evaluator"]
    assert "eval_queue held work most of the time" in diag.not_checked["evaluator"]
    assert "init_queue, eval_queue held work" in diag.not_checked["overall"]  # init_queue: also without its cap


def test_overall_needs_gpu_util_and_evaluator_backpressure_needs_run_blocked() -> None:
    rising = trace("overall_rising", 3)
    for r in rising:
        r["run_blocked"] = 12  # the runners wait on the full eval_queue all along
    assert diagnose_pipeline(rising).verdict == "overall"  # still rising everywhere with the generator busy
    for r in rising:
        r["gpu_util"] = None
    diag = diagnose_pipeline(rising)  # whether the generator was busy is unknown: the evaluator's backpressure
    assert diag.verdict == "evaluator" and list(diag.not_checked) == ["overall"]
    assert "whether the generator was busy meanwhile" in diag.not_checked["overall"]
    steady = trace("overall", 0)
    for r in steady:
        del r["run_blocked"]
    diag = diagnose_pipeline(steady)  # all high, nothing seen blocked: overall; blocked unknown
    assert diag.verdict == "overall" and list(diag.not_checked) == ["evaluator"]
    assert "needs run_blocked in the trace" in diag.not_checked["evaluator"]


def test_bad_trace_names_line_and_keys(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "t.jsonl", [{"t": 0, "init_queue": 1, "run_queue": 0, "eval_queue": 0}, {"t": 1}])
    with pytest.raises(InputError) as exc:
        load_trace(p)
    assert f"{p}:2" in str(exc.value) and "init_queue" in str(exc.value)


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write_jsonl(tmp_path / "pipeline_trace.jsonl", trace("initializer", 0))
    assert main(["diagnose", "pipeline", str(p), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"verdict", "evidence", "not_checked"} and out["verdict"] == "initializer"
    assert out["not_checked"] == {}
    assert diagnose_trace_file(p).verdict == "initializer"


@pytest.mark.parametrize("name", ["pipeline_trace.jsonl", "trace.csv"])
def test_a_missing_trace_is_named_as_a_trace(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The fix names the trace and the run directory, not "the training log" (the training reader's words)."""
    with pytest.raises(InputError, match=r"does not exist — give the run directory or its pipeline_trace\.jsonl"):
        load_trace(tmp_path / name)
    assert main(["diagnose", "pipeline", str(tmp_path / "run")]) == 2  # a run directory that does not exist
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "pipeline_trace.jsonl" in err[0], err


def _snapshots(ts: list[float], **fields: float | None) -> list[dict[str, float | None]]:
    queues = {"init_queue": 3.0, "run_queue": 1.0, "eval_queue": 0.0, "gpu_util": 0.9}
    return [{"t": t, **queues, **fields} for t in ts]


def _collects(steps: int, during: int) -> list[dict[str, float | None]]:
    """tirl's trace of ``steps`` collects: ``during`` snapshots while each runs, then the one after it has drained.

    Collects shorter than the trace interval (a tiny `tirl train` run) leave only the drained one.
    """
    rows: list[dict[str, float | None]] = []
    idle = {f"{s}_{k}": 0.0 for s in ("init", "run", "eval") for k in ("busy", "blocked")}
    for step in range(steps):
        for _ in range(during):
            rows.append({"step": step, "init_queue": 2.0, "run_queue": 1.0, "eval_queue": 0.0, "gpu_util": 0.9,
                         **idle, "run_busy": 4.0})  # fmt: skip
        rows.append({"step": step, "init_queue": 0.0, "run_queue": 0.0, "eval_queue": 0.0, "gpu_util": 0.8, **idle,
                     "eval_done": 4.0 * (step + 1)})  # fmt: skip
    return [{"t": 0.25 * i, **row} for i, row in enumerate(rows)]


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        (_snapshots([0.0] * 20), "all 20 snapshots have the same time t=0, so the trace spans no time"),
        (_snapshots([5.0] * 3), "all 3 snapshots have the same time t=5"),
        (_snapshots([0.0]), "only one snapshot"),
        (
            _snapshots([0.5 * i for i in range(20)], init_queue=0, run_queue=0, eval_queue=0, gpu_util=None),
            "no work in the trace: every queue is empty in all 20 snapshots",
        ),
        (
            _snapshots([0.5 * i for i in range(20)], init_queue=0, run_queue=0, eval_queue=0, gpu_util=0.0),
            "no work in the trace",
        ),
        (_snapshots([0.0, 1.0]), "only 2 snapshots, and the rules need 6: the rising rule compares the first third"),
        (_snapshots([0.5 * i for i in range(5)]), "only 5 snapshots, and the rules need 6"),
        (
            _snapshots([0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 2.0]),
            "only 3 of the 8 snapshots count (5 with no time to the next snapshot or a pause after it)",
        ),
        (_collects(8, during=0), "only 0 of the 8 snapshots count (8 written after a collect had drained the"),
        (_collects(2, during=2), "only 4 of the 6 snapshots count (2 written after a collect had drained the"),
    ],
    ids=[
        *("all-times-zero", "all-times-equal", "one-snapshot", "no-work", "no-work-generator-idle", "two-snapshots"),
        *("five-snapshots", "equal-times-count-once", "only-ends-of-collects", "two-short-collects"),
    ],
)
def test_a_trace_that_cannot_support_a_verdict_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, float | None]], why: str
) -> None:
    """Each of these was `healthy` (one snapshot, zero time: the generator's 90 % alone; no work: "none of these")."""
    diag = diagnose_pipeline(rows)
    assert diag.verdict == "cannot_judge" and why in diag.evidence["cannot_judge"], diag.evidence
    assert "notes" not in diag.evidence  # no notes that explain a verdict not given
    p = write_jsonl(tmp_path / "pipeline_trace.jsonl", rows)
    capsys.readouterr()
    assert main(["diagnose", "pipeline", str(p)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].endswith("verdict cannot_judge") and len(lines) == 2, out
    assert lines[1].startswith("cannot judge the pipeline: ") and why in lines[1]
    assert "healthy" not in out and "next:" not in out
    assert main(["diagnose", "pipeline", str(p), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["verdict"] == "cannot_judge" and why in got["evidence"]["cannot_judge"]


def test_six_snapshots_that_count_are_judged() -> None:
    """The least the rules need (PipelineThresholds.min_snapshots): two per third of the trace."""
    assert diagnose_pipeline(_snapshots([0.5 * i for i in range(6)])).verdict == "healthy"
    assert diagnose_pipeline(_collects(3, during=2)).verdict == "healthy"  # 6 during the collects, 3 ends not counted
    seven = PipelineThresholds(min_snapshots=7)
    assert diagnose_pipeline(_snapshots([0.5 * i for i in range(6)]), thresholds=seven).verdict == "cannot_judge"


def test_no_snapshots_cannot_be_judged() -> None:
    diag = diagnose_pipeline([])
    assert diag.verdict == "cannot_judge" and diag.evidence["cannot_judge"] == "no snapshots in the trace"


def test_empty_queues_with_work_flowing_are_still_judged() -> None:
    """The no-work rule is narrow: a busy generator, or busy workers and growing completions, show work."""
    busy = _snapshots([0.5 * i for i in range(20)], init_queue=0, run_queue=0, eval_queue=0, gpu_util=0.95)
    assert diagnose_pipeline(busy).verdict == "healthy"
    flowing = _snapshots([0.5 * i for i in range(20)], init_queue=0, run_queue=0, eval_queue=0, gpu_util=None)
    for i, r in enumerate(flowing):
        r.update(run_busy=2.0, run_done=float(i))
    diag = diagnose_pipeline(flowing)
    assert diag.verdict == "healthy" and diag.not_checked == {"starved": STARVED_UNCHECKED}
    idle = _snapshots([0.5 * i for i in range(20)], init_queue=0, run_queue=0, eval_queue=0, gpu_util=0.1)
    assert diagnose_pipeline(idle).verdict == "starved"


def test_a_torn_last_line_is_skipped_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = trace("evaluator", 0, n=60)
    p = write_jsonl(tmp_path / "pipeline_trace.jsonl", rows)
    whole = diagnose_trace_file(p)
    with p.open("a", encoding="utf-8") as fh:
        fh.write('{"t": 99.0, "init_queue": 4, "run_q')  # a run killed mid-write
    note = (
        f"{p}:61: the last line is torn (no newline at its end and not valid JSON: a run killed mid-write) and "
        "was skipped"
    )  # the training-log reader's words (tirl.diagnostics.log_rows)
    capsys.readouterr()
    assert main(["diagnose", "pipeline", str(p), "--json"]) == 0
    got = capsys.readouterr()
    assert json.loads(got.out)["verdict"] == whole.verdict == "evaluator"  # the complete lines are judged
    assert got.err == f"note: {note}\n"  # it was silent
    assert main(["diagnose", "pipeline", str(tmp_path)]) == 0  # the run directory: the same note
    assert capsys.readouterr().err == f"note: {note}\n"
    notes: list[str] = []
    assert load_trace(p, notes) == rows and notes == [note]


def test_a_trace_whose_only_line_is_torn_is_refused_saying_so(tmp_path: Path) -> None:
    p = tmp_path / "pipeline_trace.jsonl"
    p.write_text('{"t": 0.0, "init_qu', encoding="utf-8")
    with pytest.raises(InputError, match=r"no snapshots \(its only line is torn"):
        load_trace(p)
