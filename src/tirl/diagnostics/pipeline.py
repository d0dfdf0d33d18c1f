"""Which rollout stage is the bottleneck? A verdict from a pipeline trace (queue depths over time).

Reads the trace JSONL of ``DESIGN.md`` (one snapshot per line: ``t``,
``init_queue``, ``run_queue``, ``eval_queue``, ``gpu_util`` and, when the
writer has them, ``X_busy``, ``X_blocked``, ``X_done``, the capacity of each
queue ``X_queue_cap`` and the pool sizes ``X_workers``). Depths are averaged
over time (each snapshot weighted by the time to the next one; gaps longer
than three typical intervals — the trainer's update between two collects —
are not counted). "High" is relative, never an absolute depth: a few items
in every queue of a busy pipeline is buffering, not a shortage.

* With capacities, a queue is **high** when its time-averaged *fill*
  (depth / capacity) is at least ``high_frac`` and it is non-empty at least
  ``busy_frac`` of the time. ``init_queue``'s capacity is the whole request.
* Without capacities (older traces, the batch schedules), a queue is high
  only when it is shown to be full — the stage upstream is blocked on it at
  least ``blocked_frac`` of the time (``init_blocked`` → ``run_queue``,
  ``run_blocked`` → ``eval_queue``) — or when it is rising. Steady depths
  are then not judged, and the evidence says so: ``evidence["not_judged"]``
  lists such a queue that held work most of the time, and the tables show
  "not judged" in its "high" column instead of "no" (:func:`high_text`).
* A queue is **rising** when the mean of the last third of the trace exceeds
  the first third by at least ``max(rise_items, 50 %, rise_frac × capacity)``
  and its slope is positive.
* The generator is **idle** when the time-averaged ``gpu_util`` (the
  fraction of time it had work) is below ``idle_util``.

The named numbers are fields of :class:`~tirl.diagnostics.thresholds.PipelineThresholds`.

The verdict takes the most downstream congested stage, because a congested
stage fills the bounded queue in front of it and blocks the stages upstream:
that backpressure is the design working, not a second bottleneck.

* ``overall``: all three high and all three still rising while the generator
  is busy (a backpressure chain fills queues up to their caps; queues that keep
  growing everywhere mean too little capacity everywhere), or all three high
  and nothing blocked — every stage is saturated;
* ``evaluator``: ``eval_queue`` high or rising; also when all three are high
  but runners are blocked on a full ``eval_queue`` (backpressure chain);
* ``runner``: ``run_queue`` high, ``eval_queue`` low (a high ``init_queue``
  with blocked initializers is backpressure);
* ``initializer``: ``init_queue`` high — or non-empty most of the time while
  the generator is idle — and ``run_queue`` low;
* ``starved``: all low but the generator idle;
* ``healthy``: none of these.

A rule that the trace does not let run in full is listed in ``not_checked`` (verdict kind -> why; ``"only in
part: …"`` where it ran in part), as ``diagnose training`` lists its own, and a ``healthy`` verdict with such a
list is healthy only in part. Only the rules tried before the verdict given are listed (in the order
``overall``, ``evaluator``, ``runner``, ``initializer``, ``starved``), as only they could have given another:

* no ``gpu_util``: ``starved`` (not run at all) and, when ``init_queue`` held work at least ``busy_frac`` of
  the time, the ``initializer``'s idle-generator half; an ``evaluator`` verdict on queues that are all high and
  all rising could have been ``overall``;
* a queue without its capacity that is not high and held work at least ``busy_frac`` of the time (a steady
  depth, not judged): the rule of its stage and ``overall`` (when the other queues are high or unjudged too and
  the runners' blocking does not make it the evaluator's backpressure). A queue that held work less often is
  not high at any capacity, and its missing capacity hides nothing;
* no ``run_blocked``: an ``overall`` verdict (all three high) could have been the evaluator's backpressure.

``cannot_judge`` lists nothing: it judged nothing.

Before any of these, a trace that cannot support a verdict gets ``cannot_judge``, with the reason in one
line (``evidence["cannot_judge"]``): no snapshot, a single snapshot, snapshots that all share one ``t`` (the
trace spans no time, so no depth can be averaged over time), fewer than ``min_snapshots`` (6) snapshots that
count, or a trace that shows no work at all (every queue empty in every snapshot, and no busy or blocked
worker, no completion and no generator use). Before, each of these was ``healthy``. Six is the least on
which the rising rule compares two readings with two (the mean of the first third of the snapshots with the
last third's; below two a third, one noisy snapshot makes a rise). A snapshot counts when it carries time (a
weight of the averages: not at the time of the next one, not before a pause) and is not the drained end of a
collect: the snapshot tirl's tracer writes after each collect (the last of its ``step``, every queue empty,
no worker busy) shows no queue at work, and a collect shorter than ``rollout.trace_interval_s`` leaves only
that one.

A torn last line of a JSONL trace (a run killed mid-write) is skipped, and :func:`load_trace` hands its note
(``FILE:LINE: the last line is torn …``, the training-log reader's words) to the caller.

Not covered: queues that are not in the trace (e.g. a server-side LLM
queue), and per-slot batch occupancy of the generator.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.diagnostics.adapters import found_text, read_rows
from tirl.diagnostics.log_rows import jsonl_objects
from tirl.diagnostics.thresholds import PipelineThresholds
from tirl.errors import InputError
from tirl.inputs import input_file
from tirl.jsonl import other_reader

QUEUES: tuple[str, str, str] = ("init_queue", "run_queue", "eval_queue")
STAGES: tuple[str, str, str] = ("init", "run", "eval")
VERDICTS: tuple[str, ...] = (
    "initializer", "runner", "evaluator", "overall", "starved", "healthy", "cannot_judge",
)  # fmt: skip

NEXT_STEP: dict[str, str] = {
    "initializer": "the Initializer: image/workspace cache hits, sandbox start time, storage speed, how many "
    "sandboxes a node runs stably; then add Initializer workers (rollout.init_workers)",
    "runner": "the Agent Runner: generation concurrency, whether each action waits synchronously for the "
    "environment, whether max turns is too large; then raise generation throughput",
    "evaluator": "the Evaluator: test-suite run time, patch application and retries, test timeouts, the "
    "number of evaluator workers (rollout.eval_workers)",
    "overall": "capacity: scale the Evaluator and the Initializer first, then the LLM generation throughput",
    "starved": "supply and hidden barriers: task generation, whether bounded-queue backpressure misleads an "
    "upstream stage, an `await` that serialises episodes or a batch-wide wait",
    "healthy": "nothing to fix in the pipeline; change one variable at a time and compare queue depths and step time",
    "cannot_judge": "the trace itself: record one over whole collects (tirl train writes pipeline_trace.jsonl, one "
    "snapshot every rollout.trace_interval_s) and diagnose that",
}


@dataclass(frozen=True, slots=True)
class PipelineDiagnosis:
    """One verdict with the evidence behind it and the recommended next step.

    ``not_checked``: verdict kind -> why its rule could not run on the trace (``"only in part: …"`` where it ran
    in part); only rules that could have given another verdict, empty when every rule ran.
    """

    path: str
    verdict: str
    evidence: dict[str, Any]
    not_checked: dict[str, str] = field(default_factory=dict)

    @property
    def next_step(self) -> str:
        """What to check first (seed 003)."""
        return NEXT_STEP[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` shape: ``verdict``, ``evidence`` and ``not_checked`` (``{}`` when every rule ran)."""
        return {"verdict": self.verdict, "evidence": self.evidence, "not_checked": dict(self.not_checked)}


_MAX_VALUE = 1e12  # no time in seconds, queue depth or count in a trace comes near it; beyond, sums overflow


def _num(v: Any) -> float | None:
    """A number of the trace, clamped into ``[-1e12, 1e12]``; ``None`` when absent, not a number or NaN.

    ``Infinity`` and 1e308 read as 1e12: as large as a value can be, and small enough that sums do not overflow.
    """
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if f != f else min(max(f, -_MAX_VALUE), _MAX_VALUE)


def _numbered_rows(path: str | Path, notes: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, snapshot)`` pairs; a torn last JSONL line is skipped and noted in ``notes``.

    The file's own line numbers for JSONL (blank lines skipped), the row's line under the header for a CSV.
    """
    p = input_file(path, "give the run directory or its pipeline_trace.jsonl (tirl train writes it)")  # pipe: read once
    if p.suffix.lower() == ".csv":
        return [(i, row) for i, row in enumerate(read_rows(p), start=2)]
    rows, torn = jsonl_objects(p, fix="write one snapshot per line")
    notes.extend(torn)
    return rows


def load_trace(path: str | Path, notes: list[str] | None = None) -> list[dict[str, Any]]:
    """Read and validate a trace: every snapshot needs ``t`` and the three queue depths.

    ``notes``: receives a line for the user when the last line was torn and skipped (print it as ``note:``).

    ``t`` must be a number within ±1e12 that never runs backwards (tirl's tracer continues a resumed run's
    clock), and a depth a count >= 0 (``Infinity`` and values beyond 1e12 read as 1e12): a trace that breaks
    this is refused with the line, not sorted into shape (the old reader sorted it and called a backwards
    trace healthy).
    """
    read_notes: list[str] = []
    rows = _numbered_rows(path, read_notes)
    if notes is not None:
        notes.extend(read_notes)
    if not rows:
        torn = " (its only line is torn: a run killed mid-write)" if read_notes else ""
        raise InputError(str(path), None, f"the trace has no snapshots{torn}", "point at a pipeline_trace.jsonl")
    last_t, last_line = -_MAX_VALUE, 0
    for line, row in rows:
        missing = [k for k in ("t", *QUEUES) if k not in row]
        not_numbers = [f"{k}={row[k]!r}"[:40] for k in ("t", *QUEUES) if k in row and _num(row[k]) is None]
        if missing or not_numbers:
            problems = [f"lacks {', '.join(missing)} (keys found: {found_text(set(row))})"] if missing else []
            problems += [f"has a non-number: {', '.join(not_numbers)}"] if not_numbers else []
            raise InputError(
                str(path),
                line,
                f"snapshot {'; '.join(problems)}",
                (missing and other_reader(set(row), str(path)))
                or "each line needs t, init_queue, run_queue, eval_queue (see the pipeline trace format)",
            )
        t = float(row["t"])
        if not -_MAX_VALUE < t < _MAX_VALUE:
            raise InputError(str(path), line, f"t={row['t']!r} is not a time", "t is seconds within ±1e12")
        bad = [k for k in QUEUES if float(row[k]) < 0]
        if bad:
            raise InputError(str(path), line, f"{bad[0]}={row[bad[0]]!r} is negative", "a queue depth is a count >= 0")
        row.update({k: _num(row[k]) for k in QUEUES})  # Infinity and 1e308 read as 1e12: a full queue
        if t < last_t:
            raise InputError(
                str(path),
                line,
                f"time runs backwards: t={t:g} after t={last_t:g} on line {last_line}",
                "snapshots must be in time order (one tracer per file; tirl continues t across a resume)",
            )
        last_t, last_line = t, line
    return [row for _, row in rows]


def _weights(ts: list[float], gap_factor: float) -> list[float]:
    if len(ts) < 2:
        return [1.0] * len(ts)
    dts = [b - a for a, b in itertools.pairwise(ts)]
    positive = [d for d in dts if d > 0]
    typical = statistics.median(positive) if positive else 1.0
    cap = gap_factor * typical
    return [max(d, 0.0) if d <= cap else 0.0 for d in dts] + [typical]


def _wmean(values: list[float | None], w: list[float]) -> float | None:
    pairs = [(v, wi) for v, wi in zip(values, w, strict=True) if v is not None and wi > 0]
    total = sum(wi for _, wi in pairs)
    return sum(v * wi for v, wi in pairs) / total if total > 0 else None


def _slope(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx > 0 else 0.0


def _queue_stats(rows: list[dict[str, Any]], q: str, w: list[float], active_t: list[float]) -> dict[str, Any]:
    depths = [_num(r[q]) or 0.0 for r in rows]
    n = len(depths)
    third = max(1, n // 3)
    first = statistics.fmean(depths[:third])
    last = statistics.fmean(depths[-third:])
    avg = _wmean(list(depths), w) or 0.0
    nonempty = _wmean([1.0 if d > 0 else 0.0 for d in depths], w) or 0.0
    caps = [_num(r.get(f"{q}_cap")) for r in rows]
    fills = [d / c if c else None for d, c in zip(depths, caps, strict=True)]
    fill = _wmean(fills, w)
    known = [c for c in caps if c]
    return {
        "mean": round(avg, 3),
        "max": max(depths),
        "nonempty_frac": round(nonempty, 3),
        "first_third_mean": round(first, 3),
        "last_third_mean": round(last, 3),
        "slope_per_s": round(_slope(active_t, depths), 4),
        "capacity": max(known) if known else None,
        "fill_mean": None if fill is None else round(fill, 3),
    }


def _rising(q: dict[str, Any], th: PipelineThresholds) -> bool:
    first, last = q["first_third_mean"], q["last_third_mean"]
    floor = max(th.rise_items, 0.5 * first, th.rise_frac * (q["capacity"] or 0.0))
    return bool(q["slope_per_s"] > 0 and last - first >= floor)


def _high(queues: dict[str, Any], rising: dict[str, bool], stages: dict[str, Any], th: PipelineThresholds) -> dict:
    """High by fill where the capacity is known; else only when shown full (upstream blocked) or rising."""
    full_by_blocking = {
        "init_queue": False,
        "run_queue": (stages.get("init_blocked_frac") or 0.0) >= th.blocked_frac,
        "eval_queue": (stages.get("run_blocked_frac") or 0.0) >= th.blocked_frac,
    }
    out = {}
    for name, q in queues.items():
        if q["fill_mean"] is not None:
            out[name] = q["fill_mean"] >= th.high_frac and q["nonempty_frac"] >= th.busy_frac
        else:
            out[name] = full_by_blocking[name] or rising[name]
    return out


def _stage_stats(rows: list[dict[str, Any]], w: list[float], duration: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in STAGES:
        busy = [_num(r.get(f"{s}_busy")) for r in rows]
        if any(b is not None for b in busy):
            peak = max(b for b in busy if b is not None)
            mean = _wmean(busy, w)
            out[f"{s}_busy_mean"] = None if mean is None else round(mean, 3)
            out[f"{s}_utilisation"] = round(mean / peak, 3) if mean is not None and peak > 0 else None
        blocked = [_num(r.get(f"{s}_blocked")) for r in rows]
        if any(b is not None for b in blocked):
            frac = _wmean([None if b is None else float(b > 0) for b in blocked], w)
            out[f"{s}_blocked_frac"] = None if frac is None else round(frac, 3)
        done = [d for r in rows if (d := _num(r.get(f"{s}_done"))) is not None]
        if len(done) >= 2 and duration > 0:
            out[f"{s}_throughput_per_s"] = round((done[-1] - done[0]) / duration, 4)
    return out


def _verdict(
    queues: dict[str, Any], high: dict[str, bool], rising: dict[str, bool], util: float | None, stages: dict[str, Any],
    th: PipelineThresholds,
) -> tuple[str, list[str]]:  # fmt: skip
    """The most downstream congested stage (see the module docstring) and the notes that explain it."""
    notes: list[str] = []
    run_blocked = stages.get("run_blocked_frac") or 0.0
    init_blocked = stages.get("init_blocked_frac") or 0.0
    idle = util is not None and util < th.idle_util
    init_waiting = queues["init_queue"]["nonempty_frac"] >= th.busy_frac and idle
    if high["init_queue"] and high["run_queue"] and high["eval_queue"]:
        if all(rising.values()) and util is not None and not idle:
            notes.append("every queue is backed up and still rising while the generator is busy: more capacity "
                         "everywhere (the seed's all-three-high row), not one stage's backpressure")  # fmt: skip
            return "overall", notes
        if run_blocked >= th.blocked_frac:
            notes.append("runners wait for room in the full eval_queue: the upstream queues are backpressure")
            return "evaluator", notes
        return "overall", notes
    if high["eval_queue"] or rising["eval_queue"]:
        return "evaluator", notes
    if high["run_queue"]:
        if high["init_queue"]:
            backpressure = ": the initializers are blocked on the bounded run_queue — backpressure, the design working"
            notes.append("init_queue is high too" + (backpressure if init_blocked >= th.blocked_frac else ""))
        return "runner", notes
    if high["init_queue"] or init_waiting:
        if not high["init_queue"]:
            notes.append("init_queue holds work most of the time while the generator is idle")
        return "initializer", notes
    if idle:
        return "starved", notes
    return "healthy", notes  # without gpu_util, starved was not checked: see _not_checked


def _shows_work(rows: list[dict[str, Any]]) -> bool:
    """Whether anything in the trace shows work.

    A queued episode, a busy or blocked worker, generator use, or a stage's completion count that grew.
    """
    counts = (*QUEUES, *(f"{s}_{k}" for s in STAGES for k in ("busy", "blocked")), "gpu_util")
    if any((_num(r.get(k)) or 0.0) > 0 for r in rows for k in counts):
        return True
    for s in STAGES:
        done = [d for r in rows if (d := _num(r.get(f"{s}_done"))) is not None]
        if done and max(done) > min(done):
            return True
    return False


def _rule_notes(verdict: str, capacity_known: bool, stages: dict[str, Any], th: PipelineThresholds) -> list[str]:
    """What the rules could not see (no capacities) and backpressure that is not the verdict's."""
    notes = []
    if not capacity_known:
        notes.append(
            "no queue capacities in the trace: a queue counts as high only when the stage upstream is blocked on it "
            "or it is rising; steady depths are not judged (tirl's pipeline writes X_queue_cap)"
        )
    if (stages.get("init_blocked_frac") or 0.0) >= th.blocked_frac and verdict != "runner":
        notes.append("initializers are often blocked on the bounded run_queue: backpressure is the design working")
    return notes


#: The verdicts in the order the rules try them (the most downstream congested stage first): a rule that could not
#: run can have hidden a verdict before the one given, never one after it.
ORDER: tuple[str, ...] = ("overall", "evaluator", "runner", "initializer", "starved", "healthy")
_KIND_OF_QUEUE = {"init_queue": "initializer", "run_queue": "runner", "eval_queue": "evaluator"}


def unjudged_queues(queues: dict[str, Any], high: dict[str, bool], th: PipelineThresholds) -> list[str]:
    """The queues whose depth no rule judged: no capacity in the trace, not high, and work most of the time.

    A queue without its capacity that held work less often than ``busy_frac`` is not high at any capacity.
    """
    steady = [q for q in QUEUES if queues[q]["fill_mean"] is None and not high[q]]
    return [q for q in steady if queues[q]["nonempty_frac"] >= th.busy_frac]


def high_text(evidence: dict[str, Any], queue: str) -> str:
    """The "high" cell of ``queue`` in the tables of ``tirl diagnose pipeline`` and the report.

    ``yes`` / ``no``, or ``not judged (capacity unknown)`` for a queue in ``evidence["not_judged"]``
    (:func:`unjudged_queues`), with `` (rising)`` where it rose.
    """
    if queue in evidence.get("not_judged", ()):
        text = "not judged (capacity unknown)"
    else:
        text = "yes" if evidence["high"][queue] else "no"
    return text + (" (rising)" if evidence["rising"][queue] else "")


def _not_checked(
    verdict: str, queues: dict[str, Any], high: dict[str, bool], rising: dict[str, bool], util: float | None,
    stages: dict[str, Any], th: PipelineThresholds,
) -> dict[str, str]:  # fmt: skip
    """Verdict kind -> why its rule could not run on the trace (``"only in part: …"`` where it ran in part).

    Only the rules that could have given another verdict than ``verdict`` (see the module docstring).
    """
    if verdict not in ORDER:
        return {}
    before = ORDER[: ORDER.index(verdict)]
    why: dict[str, list[str]] = {}
    blocked = (stages.get("run_blocked_frac") or 0.0) >= th.blocked_frac
    idle = util is not None and util < th.idle_util
    steady = unjudged_queues(queues, high, th)
    if steady:
        its = "its capacity" if len(steady) == 1 else "their capacities"
        text = (
            f"{', '.join(steady)} held work most of the time, and without {its} in the trace a steady depth is not "
            "judged"
        )
        kinds = {_KIND_OF_QUEUE[q] for q in steady}
        if all(high[q] or q in steady for q in QUEUES) and (not blocked or (all(rising.values()) and not idle)):
            kinds.add("overall")  # all three high could have been overall (not the evaluator's backpressure)
        for kind in (k for k in before if k in kinds):
            why.setdefault(kind, []).append(text)
    if util is None and verdict == "healthy":
        why["starved"] = ["the trace has no gpu_util, so an idle generator cannot be seen"]
        if queues["init_queue"]["nonempty_frac"] >= th.busy_frac:
            why.setdefault("initializer", []).append(
                "whether the generator was idle while init_queue held work needs gpu_util in the trace"
            )
    if util is None and verdict == "evaluator" and all(high.values()) and all(rising.values()):
        why["overall"] = [
            "every queue is high and rising, and whether the generator was busy meanwhile (too little capacity "
            "everywhere, not the evaluator's backpressure) needs gpu_util in the trace"
        ]
    rising_busy = all(rising.values()) and util is not None and not idle  # overall whether runners block or not
    if verdict == "overall" and not rising_busy and "run_blocked_frac" not in stages:
        why["evaluator"] = [
            "every queue is high, and whether the runners were blocked on a full eval_queue (the evaluator's "
            "backpressure) needs run_blocked in the trace"
        ]
    return {k: ("" if k == "starved" else "only in part: ") + "; ".join(why[k]) for k in ORDER if k in why}


def _drained_end(rows: list[dict[str, Any]], i: int) -> bool:
    """Whether snapshot ``i`` is the one tirl's tracer writes after a collect: the last of its ``step``, drained.

    Drained: every queue empty and every stage's ``X_busy`` present and 0 (and none blocked): no episode left in
    the pipeline. A trace without ``step`` or ``X_busy`` has none.
    """
    step = rows[i].get("step")
    if step is None or (i + 1 < len(rows) and rows[i + 1].get("step") == step):
        return False
    r = rows[i]
    idle = all(_num(r.get(f"{s}_busy")) == 0 and not _num(r.get(f"{s}_blocked")) for s in STAGES)
    return idle and all(_num(r[q]) == 0 for q in QUEUES)


def _too_few(rows: list[dict[str, Any]], w: list[float], th: PipelineThresholds) -> str | None:
    """Why the snapshots that count are fewer than ``th.min_snapshots`` (one line), or None.

    A snapshot counts when it carries time (a weight of the time averages) and is not a drained end of a collect.
    """
    ends = [_drained_end(rows, i) for i in range(len(rows))]
    counted = sum(wi > 0 and not end for wi, end in zip(w, ends, strict=True))
    if counted >= th.min_snapshots:
        return None
    drained, timeless = sum(ends), sum(wi <= 0 and not end for wi, end in zip(w, ends, strict=True))
    left = [f"{drained} written after a collect had drained the pipeline"] if drained else []
    left += [f"{timeless} with no time to the next snapshot or a pause after it"] if timeless else []
    which = f"{counted} of the {len(rows)} snapshots count ({', '.join(left)})" if left else f"{counted} snapshots"
    return (
        f"only {which}, and the rules need {th.min_snapshots}: the rising rule compares the first third of the "
        "trace with the last, and a third of fewer than two snapshots is a single reading (a lower "
        "rollout.trace_interval_s takes more)"
    )


def _unjudgeable(rows: list[dict[str, Any]], w: list[float], duration: float, th: PipelineThresholds) -> str | None:
    """Why the trace cannot support any verdict (one line), or None; see the module docstring."""
    n = len(rows)
    if n == 0:
        return "no snapshots in the trace"
    if n == 1:
        return "only one snapshot, and depths over time need two or more at different times"
    if duration <= 0:
        return (
            f"all {n} snapshots have the same time t={float(rows[0]['t']):g}, so the trace spans no time to average "
            "queue depths over"
        )
    few = _too_few(rows, w, th)
    if few is not None:
        return few
    if not _shows_work(rows):
        return (
            f"no work in the trace: every queue is empty in all {n} snapshots and no stage shows a busy or blocked "
            "worker, a completion or generator use (a trace taken outside any collect, or a writer that leaves "
            "these fields at 0)"
        )
    return None


def diagnose_pipeline(
    rows: list[dict[str, Any]], path: str = "", thresholds: PipelineThresholds | None = None
) -> PipelineDiagnosis:
    """The bottleneck verdict of a trace (see the module docstring for the rules)."""
    th = thresholds or PipelineThresholds()
    if not rows:
        why = _unjudgeable(rows, [], 0.0, th)
        return PipelineDiagnosis(path, "cannot_judge", {"snapshots": 0, "duration_s": 0.0, "cannot_judge": why})
    ts = [float(r["t"]) for r in rows]
    w = _weights(ts, th.gap_factor)
    active_t: list[float] = []
    acc = 0.0
    for wi in w:
        active_t.append(acc)
        acc += wi
    duration = sum(w[:-1]) if len(w) > 1 else 0.0
    queues = {q: _queue_stats(rows, q, w, active_t) for q in QUEUES}
    rising = {q: _rising(queues[q], th) for q in QUEUES}
    util = _wmean([_num(r.get("gpu_util")) for r in rows], w)
    stages = _stage_stats(rows, w, duration)
    high = _high(queues, rising, stages, th)
    capacity_known = all(queues[q]["capacity"] is not None for q in QUEUES)
    why = _unjudgeable(rows, w, duration, th)
    notes: list[str] = []
    unchecked: dict[str, str] = {}
    if why is not None:  # no bottleneck and no health: the notes on the rules would explain a verdict not given
        verdict = "cannot_judge"
    else:
        verdict, notes = _verdict(queues, high, rising, util, stages, th)
        notes += _rule_notes(verdict, capacity_known, stages, th)
        unchecked = _not_checked(verdict, queues, high, rising, util, stages, th)
    evidence: dict[str, Any] = {
        "snapshots": len(rows),
        "duration_s": round(duration, 3),
        "capacity_known": capacity_known,
        "queues": queues,
        "high": high,
        "not_judged": [] if why is not None else unjudged_queues(queues, high, th),
        "rising": rising,
        "generator_busy_frac": None if util is None else round(util, 3),
        "stages": stages,
    }
    workers = {s: int(n) for s in STAGES if (n := _num(rows[-1].get(f"{s}_workers"))) is not None}
    if workers:
        evidence["workers"] = workers
    if why is not None:
        evidence["cannot_judge"] = why
    if notes:
        evidence["notes"] = notes
    return PipelineDiagnosis(path=path, verdict=verdict, evidence=evidence, not_checked=unchecked)


def diagnose_trace_file(path: str | Path, thresholds: PipelineThresholds | None = None) -> PipelineDiagnosis:
    """Load and diagnose a pipeline trace file."""
    return diagnose_pipeline(load_trace(path), str(path), thresholds)
