"""Readable terminal output (rich tables) for the diagnoses and the audit.

Text that came from the files (trajectory ids, file names the agent made, the re-judge's details, the path
given) goes through :func:`for_terminal` first: rich reads ``[...]`` in a printed string as markup (an id
``[/x]`` was a ``MarkupError`` traceback, ``[link=...]`` a hyperlink), and a terminal obeys escape sequences.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tirl.diagnostics.adapters import MetricsLog
from tirl.diagnostics.advice import check_first
from tirl.diagnostics.pipeline import PipelineDiagnosis, high_text
from tirl.diagnostics.training import SUMMARY, TrainingDiagnosis, evidence_lines, spikes_text, steps_text
from tirl.errors import printable
from tirl.wording import counted

#: The width of a console that is not a terminal (a pipe, a file): wide enough that tables keep their natural
#: width instead of being cut to rich's default of 80 columns. ``COLUMNS`` overrides it.
PIPE_WIDTH = 200


def output_console() -> Console:
    """A console on stdout: the terminal's width, else ``COLUMNS``, else :data:`PIPE_WIDTH` when piped."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return Console(width=int(columns))
    return Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)


def for_terminal(value: Any) -> Any:
    """``value`` with every string in it (keys too) shown as text by rich: markup escaped, controls escaped.

    Lists and dicts are copied; numbers and ``None`` are returned as they are.
    """
    if isinstance(value, str):
        return escape(printable(value))
    if isinstance(value, dict):
        return {for_terminal(k): for_terminal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [for_terminal(v) for v in value]
    return value


_UNMATCHED = "matched no row of the table (neither the run's longest trajectory nor a filter drop in its step)"


def _not_checked_text(not_checked: dict[str, str]) -> str:
    return "not (fully) checked on this log: " + "; ".join(f"{kind} ({why})" for kind, why in not_checked.items())


#: what a healthy verdict claims for each rule of :mod:`tirl.diagnostics.rollout_faults` that ran
_BATCH_CLAIMS = {"empty_batch": "no empty batch", "rollout_faults": "no rollout faults"}
#: what a healthy verdict claims for each rule of :mod:`tirl.diagnostics.entropy_kl` that ran
_POLICY_CLAIMS = {"entropy_collapse": "no entropy collapse", "kl_blowup": "no KL blow-up"}


def healthy_line(
    filter_mode: str | None,
    has_ratio: bool = True,
    unmatched: tuple[int, ...] = (),
    not_checked: dict[str, str] | None = None,
) -> str:
    """The line for a log without findings: it claims only what was checked (and the filter's effect when known).

    ``has_ratio``: whether the log holds an IS ratio at all; without one (TRL's log, a verl run without rollout
    correction) the spike rules could not run, and the line says so instead of "no IS-ratio spike".
    ``unmatched``: the steps of IS-ratio spikes that matched no row of the table (the line names them instead
    of "no IS-ratio spike"). ``not_checked``: verdict kind -> why its rule could not run
    (:func:`tirl.diagnostics.coverage.not_checked`); "no empty batch", "no rollout faults", "no entropy collapse"
    and "no KL blow-up" are said only where that rule ran in full.
    """
    rest = dict(not_checked or {})
    if not has_ratio:
        text = (
            "No symptom found, but the log has no IS ratio, so void_leak and late_filter (IS-ratio spikes) "
            "were not checked"
        )
        rest = {k: v for k, v in rest.items() if k not in ("void_leak", "late_filter")}
    elif unmatched:
        text = f"No symptom of the void-turn table, but {spikes_text(unmatched)} {_UNMATCHED}"
    else:
        text = "No symptom of the void-turn table: no IS-ratio spike"
    batch = [claim for kind, claim in _BATCH_CLAIMS.items() if kind not in rest]
    if batch:
        text += ("; " if not has_ratio or unmatched else ", ") + ", ".join(batch)
    policy = [claim for kind, claim in _POLICY_CLAIMS.items() if kind not in rest]
    if policy:
        text += "; " + ", ".join(policy)
    if rest:
        text += "; " + _not_checked_text(rest)
    if filter_mode == "off":
        return text + "; filter.mode=off: void trajectories are counted but stay in the update."
    if filter_mode:
        return text + f"; the filter acts (filter.mode={filter_mode})."
    return text + "."


def has_ratio(log: MetricsLog) -> bool:
    """Whether the log holds an IS-ratio value at all (without one, the spike rules could not run)."""
    return any(v is not None for key in ("is_max", "is_min") for v in log.get(key) or [])


def coverage_lines(diag: TrainingDiagnosis, filter_mode: str | None = None, ratio: bool = True) -> list[str]:
    """What the verdict did not check, in the words of ``tirl diagnose training`` (the report shows the same).

    Without findings: the one :func:`healthy_line`. With findings: the IS-ratio spikes that matched no row of the
    table and the rules that could not run (:mod:`tirl.diagnostics.coverage`), one line each, when there are any.
    """
    if not diag.findings:
        return [healthy_line(filter_mode, ratio, diag.unmatched_spikes, diag.not_checked)]
    lines = [f"Also {spikes_text(diag.unmatched_spikes)} {_UNMATCHED}."] if diag.unmatched_spikes else []
    if diag.not_checked:
        text = _not_checked_text(diag.not_checked)
        lines.append(f"{text[0].upper()}{text[1:]}.")
    return lines


def verdict_line(diag: TrainingDiagnosis) -> str:
    """The diagnosis in one line, for the end of ``tirl train``.

    The verdict, each finding's kind and steps, the rules that did not (fully) run, and the command that shows
    the evidence.
    """
    found = "; ".join(f"{f.kind} at step{'s' * (len(f.steps) > 1)} {_steps_text(f.steps)}" for f in diag.findings)
    text = f"training diagnosis: {diag.verdict}" + (f" ({found})" if found else "")
    if diag.not_checked:
        text += f"; not (fully) checked: {', '.join(diag.not_checked)}"
    return text + f" — `tirl diagnose training {diag.path}` for the evidence"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _steps_text(steps: tuple[int, ...]) -> str:
    if len(steps) <= 4:
        return ", ".join(map(str, steps))
    return f"{steps[0]}–{steps[-1]} ({len(steps)} steps)"


def print_training(
    diag: TrainingDiagnosis, console: Console | None = None, filter_mode: str | None = None, has_ratio: bool = True
) -> None:
    """The verdict line and one row per finding: steps, evidence, what to check first.

    ``filter_mode``: the run's ``filter.mode`` when known (from its config.json), for the line of a healthy log.
    """
    console = console or output_console()
    style = "green" if diag.verdict == "healthy" else "bold red"
    run = f" run {for_terminal(repr(diag.run))}" if diag.run is not None else ""
    console.print(
        f"[bold]{for_terminal(str(diag.path))}[/bold]{run} ({diag.format} format, {steps_text(diag.steps)}): "
        f"verdict [{style}]{diag.verdict}[/]"
    )
    if not diag.findings:
        # one line whatever its length (soft_wrap): a console of PIPE_WIDTH broke the longer healthy lines in two
        console.print(coverage_lines(diag, filter_mode, has_ratio)[0], soft_wrap=True)
        return
    table = Table(show_lines=True)
    table.add_column("kind", style="bold", max_width=24)
    table.add_column("step(s)", no_wrap=True)
    table.add_column("evidence")
    table.add_column("check this first")
    for f in diag.findings:
        table.add_row(
            f"{f.kind}\n[dim]{SUMMARY[f.kind]}[/dim]",
            _steps_text(f.steps),
            for_terminal("\n".join(evidence_lines(f.evidence))),
            check_first(f.kind, diag.format),
        )
    console.print(table)
    for line in coverage_lines(diag, filter_mode, has_ratio):
        console.print(line)


def pipeline_not_checked(diag: PipelineDiagnosis) -> str:
    """``not (fully) checked on this trace: KIND (why); …``, or ``""`` when every rule ran.

    From :attr:`PipelineDiagnosis.not_checked`; kinds with the same reason are named together. ``tirl diagnose
    pipeline``, the report and the bundle say it in these words.
    """
    kinds_by_why: dict[str, list[str]] = {}
    for kind, why in diag.not_checked.items():
        kinds_by_why.setdefault(why, []).append(kind)
    parts = [f"{', '.join(kinds)} ({why})" for why, kinds in kinds_by_why.items()]
    return "not (fully) checked on this trace: " + "; ".join(parts) if parts else ""


def pipeline_coverage(diag: PipelineDiagnosis) -> str:
    """What follows the verdict's name: `` (only in part)`` after ``healthy``, then `` — not (fully) checked …``."""
    unchecked = pipeline_not_checked(diag)
    if not unchecked:
        return ""
    return f"{' (only in part)' if diag.verdict == 'healthy' else ''} — {unchecked}"


def print_pipeline(diag: PipelineDiagnosis, console: Console | None = None) -> None:
    """The verdict (with what it did not check), the per-queue evidence and the recommended next step."""
    console = console or output_console()
    ev = diag.evidence
    style = {"healthy": "green", "cannot_judge": "yellow"}.get(diag.verdict, "bold red")
    if diag.verdict == "healthy" and diag.not_checked:
        style = "yellow"
    snapshots = "1 snapshot" if ev["snapshots"] == 1 else f"{ev['snapshots']} snapshots"
    console.print(
        f"[bold]{for_terminal(diag.path)}[/bold] ({snapshots}, {ev['duration_s']} s): "
        f"verdict [{style}]{diag.verdict}[/]" + escape(pipeline_coverage(diag)),
        soft_wrap=True,  # one line whatever its length, as the healthy line of diagnose training
    )
    if diag.verdict == "cannot_judge":  # one line: why; no table of numbers that no verdict stands on
        console.print(f"cannot judge the pipeline: {for_terminal(ev['cannot_judge'])}", soft_wrap=True)
        return
    table = Table()
    for col in ("queue", "time-avg depth", "fill", "max", "non-empty", "first→last third", "trend /s", "high"):
        table.add_column(col)
    for name, q in ev["queues"].items():
        fill = "cap. unknown" if q.get("fill_mean") is None else f"{q['fill_mean']:.0%} of {_fmt(q['capacity'])}"
        table.add_row(
            name,
            f"{q['mean']:.2f}",
            fill,
            _fmt(q["max"]),
            f"{q['nonempty_frac']:.0%}",
            f"{q['first_third_mean']:.1f} → {q['last_third_mean']:.1f}",
            f"{q['slope_per_s']:+.3f}",
            high_text(ev, name),
        )
    console.print(table)
    util = ev.get("generator_busy_frac")
    console.print(f"generator busy fraction: {'unknown' if util is None else f'{util:.0%}'}")
    if ev.get("stages"):
        console.print("stages: " + ", ".join(f"{k}={_fmt(v)}" for k, v in ev["stages"].items()))
    for note in ev.get("notes", []):
        console.print(f"[yellow]note:[/] {note}")
    console.print(f"[bold]next:[/] check {diag.next_step}")


def print_audit(data: dict[str, Any], path: str, console: Console | None = None) -> None:
    """The audit as a few small tables; the data's text is shown, never read as markup or obeyed."""
    console = console or output_console()
    data, path = for_terminal(data), for_terminal(path)
    console.print(
        f"[bold]{path}[/bold]: {counted(data['trajectories'], 'trajectory')}, {data['void']} void "
        f"({data['void_ratio']:.1%}), {counted(data['void_turns'], 'void turn')}"
    )
    if data["void_reasons"]:
        table = Table(title="void turns by reason")
        table.add_column("reason")
        table.add_column("turns", justify="right")
        table.add_column("example ids")
        for reason, row in data["void_reasons"].items():
            table.add_row(reason, str(row["turns"]), ", ".join(row["examples"]))
        console.print(table)
    if data["first_void_turn"]:
        console.print(
            "first void turn (assistant turn index: trajectories): "
            + ", ".join(f"{k}: {v}" for k, v in data["first_void_turn"].items())
        )
    vc = data["void_correct"]
    if vc["rate"] is None:
        console.print("detector-too-eager check: no void trajectory has a ground-truth 'answer'")
    else:
        console.print(
            f"detector-too-eager check: {vc['correct']} of {vc['with_ground_truth']} void trajectories with a "
            f"ground truth ended with the correct answer ({vc['rate']:.1%}); examples: "
            f"{', '.join(vc['examples']) or '-'}"
            + (f"; accuracy of valid ones: {vc['valid_accuracy']:.1%}" if vc["valid_accuracy"] is not None else "")
        )
    dist = Table(title="distributions")
    for col in ("", "n", "mean", "min", "p50", "p90", "max"):
        dist.add_column(col)
    for name, d in (("assistant turns", data["turns"]), (f"length ({data['length']['unit']})", data["length"])):
        dist.add_row(name, *(_fmt(d.get(k, "-")) for k in ("n", "mean", "min", "p50", "p90", "max")))
    console.print(dist)
    te = data["tool_errors"]
    rate = "-" if te["rate"] is None else f"{te['rate']:.1%}"
    console.print(f"tool messages: {data['tool_messages']}, errors: {te['total']} ({rate})")
    for kind, row in te["by_kind"].items():
        console.print(f"  {kind}: {row['count']} (e.g. {', '.join(row['examples'])})")
    if data["terminations"]:
        console.print("terminations: " + ", ".join(f"{k}={v}" for k, v in data["terminations"].items()))
    _print_verdicts(data.get("verdicts"), data.get("rejudged"), console)
    _print_edits(data.get("edits"), console)


def _ids(row: dict[str, Any]) -> str:
    return f" (e.g. {', '.join(row['examples'])})" if row.get("examples") else ""


def _print_verdicts(verdicts: dict[str, Any] | None, rejudged: dict[str, Any] | None, console: Console) -> None:
    """The test-judged rewards' checks (:mod:`tirl.diagnostics.verdicts`) and the re-judge, when present."""
    if verdicts is not None:
        rewarded, mismatched = verdicts["rewarded"], verdicts["mismatched"]
        unjudged = verdicts["rewarded_without_counts"]
        console.print(
            f"test verdicts: {counted(verdicts['judged'], 'trajectory')} with test counts, "
            f"{rewarded['count']} rewarded; "
            f"reward above its verdict: {mismatched['count']}{_ids(mismatched)}; "
            f"rewarded without counts: {unjudged['count']}{_ids(unjudged)}"
        )
        if verdicts["signs"]:
            console.print("signs of tampering in what the agent ran (a reason to look, not a verdict):")
            for kind, row in verdicts["signs"].items():
                console.print(f"  {kind}: {counted(row['count'], 'trajectory')}, {row['rewarded']} rewarded{_ids(row)}")
        else:
            console.print("signs of tampering in what the agent ran: none")
    if rejudged is not None:
        counts = ", ".join(f"{k} {v}" for k, v in rejudged["by_status"].items())
        console.print(f"re-judged {counted(rejudged['rewarded'], 'rewarded trajectory')}: {counts}")
        for item in rejudged["items"]:
            if item["status"] != "confirmed":
                extra = f"; agent's other files: {', '.join(item['extra_files'])}" if item["extra_files"] else ""
                console.print(f"  {item['status']}: {item['id']} (task {item['task']}): {item['detail']}{extra}")


def _print_edits(edits: dict[str, Any] | None, console: Console) -> None:
    """Where the first edits landed (:mod:`tirl.diagnostics.swe_edits`), in all, per version and bug class."""
    if edits is None:
        return
    places = ("inside", "outside", "beyond_listing", "unlisted", "no_line_edit", "no_target")
    table = Table(title="first line edit: in the function the issue names? (count, solved)")
    for col in ("", "trajectories", "solved", *places):
        table.add_column(col)

    def row(name: str, cell: dict[str, Any]) -> None:
        got = [f"{cell[p]['count']} ({cell[p]['solved']})" if p in cell else "-" for p in places]
        table.add_row(name, str(cell["trajectories"]), str(cell["solved"]), *got)

    row("all", edits)
    for version, cell in edits["by_policy_version"].items():
        row(f"policy v{version}", cell)
    for kind, cell in edits["by_bug_class"].items():
        row(kind, cell)
    console.print(table)
    share = edits["outside_share"]
    if share is not None:
        advice = ""
        if share > 0.5:
            advice = (
                " — the agent has not learned to locate the bug; RL cannot reward a fix it never samples in the "
                "right place: train locating first (tirl sft --copy-steps)"
            )
        console.print(f"first edits outside the named function: {share:.1%} of those placed{advice}")
        inside = edits.get("inside", {"count": 0, "solved": 0})
        if inside["count"]:
            console.print(
                f"first edits inside it that solved their task: {inside['solved']} of {inside['count']} "
                f"({inside['solved'] / inside['count']:.1%}; the rest found the function but not the fix)"
            )
