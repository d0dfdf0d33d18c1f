"""A self-contained HTML report of a run directory: plots (PNG as base64 data URIs) and the diagnoses.

Run directory layout (written by the trainer; each part may be absent, and the
report then says so instead of failing)::

    metrics.jsonl         per-step metrics  -> training plots + `diagnose training`
    pipeline_trace.jsonl  queue snapshots   -> queue/utilisation plots + `diagnose pipeline`
    trajectories.jsonl    sampled episodes  -> `audit`
    summary.json          the run's summary and config (shown as a table)
    tb/                   TensorBoard events (listed; the plots come from metrics.jsonl)

The page has no external references (no scripts, fonts or images from the
network), so it can be mailed or archived as one file. Text from the run (ids, names, the policy's words) is
HTML-escaped, numbers are checked to be numbers, and the page's Content-Security-Policy (:data:`CSP`) lets no
script run and nothing load even if a value got through unescaped. Plots use matplotlib's
Agg backend (no display needed).
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import math
from pathlib import Path
from typing import Any

from tirl.diagnostics.adapters import MetricsLog, load_metrics
from tirl.diagnostics.advice import check_first
from tirl.diagnostics.audit import audit_file
from tirl.diagnostics.bundle import filter_config
from tirl.diagnostics.pipeline import PipelineDiagnosis, diagnose_pipeline, high_text, load_trace
from tirl.diagnostics.plotting import pyplot
from tirl.diagnostics.render import coverage_lines, has_ratio, pipeline_not_checked, verdict_line
from tirl.diagnostics.training import SUMMARY, TrainingDiagnosis, diagnose_training, evidence_lines, steps_text
from tirl.errors import InputError, TirlError, cut, describe, one_line
from tirl.fileio import write_text
from tirl.jsonl import JSONProblem, parse_json
from tirl.wording import counted

FILES: dict[str, str] = {
    "metrics.jsonl": "training plots and the training diagnosis",
    "pipeline_trace.jsonl": "queue plots and the pipeline diagnosis",
    "trajectories.jsonl": "the trajectory audit",
    "summary.json": "the run summary",
    "tb": "TensorBoard event files",
}

#: The page's own rule: no script runs and nothing is fetched, whatever text a run's files put into it (every
#: value is escaped as well; it holds even where an escape is missed). Images are the inline PNGs.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:1.6em}
table{border-collapse:collapse;margin:8px 0;font-size:.9em}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f3f3f3}.verdict{font-weight:bold;padding:2px 8px;
border-radius:4px}.healthy{background:#d8f5d8}.bad{background:#fbd4d4}.missing{color:#999;font-style:italic}
.expected{background:#fff1c2}.plots{display:flex;flex-wrap:wrap;gap:8px}.plots figure{margin:0}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:.85em}figcaption{font-size:.8em;color:#555}
"""


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt = pyplot()

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(
    title: str,
    series: list[tuple[str, list[float], list[float | None]]],
    *,
    logy: bool = False,
    marks: list[float] | None = None,
    xlabel: str = "step",
    ylim: tuple[float, float] | None = None,
    dots: bool = False,
) -> str | None:
    """One line plot as a base64 PNG; ``None`` when no series has a value (``dots``: always mark the points)."""
    plt = pyplot()

    usable = [(n, x, y) for n, x, y in series if any(v is not None for v in y)]
    if not usable:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    for name, xs, ys in usable:
        # a missing value (a skipped step, a gap between collects) breaks the line instead of bridging it
        vals = [math.nan if b is None or (logy and b <= 0) else b for b in ys]
        ax.plot(xs, vals, label=name, linewidth=1.2, marker="." if dots or len(xs) <= 40 else None)
    for m in marks or []:
        ax.axvline(m, color="red", alpha=0.5, linestyle="--", linewidth=1)
    if logy:
        ax.set_yscale("log")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    if len(usable) > 1:
        ax.legend(fontsize=7)
    return _png(fig)


def _img(title: str, data: str | None) -> str:
    if data is None:
        return f'<p class="missing">{html.escape(title)}: no values in the log</p>'
    alt = html.escape(title)
    return f'<figure><img alt="{alt}" src="data:image/png;base64,{data}"></figure>'


def _verdict(v: str, expected: bool = False, partial: bool = False) -> str:
    """The verdict's badge; ``partial``: a ``healthy`` verdict that some rule could not check (yellow)."""
    partial = partial and v == "healthy"
    cls = "expected" if expected or partial or v == "cannot_judge" else "healthy" if v == "healthy" else "bad"
    extra = " (normal for this job)" if expected else " (only in part)" if partial else ""
    return f'<span class="verdict {cls}">{html.escape(v)}{extra}</span>'


def _training_section(log: MetricsLog, diag: TrainingDiagnosis, filter_mode: str | None = None) -> str:
    xs = [float(s) for s in log.steps]

    def s(name: str) -> list[float | None]:
        return log.get(name) or [None] * len(xs)

    marks = [float(f.step) for f in diag.findings if f.step is not None]
    plots = [
        ("reward (mean)", [("reward", xs, s("reward"))], False),
        ("valid and void trajectories", [("valid", xs, s("valid")), ("void", xs, s("void"))], False),
        ("void share (void_drift: a sustained rise)", [("void share", xs, s("void_ratio"))], False),
        ("IS ratio min / max (log scale)", [("max", xs, s("is_max")), ("min", xs, s("is_min"))], True),
        ("grad norm", [("grad norm", xs, s("grad_norm"))], False),
        ("max sequence length", [("max len", xs, s("max_len"))], False),
        ("policy loss", [("loss", xs, s("loss"))], False),
        ("entropy and KL to the reference", [("entropy", xs, s("entropy")), ("KL", xs, s("kl"))], False),
        ("learning rate (warm-up)", [("lr", xs, _raw(log, "train/lr"))], False),
    ]
    imgs = "".join(_img(t, _figure(t, ser, logy=logy, marks=marks)) for t, ser, logy in plots)
    imgs += _attribution_plots(log, xs, marks)
    rows = "".join(
        f"<tr><td>{html.escape(f.kind)}<br><small>{html.escape(SUMMARY[f.kind])}</small></td>"
        f"<td>{html.escape(', '.join(map(str, f.steps[:8])) + (' …' if len(f.steps) > 8 else ''))}</td>"
        f"<td>{'<br>'.join(html.escape(line) for line in evidence_lines(f.evidence))}</td>"
        f"<td>{html.escape(check_first(f.kind, diag.format))}</td></tr>"
        for f in diag.findings
    )
    table = (
        f"<table><tr><th>kind</th><th>steps</th><th>evidence</th><th>check this first</th></tr>{rows}</table>"
        if rows
        else ""
    )  # then what the verdict did not check, as `tirl diagnose training` says it (a healthy verdict: one line)
    table += "".join(f"<p>{html.escape(line)}</p>" for line in coverage_lines(diag, filter_mode, has_ratio(log)))
    return (
        f"<h2>Training: {_verdict(diag.verdict)}</h2><p>{steps_text(len(log))}, {log.format} format. "
        f"Red dashed lines mark findings.</p>{table}<div class='plots'>{imgs}</div>"
    )


def _attribution_plots(log: MetricsLog, xs: list[float], marks: list[float]) -> str:
    """Where the spikes sit (``void/*``, :mod:`tirl.trainer.attribution`): two plots, or "" without the keys.

    The void rows' share of the tokens against their share of the spikes, and the lowest generator log-prob in
    void vs valid rows; a null share (no such token that step) is a gap, not 0.
    """
    if log.get("void_share_tokens") is None:
        return ""
    names = [("tokens", "void_share_tokens"), ("low-prob tokens", "void_share_lowprob"),
             ("ratio > 2", "void_share_outliers"), ("ratio > dual clip", "void_share_dual"),
             ("gradient weight", "void_share_grad")]  # fmt: skip
    title = "void rows' share: of the tokens vs of the spikes"
    shares = _figure(title, [(n, xs, log.get(k) or [None] * len(xs)) for n, k in names], marks=marks,
                     ylim=(-0.02, 1.02), dots=True)  # fmt: skip
    low = "lowest generator log-prob: void vs valid rows"
    lows = [("void rows", xs, log.get("min_lp_void") or [None] * len(xs)),
            ("valid rows", xs, log.get("min_lp_valid") or [None] * len(xs))]  # fmt: skip
    return _img(title, shares) + _img(low, _figure(low, lows, marks=marks, dots=True))


def _raw(log: MetricsLog, key: str) -> list[float | None]:
    """A metric that has no canonical series (``train/kl``, ``train/lr``), straight from the log's rows."""
    out: list[float | None] = []
    for row in log.rows:
        v = row.get(key)
        out.append(float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None)
    return out


_SUMMARY_FIX = "restore the summary.json the run wrote (the rest of the report does not need it)"


def _eval_numbers(record: dict[str, Any], side: str, where: str) -> tuple[float, float, dict[str, int]]:
    """One side's accuracy, mean turns and termination counts; a value of another type is an ``InputError``.

    summary.json may come from someone else's run: its values go into the page as numbers, never as text.
    """
    out: list[float] = []
    for key in ("accuracy", "mean_turns"):
        value = record.get(key) or 0.0
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise InputError(where, None, f"eval/{side}.{key} is {cut(repr(value))}, not a number",
                             _SUMMARY_FIX)  # fmt: skip
        out.append(float(value))
    counts = record.get("terminations") or {}
    ok = isinstance(counts, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in counts.values())
    if not ok:
        raise InputError(where, None, f"eval/{side}.terminations is not a table of counts",
                         _SUMMARY_FIX)  # fmt: skip
    return out[0], out[1], counts


def _eval_section(summary: dict[str, Any], where: str = "summary.json") -> str:
    """Held-out accuracy and mean turns before and after training, as bars, with the termination counts."""
    before, after = summary.get("eval/before"), summary.get("eval/after")
    if not isinstance(before, dict) or not isinstance(after, dict):
        return "<h2>Evaluation</h2><p class='missing'>no evaluation before and after in summary.json</p>"
    (acc_b, turns_b, ends_b), (acc_a, turns_a, ends_a) = (
        _eval_numbers(before, "before", where),
        _eval_numbers(after, "after", where),
    )
    try:
        words = _paired_words(summary) + _sampled_words(summary)
    except (KeyError, IndexError, TypeError, ValueError) as exc:  # a hand-edited comparison record
        raise InputError(where, None, f"its comparison before/after cannot be read ({describe(exc)})",
                         _SUMMARY_FIX) from None  # fmt: skip
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(6.4, 2.4))
    for ax, values, title in (
        (axes[0], [acc_b, acc_a], "held-out accuracy"),
        (axes[1], [turns_b, turns_a], "mean turns"),
    ):
        bars = ax.bar(["before", "after"], values, color=["#999", "#3a7"])
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.tick_params(labelsize=8)
    axes[0].set_ylim(0, 1.05)
    img = _img("evaluation before and after", _png(fig))
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{ends_b.get(k, 0)}</td><td>{ends_a.get(k, 0)}</td></tr>"
        for k in sorted(set(ends_b) | set(ends_a))
    )
    built = summary.get("built_with")
    ran = (
        f" Ran with {html.escape(built)}: the run repeats to the digit where these match (tirl.models.kernels)."
        if isinstance(built, str)
        else ""
    )
    return (
        f"<h2>Evaluation</h2><p>{html.escape(str(after.get('n', '?')))} tasks, greedy: accuracy {acc_b:.3f} → "
        f"{acc_a:.3f}.{html.escape(words)}{ran}</p><div class='plots'>{img}</div>"
        f"<table><tr><th>how episodes ended</th><th>before</th><th>after</th></tr>{rows}</table>"
    )


def _paired_words(summary: dict[str, Any]) -> str:
    """The greedy evaluation's task-by-task change as a sentence; empty without one."""
    from tirl.rollout.evaluation import PairedChange

    paired = summary.get("eval/paired")
    return f" Task by task: {PairedChange.from_dict(paired).line()}." if isinstance(paired, dict) else ""


def _sampled_words(summary: dict[str, Any]) -> str:
    """The sampled evaluation's change (``trainer.eval_samples``) as a sentence; empty without one."""
    from tirl.rollout.paired import PairedSamples

    paired, k = summary.get("eval/sampled_paired"), summary.get("eval/samples")
    if not k:
        return ""
    head = f" Sampled, {k} per task ({summary.get('eval/sampled_decoding', 'sampled')})"
    if isinstance(paired, dict):
        return f"{head}: " + "; ".join(PairedSamples.from_dict(paired).lines()[1:]) + "."
    return f"{head}: pass@1 {float(summary.get('eval/sampled_accuracy_after') or 0.0):.4f} after training."


def _cpu_generator(run_dir: Path) -> bool:
    """The run generated with the in-process generator on the CPU (its runners are the bottleneck by design)."""
    try:
        cfg = parse_json(_run_file_bytes(run_dir / "config.json"))
    except (OSError, InputError, JSONProblem):
        return False
    model = cfg.get("model") if isinstance(cfg, dict) else None
    return isinstance(model, dict) and model.get("generator") == "hf" and model.get("device", "cpu") == "cpu"


def _gap_indices(ts: list[float], factor: float = 3.0) -> list[int]:
    """Snapshots that follow a pause (e.g. the update between two collects): plotted as line breaks."""
    dts = [b - a for a, b in itertools.pairwise(ts)]
    positive = sorted(d for d in dts if d > 0)
    if not positive:
        return []
    typical = positive[len(positive) // 2]
    return [i + 1 for i, d in enumerate(dts) if d > factor * typical]


def _fill(q: dict[str, Any]) -> str:
    if q.get("fill_mean") is None:
        return "<span class='missing'>capacity not in the trace</span>"
    return f"{q['fill_mean']:.0%} of {q['capacity']:g}"


def _pipeline_section(rows: list[dict[str, Any]], diag: PipelineDiagnosis, cpu_generator: bool = False) -> str:
    """Queue and utilisation plots with the verdict.

    ``cpu_generator``: the run sampled with the in-process generator on the CPU, where each Agent Runner
    worker waits on generation: a ``runner`` verdict is then the expected state, shown as such.
    """
    if diag.verdict == "cannot_judge":
        why = html.escape(diag.evidence["cannot_judge"])
        return f"<h2>Pipeline: {_verdict(diag.verdict)}</h2><p>Cannot judge the pipeline: {why}.</p>"
    ts = [float(r["t"]) for r in rows]
    gaps = set(_gap_indices(ts))

    def col(key: str) -> list[float | None]:
        out: list[float | None] = []
        for i, r in enumerate(rows):
            v = r.get(key)
            ok = isinstance(v, int | float) and not isinstance(v, bool) and i not in gaps
            out.append(float(v) if ok else None)  # type: ignore[arg-type]
        return out

    depth = _figure(
        "queue depths", [(q, ts, col(q)) for q in ("init_queue", "run_queue", "eval_queue")], xlabel="seconds"
    )
    util_series: list[tuple[str, list[float], list[float | None]]] = [("generator busy", ts, col("gpu_util"))]
    for stage in ("init", "run", "eval"):
        busy = col(f"{stage}_busy")
        peak = max((b for b in busy if b is not None), default=0.0)
        if peak > 0:
            util_series.append((f"{stage} workers busy", ts, [None if b is None else b / peak for b in busy]))
    util = _figure("stage utilisation (fraction of peak workers busy)", util_series, xlabel="seconds", ylim=(0.0, 1.05))
    ev = diag.evidence
    qrows = "".join(
        f"<tr><td>{q}</td><td>{d['mean']:.2f}</td><td>{_fill(d)}</td><td>{d['max']:g}</td><td>{d['nonempty_frac']:.0%}</td>"
        f"<td>{d['first_third_mean']:.1f} → {d['last_third_mean']:.1f}</td><td>{high_text(ev, q)}</td></tr>"
        for q, d in ev["queues"].items()
    )
    util_v = ev.get("generator_busy_frac")
    expected = cpu_generator and diag.verdict == "runner"
    note = (
        "<p>The in-process generator runs on the CPU inside the Agent Runner's workers, so on this job the runner "
        "stage is the bottleneck by design; on a GPU or a generation server this verdict would point at a real "
        "problem.</p>"
        if expected
        else ""
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in ev.get("notes", []))
    if diag.not_checked:  # what the verdict did not check, in the words of `tirl diagnose pipeline`
        unchecked = pipeline_not_checked(diag)
        note += f"<p>{html.escape(unchecked[0].upper() + unchecked[1:])}.</p>"
    return (
        f"<h2>Pipeline: {_verdict(diag.verdict, expected, partial=bool(diag.not_checked))}</h2>{note}"
        f"<p>{ev['snapshots']} snapshots over {ev['duration_s']} s; generator busy "
        f"{'unknown' if util_v is None else f'{util_v:.0%}'}. Next: check {html.escape(diag.next_step)}.</p>"
        f"<table><tr><th>queue</th><th>time-avg depth</th><th>fill of capacity</th><th>max</th><th>non-empty</th>"
        f"<th>first → last third</th>"
        f"<th>high</th></tr>{qrows}</table>{f'<ul>{notes}</ul>' if notes else ''}"
        f"<div class='plots'>{_img('queue depths', depth)}{_img('stage utilisation', util)}</div>"
    )


def _dist_table(data: dict[str, Any]) -> str:
    cols = ("n", "mean", "min", "p50", "p90", "max")
    rows = "".join(
        f"<tr><th>{html.escape(name)}</th>" + "".join(f"<td>{d.get(c, '-')}</td>" for c in cols) + "</tr>"
        for name, d in (("assistant turns", data["turns"]), (f"length ({data['length']['unit']})", data["length"]))
    )
    return "<table><tr><th></th>" + "".join(f"<th>{c}</th>" for c in cols) + f"</tr>{rows}</table>"


def _audit_section(path: Path) -> str:
    data = audit_file(path).to_dict()
    vc = data["void_correct"]
    reasons = "".join(
        f"<tr><td>{html.escape(r)}</td><td>{d['turns']}</td><td>{html.escape(', '.join(d['examples']))}</td></tr>"
        for r, d in data["void_reasons"].items()
    )
    rate = "no ground truth" if vc["rate"] is None else f"{vc['correct']}/{vc['with_ground_truth']} ({vc['rate']:.1%})"
    te = data["tool_errors"]
    return (
        f"<h2>Trajectory audit</h2><p>{counted(data['trajectories'], 'trajectory')}, {data['void']} void "
        f"({data['void_ratio']:.1%}); void trajectories that still ended with the correct answer: {rate}; "
        f"tool errors: {te['total']} of {data['tool_messages']} tool messages.</p>"
        + (f"<table><tr><th>void reason</th><th>turns</th><th>examples</th></tr>{reasons}</table>" if reasons else "")
        + _dist_table(data)
        + _edits_table(data.get("edits"))
    )


def _edits_table(edits: dict[str, Any] | None) -> str:
    """Where SWE episodes' first edits landed (:mod:`tirl.diagnostics.swe_edits`); empty for other runs."""
    if edits is None:
        return ""
    places = ("inside", "outside", "beyond_listing", "unlisted", "no_line_edit")

    def row(name: str, cell: dict[str, Any]) -> str:
        got = "".join(
            f"<td>{cell[p]['count']} ({cell[p]['solved']})</td>" if p in cell else "<td>-</td>" for p in places
        )
        return f"<tr><th>{html.escape(name)}</th><td>{cell['trajectories']}</td><td>{cell['solved']}</td>{got}</tr>"

    rows = row("all", edits) + "".join(row(f"policy v{v}", c) for v, c in edits["by_policy_version"].items())
    rows += "".join(row(k, c) for k, c in edits["by_bug_class"].items())
    share = edits["outside_share"]
    said = "no first edit placed" if share is None else f"{share:.1%} of the placed first edits are outside it"
    head = "".join(f"<th>{p} (solved)</th>" for p in places)
    return (
        f"<h3>First line edit: in the function the issue names?</h3><p>{said}.</p>"
        f"<table><tr><th></th><th>trajectories</th><th>solved</th>{head}</tr>{rows}</table>"
    )


def _summary_section(path: Path) -> str:
    data = _read_summary(path)
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict | list)}
    rest = {k: v for k, v in data.items() if k not in scalars}

    def fmt(v: Any) -> str:
        if isinstance(v, float) and math.isfinite(v):
            return f"{v:.6g}"
        return str(v)

    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(fmt(v))}</td></tr>" for k, v in scalars.items())
    nested = f"<details><summary>details</summary><pre>{html.escape(json.dumps(rest, indent=1))}</pre></details>"
    return f"<h2>Summary</h2><table>{rows}</table>{nested if rest else ''}"


def _run_file_bytes(path: Path) -> bytes:
    """A run's own JSON file; one that is not a regular file (a FIFO never ends: the report hung) is an InputError."""
    if not path.is_file():
        raise InputError(
            str(path), None, "is not a regular file (a pipe or a device)", "restore the file the run wrote"
        )
    return path.read_bytes()


def _read_summary(path: Path) -> dict[str, Any]:
    try:
        data = parse_json(_run_file_bytes(path))  # JSONProblem names bytes that are not UTF-8
    except OSError as exc:
        raise InputError(str(path), None, f"cannot be read ({exc.strerror or exc})", "check its permissions") from None
    except JSONProblem as exc:
        raise InputError(str(path), None, str(exc), "the file must hold one JSON object") from None
    if not isinstance(data, dict):
        raise InputError(str(path), None, f"is not an object but {type(data).__name__}", "restore it from the run")
    return data


def _guard(title: str, name: str, make: Any, problems: dict[str, str]) -> str:
    """Section ``title`` from ``make()``; a file it cannot read (``name``) is a notice, and once in ``problems``."""
    try:
        return str(make())
    except TirlError as exc:
        problems.setdefault(name, f"{exc} (left out of the report; the rest is written)")
        return f"<h2>{html.escape(title)}</h2><p class='missing'>could not read: {html.escape(str(exc))}</p>"


def _notes_html(notes: list[str]) -> str:
    return "".join(f"<p class='missing'>note: {html.escape(n)}</p>" for n in notes)


def render_report(
    run_dir: Path,
    problems: dict[str, str] | None = None,
    notes: list[str] | None = None,
    verdicts: list[str] | None = None,
) -> str:
    """The report's HTML text; each file a section could not read is named in ``problems`` (file name: why).

    ``notes``: receives the readers' notes (a torn last line that was skipped), which the sections also show.
    ``verdicts``: receives the training section's verdict in one line (:func:`~tirl.diagnostics.render.verdict_line`).
    """
    problems = {} if problems is None else problems
    notes = [] if notes is None else notes
    verdicts = [] if verdicts is None else verdicts
    present = {name: (run_dir / name).exists() for name in FILES}
    listing = "".join(
        f"<li>{html.escape(n)}: {'present' if ok else '<span class=missing>absent</span>'} — {html.escape(FILES[n])}"
        + ("" if ok else " skipped")
        + "</li>"
        for n, ok in present.items()
    )
    parts = [f"<h1>tirl run report: {html.escape(str(run_dir))}</h1><ul>{listing}</ul>"]
    if present["summary.json"]:
        summary = run_dir / "summary.json"
        parts.append(_guard("Summary", summary.name, lambda: _summary_section(summary), problems))
        parts.append(
            _guard("Evaluation", summary.name, lambda: _eval_section(_read_summary(summary), str(summary)), problems)
        )
    if present["metrics.jsonl"]:

        def training() -> str:
            log = load_metrics(run_dir / "metrics.jsonl")
            notes.extend(log.notes)
            section = filter_config(run_dir)  # the run's [filter], as `tirl diagnose training` reads it
            mode = section.get("mode") if isinstance(section, dict) else None
            diag = diagnose_training(log)
            verdicts.append(verdict_line(diag))
            section_html = _training_section(log, diag, mode if isinstance(mode, str) else None)
            return section_html + _notes_html(list(log.notes))

        parts.append(_guard("Training", "metrics.jsonl", training, problems))
    else:
        parts.append("<h2>Training</h2><p class='missing'>metrics.jsonl is absent: no training plots.</p>")
    if present["pipeline_trace.jsonl"]:

        def pipeline() -> str:
            read: list[str] = []
            rows = load_trace(run_dir / "pipeline_trace.jsonl", read)
            notes.extend(read)
            diag = diagnose_pipeline(rows, str(run_dir / "pipeline_trace.jsonl"))
            return _pipeline_section(rows, diag, _cpu_generator(run_dir)) + _notes_html(read)

        parts.append(_guard("Pipeline", "pipeline_trace.jsonl", pipeline, problems))
    else:
        parts.append("<h2>Pipeline</h2><p class='missing'>pipeline_trace.jsonl is absent: no queue plots.</p>")
    if present["trajectories.jsonl"]:
        audit = run_dir / "trajectories.jsonl"
        parts.append(_guard("Trajectory audit", audit.name, lambda: _audit_section(audit), problems))
    else:
        parts.append("<h2>Trajectory audit</h2><p class='missing'>trajectories.jsonl is absent: no audit.</p>")
    if present["tb"]:
        events = sorted(p.name for p in (run_dir / "tb").rglob("events.*"))
        parts.append(
            f"<h2>TensorBoard</h2><p>{len(events)} event file(s) in tb/: "
            f"<code>tensorboard --logdir {html.escape(str(run_dir / 'tb'))}</code></p>"
        )
    body = "\n".join(parts)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\"><title>tirl report</title>"
        f"<style>{CSS}</style></head><body>{body}</body></html>\n"
    )


def write_report(
    run_dir: Path,
    out: Path | None = None,
    *,
    problems: dict[str, str] | None = None,
    notes: list[str] | None = None,
    verdicts: list[str] | None = None,
) -> Path:
    """Write ``run_dir/report.html`` (or ``out``) and return its path; ``tirl train`` calls this at the end.

    ``problems``: filled with one line per file a section could not read; ``notes``: with the readers' notes
    (:func:`stderr_lines` makes the lines ``tirl report`` and ``tirl train`` print of both); ``verdicts``: with
    the training verdict in one line (``tirl train`` prints it at its end).
    """
    run_dir = Path(run_dir)
    target = Path(out) if out is not None else run_dir / "report.html"
    html_text = render_report(run_dir, problems, notes, verdicts)
    write_text(target, html_text)  # atomic, unique temp name, through links and devices
    return target


def stderr_lines(problems: dict[str, str], notes: list[str]) -> list[str]:
    """What a report's reading left to say, for stderr; ``tirl report`` prints it, and ``tirl train`` at its end.

    A ``warning:`` line per file a section could not read, then a ``note:`` line per reader's note (each once).
    """
    warnings = [f"warning: {one_line(problem)}" for problem in problems.values()]
    return warnings + [f"note: {one_line(note)}" for note in dict.fromkeys(notes)]
