"""Peak resident memory of this process above a starting point, from the kernel's own counters.

:class:`PeakRss` resets the kernel's high-water mark (``/proc/self/clear_refs`` ← ``5``) and later reads it
back (``VmHWM``); what it reports is that peak minus the resident set at the reset, in MiB. Linux only;
elsewhere (or where ``/proc`` cannot be written) :meth:`PeakRss.start` returns ``None`` and so does
:meth:`PeakRss.above_mb`.

Accuracy: the kernel keeps a process's RSS in per-CPU (older kernels: per-thread) counters that it folds into
the total lazily, so ``VmHWM`` can lag the truth by up to a counter batch per CPU: a CI run on a many-core
machine read 51 MiB for a 64 MiB block, another a peak 0.15 MiB below the base. So the base and the current
RSS are read exactly, from ``/proc/self/smaps_rollup`` (a page-table walk), and the peak is the larger of
``VmHWM`` and that exact current RSS: a peak still resident when :meth:`PeakRss.above_mb` runs is exact, a
peak already freed carries the counter lag. A peak below the base means "no growth measurable at this
accuracy" and reads 0.0; the figures this module feeds are tens to thousands of MiB.
Not covered: child processes (each is its own process with its own counter) and GPU memory.
"""

from __future__ import annotations

from pathlib import Path

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
SMAPS_ROLLUP = Path("/proc/self/smaps_rollup")


def exact_rss_mib() -> float | None:
    """The resident set of this process in MiB, counted page by page (``smaps_rollup``); None where unreadable."""
    try:
        text = SMAPS_ROLLUP.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Rss:"):
            return float(line.split()[1]) / 1024.0
    return None


def status_mib(key: str) -> float | None:
    """``/proc/self/status`` field ``key`` (a ``kB`` figure such as ``VmRSS``) in MiB; None where unreadable."""
    try:
        text = STATUS.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1]) / 1024.0
    return None


class PeakRss:
    """The peak RSS since :meth:`start` above the RSS at :meth:`start` (see the module's note on accuracy)."""

    def __init__(self) -> None:
        self.base: float | None = None

    def start(self) -> float | None:
        """Reset the kernel's peak to the current RSS; that RSS in MiB (None where ``/proc`` cannot)."""
        try:
            CLEAR_REFS.write_text("5")
        except OSError:
            self.base = None
            return None
        exact = exact_rss_mib()
        self.base = exact if exact is not None else status_mib("VmHWM")
        return self.base

    def above_mb(self) -> float | None:
        """Peak RSS since :meth:`start` minus the RSS then, ≥ 0; None when :meth:`start` could not reset."""
        peak = status_mib("VmHWM")
        if self.base is None or peak is None:
            return None
        exact = exact_rss_mib()
        if exact is not None:
            peak = max(peak, exact)  # a peak still resident is read exactly, past the counters' lag
        return max(0.0, peak - self.base)
