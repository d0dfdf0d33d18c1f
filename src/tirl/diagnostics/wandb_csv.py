"""Reading a wandb CSV export ("Export panel data → CSV" of a line chart, or a runs-history export).

A chart export has one x column (``Step``, or whatever the chart's x axis is)
and, per run drawn in the chart, three columns::

    Step,"RUN - METRIC","RUN - METRIC__MIN","RUN - METRIC__MAX"

``__MIN``/``__MAX`` are the smallest and largest value inside each plotted
point's bucket (equal to the value itself when wandb did not downsample, the
spread of the group for grouped runs). A run name may itself contain
``" - "`` (``grpo - lr 1e-4 - seed 1``), so a header is split on its *last*
``" - "``; a metric name containing ``" - "`` is therefore not supported.
Columns without ``" - "`` (the x column) are shared by every run.

The result keeps the runs apart: ``{run name: [(line, row), ...]}``, where
each row holds the shared columns and that run's metrics (``METRIC``,
``METRIC__MIN``, ``METRIC__MAX``) as strings and ``line`` is the file's line
the row ends on; a CSV line on which a run has no value at all is not a row
of that run. A file whose headers name no run maps to the key ``None``.

Refused with the line: a row with more or fewer cells than the header (a
cell holding an unquoted comma, a cut-off row; the old reader cut long rows
and read short ones as no row), a column that appears twice, and a header
that is one column holding tabs (a TSV saved as ``.csv``). Blank lines are
skipped.

Not covered: exports of the runs *table* (one row per run, summary values),
which have no steps, and panels with a custom x axis that is not a step.
"""

from __future__ import annotations

import csv
from pathlib import Path

from tirl.errors import InputError, cut, show_value

AGGREGATES: tuple[str, str] = ("__MIN", "__MAX")
RUN_SEPARATOR = " - "

Row = dict[str, str]
NumberedRow = tuple[int, Row]


def split_header(header: str) -> tuple[str | None, str, str]:
    """``(run, metric, aggregate)`` of one column header; ``run`` is ``None`` for a shared column.

    >>> split_header("grpo - lr 1e-4 - seed 1 - actor/grad_norm__MAX")
    ('grpo - lr 1e-4 - seed 1', 'actor/grad_norm', '__MAX')
    >>> split_header("Step")
    (None, 'Step', '')
    """
    name = header.strip()
    suffix = next((s for s in AGGREGATES if name.endswith(s)), "")
    base = name[: len(name) - len(suffix)]
    if RUN_SEPARATOR not in base:
        return None, base.strip(), suffix
    run, metric = base.rsplit(RUN_SEPARATOR, 1)
    return run.strip(), metric.strip(), suffix


def read_wandb_csv(path: str | Path) -> dict[str | None, list[NumberedRow]]:
    """The rows of each run in a wandb CSV export (see the module docstring)."""
    p = Path(path)
    try:
        return _read_csv(p)
    except UnicodeDecodeError as exc:
        where = f"{exc.reason} at byte {exc.start}"
        raise InputError(str(p), None, f"not UTF-8 text ({where})", "re-encode the file as UTF-8") from None
    except csv.Error as exc:  # e.g. a field over the csv module's size limit, a NUL byte
        raise InputError(str(p), None, f"not a readable CSV file ({exc})", "give a wandb CSV export") from None


def _columns(p: Path, header: list[str]) -> list[tuple[str | None, str, str]]:
    """The split headers; a header that is one tab-separated column or names a column twice is refused."""
    if len(header) == 1 and "\t" in header[0]:
        raise InputError(
            str(p),
            1,
            f"the header is one column holding tabs ({cut(header[0])!r}): a tab-separated file, not a CSV",
            "export the panel as CSV (comma-separated), or convert the tabs to commas",
        )
    columns = [split_header(h) for h in header]
    seen: set[tuple[str | None, str]] = set()
    for col, (run, metric, suffix) in enumerate(columns):
        if (run, metric + suffix) in seen:
            problem = f"column {show_value(header[col])} appears twice"
            raise InputError(str(p), 1, problem, "export each metric once per run")
        seen.add((run, metric + suffix))
    return columns


def _read_csv(p: Path) -> dict[str | None, list[NumberedRow]]:
    with p.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return {}
        columns = _columns(p, header)
        runs: list[str | None] = []
        for run, _, _ in columns:
            if run is not None and run not in runs:
                runs.append(run)
        out: dict[str | None, list[NumberedRow]] = {r: [] for r in runs or [None]}
        for values in reader:
            if not any(v.strip() for v in values):
                continue
            if len(values) != len(columns):
                raise InputError(
                    str(p),
                    reader.line_num,
                    f"the row has {len(values)} cells for the header's {len(columns)} columns",
                    "every row needs one cell per column (quote a cell that holds a comma)",
                )
            shared: Row = {}
            per_run: dict[str | None, Row] = {r: {} for r in out}
            for (run, metric, suffix), value in zip(columns, values, strict=True):
                if run is None:
                    shared[metric + suffix] = value
                elif value.strip():
                    per_run[run][metric + suffix] = value
            for run, row in per_run.items():
                if row or not runs:
                    out[run].append((reader.line_num, {**shared, **row}))
    return out
