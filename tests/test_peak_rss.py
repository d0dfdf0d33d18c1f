"""benchmarks/peak_rss.py: the peak above the start grows with an allocation, never reads negative, None off Linux."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from tests.benchmark_module import load_benchmark


@pytest.fixture
def peak_rss() -> ModuleType:
    return load_benchmark("peak_rss")


def test_an_allocation_after_start_shows_in_the_peak(peak_rss: ModuleType) -> None:
    memory = peak_rss.PeakRss()
    base = memory.start()
    assert base is not None and base > 0
    block = bytearray(256 * 1024 * 1024)
    block[::4096] = b"\x01" * len(block[::4096])  # every page touched
    used = memory.above_mb()
    del block
    # the margin: memory the process freed meanwhile (a clean-clone run read 64 MiB as 55.96) and the counters' lag
    assert used is not None and 200 <= used <= 400, used


def test_a_peak_read_below_the_base_is_zero_not_negative(peak_rss: ModuleType, tmp_path: Path) -> None:
    # the kernel's split per-thread RSS counters can put a later VmHWM some pages under the base (a CI run: -0.15)
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  204800 kB\n")
    peak_rss.STATUS, peak_rss.CLEAR_REFS = status, tmp_path / "clear_refs"
    peak_rss.SMAPS_ROLLUP = tmp_path / "no-smaps_rollup"  # the counters alone, as where smaps_rollup is absent
    memory = peak_rss.PeakRss()
    assert memory.start() == 200.0
    status.write_text("Name:\tpython\nVmHWM:\t  204648 kB\nVmRSS:\t  204648 kB\n")
    assert memory.above_mb() == 0.0
    status.write_text("Name:\tpython\nVmHWM:\t  215040 kB\nVmRSS:\t  204648 kB\n")
    assert memory.above_mb() == 10.0


def test_no_proc_means_none_rather_than_a_made_up_figure(peak_rss: ModuleType, tmp_path: Path) -> None:
    peak_rss.CLEAR_REFS = tmp_path / "missing-dir" / "clear_refs"
    memory = peak_rss.PeakRss()
    assert memory.start() is None and memory.above_mb() is None
    peak_rss.STATUS = tmp_path / "missing-status"
    assert peak_rss.status_mib("VmRSS") is None
    peak_rss.SMAPS_ROLLUP = tmp_path / "missing-smaps"
    assert peak_rss.exact_rss_mib() is None


def test_a_lagging_counter_is_overruled_by_the_exact_resident_set(peak_rss: ModuleType, tmp_path: Path) -> None:
    # the many-core CI case: VmHWM read 51 MiB above the base while a 64 MiB block was resident
    status, rollup = tmp_path / "status", tmp_path / "smaps_rollup"
    peak_rss.STATUS, peak_rss.CLEAR_REFS, peak_rss.SMAPS_ROLLUP = status, tmp_path / "clear_refs", rollup
    status.write_text("VmHWM:\t  102400 kB\n")
    rollup.write_text("55bb-7ffd ---p 00000000 00:00 0 [rollup]\nRss:\t  102400 kB\nPss:\t 1 kB\n")
    memory = peak_rss.PeakRss()
    assert memory.start() == 100.0
    status.write_text("VmHWM:\t  154828 kB\n")  # 51.2 MiB above: the counters' lag
    rollup.write_text("Rss:\t  167936 kB\n")  # 64 MiB above, counted page by page
    assert memory.above_mb() == 64.0
    rollup.write_text("Rss:\t  102400 kB\n")  # freed since: the counter's peak is all there is
    assert memory.above_mb() == 51.19921875
