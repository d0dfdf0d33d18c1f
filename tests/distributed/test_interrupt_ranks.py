"""Ctrl-C and SIGTERM on a real `tirl train` (``--nproc 2`` ranks on gloo, and ``--nproc 1``), tiny random model.

Each test starts `tirl train` in its own session (its own process group, as a terminal's foreground job is), waits
for a state in the run directory, and sends a real signal: SIGINT to the whole group (what Ctrl-C does) or
SIGTERM to the launcher alone (what a scheduler does). It then checks, against the real process table, that
every process the run started (rank 1, sandbox servers, their children) is gone — a zombie counts as gone, this
container's init may be slow to reap — the exit status (130 / 143), the last stderr line (what was kept and
`tirl train --resume RUN_DIR`), that the newest checkpoint verifies, and (where it adds something) that the
printed command continues the run. Deadlines are generous (minutes); nothing asserts a duration.

Covered moments: after a checkpoint (ranks between or inside steps), during the first step (no checkpoint
yet), and when the hidden ``.step-N.*`` staging directory of a checkpoint was seen — the signal lands some
moments later, so inside or just after that write; which of the two is not repeatable, and the assertions hold
for both. Where the moment matters, a process is held still by SIGSTOP while the signals wait on it: rank 0
inside a checkpoint write (its staging directory there, ``step-K`` not yet), rank 0 inside its wait for a rank
it sent SIGTERM (seen pending on that stopped rank). Those cover a second stop signal during the clean-up
(the ranks killed at once, the write abandoned) and SIGTERM to a run started with SIGINT ignored (the write
finished first). Not covered: ``--backend ray --nproc N`` (Ray Train tears its workers down), SIGKILL of the
launcher after the rendezvous (rank 1's collective fails when rank 0's socket closes, as before; the parent
watch also covers it).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from tests.tiny_run import TINY_TRAIN_ARGS, save_tiny_model, with_sets

from tirl.cli import main
from tirl.trainer.checkpoint import latest_checkpoint
from tirl.trainer.logging import read_metrics
from tirl.trainer.run_files import step_dirs

ARGS = with_sets(TINY_TRAIN_ARGS, "trainer.checkpoint_every=1")
DEADLINE_S = 240.0  # a state to appear, or the run to end after the signal: far above the ~10 s either takes


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    """After each test, SIGKILL whatever a failing test left running of the runs it started (no orphans here)."""
    yield
    table = _table()
    for run in Run.started:
        for pid, cmd in run.seen.items():
            if pid in table and table[pid][2] == cmd:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
    Run.started.clear()


def _table() -> dict[int, tuple[int, str, bytes]]:
    """Every process now: pid -> (parent pid, state letter, command line)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            out[int(entry.name)] = (int(fields[1]), fields[0], (entry / "cmdline").read_bytes().replace(b"\0", b" "))
        except (OSError, ValueError):
            continue
    return out


def _descendants(root: int) -> dict[int, bytes]:
    """The live processes below ``root`` (children, grandchildren, …): pid -> command line."""
    table, found = _table(), {root}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _, _) in table.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return {pid: table[pid][2] for pid in found - {root} if table[pid][1] != "Z"}


def _alive(pids: dict[int, bytes]) -> dict[int, bytes]:
    """Those of ``pids`` still running (same pid and command line, not a zombie), after a grace of a minute."""
    deadline = time.monotonic() + 60  # the run exited already: what is left should be gone at once, or never
    while True:
        table = _table()
        left = {p: c for p, c in pids.items() if p in table and table[p][1] != "Z" and table[p][2] == c}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _default_sigint() -> None:
    """(In the child, before exec.) SIGINT back to its default action."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ignore_sigint() -> None:
    """(In the child, before exec.) SIGINT ignored, as a shell's background job (``cmd &``, ``trap '' INT``) has it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Run:
    """A `tirl train` subprocess in its own session, and every process ever seen below it."""

    started: ClassVar[list[Run]] = []

    def __init__(self, model_dir: Path, run_dir: Path, nproc: int, *, sigint_ignored: bool = False) -> None:
        cmd = [sys.executable, "-m", "tirl.cli", "train", "--model", str(model_dir), "--run-dir", str(run_dir)]
        cmd += ["--steps", "500", "--nproc", str(nproc), *ARGS]  # far more steps than any test lets it reach
        self.run_dir = run_dir
        self.seen: dict[int, bytes] = {}
        # a terminal's foreground job has SIGINT at its default; a pytest-xdist worker ignores SIGINT, and an
        # ignored signal is inherited (the run would ignore Ctrl-C, as a background job rightly does)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True,
                                     preexec_fn=_ignore_sigint if sigint_ignored else _default_sigint)  # fmt: skip
        Run.started.append(self)

    def wait_for(self, what: str, ready: Callable[[], bool]) -> None:
        """Poll (tightly) until ``ready()``, recording the processes below the run."""
        deadline = time.monotonic() + DEADLINE_S
        while not ready():
            self.seen.update(_descendants(self.proc.pid))
            assert self.proc.poll() is None, f"exited before {what}: {self.proc.communicate()[1][-2000:]}"
            assert time.monotonic() < deadline, f"no {what} within {DEADLINE_S:.0f}s"
            time.sleep(0.005)
        self.seen.update(_descendants(self.proc.pid))

    def signal(self, sig: signal.Signals) -> tuple[int, list[str]]:
        """SIGINT to the whole group (a terminal's Ctrl-C), SIGTERM to the launcher only; (status, stderr lines)."""
        if sig == signal.SIGINT:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        return self.ended()

    def ended(self) -> tuple[int, list[str]]:
        """Wait for the end of the run (after a signal); (status, stderr lines)."""
        try:
            _, err = self.proc.communicate(timeout=DEADLINE_S)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode, err.strip().splitlines()


def _checkpoints(run_dir: Path) -> list[int]:
    return [step for step, path in step_dirs(run_dir) if path.is_dir()]


def _rank_1(seen: dict[int, bytes]) -> dict[int, bytes]:
    """The follower processes among ``seen`` (a child it forked shows its command line until its exec)."""
    return {p: c for p, c in seen.items() if b"tirl.distributed.follower" in c}


def _ranks(seen: dict[int, bytes]) -> set[bytes]:
    """The ``--rank`` values of the followers seen (one per rank, however many forks showed its command line)."""
    return {m.group(1) for c in _rank_1(seen).values() if (m := re.search(rb"--rank (\d+)", c))}


def _follower(launcher: int) -> int:
    """The pid of rank 1 itself: the launcher's child running the follower (not a fork of it)."""
    (pid,) = [p for p, (ppid, _, c) in _table().items() if ppid == launcher and b"tirl.distributed.follower" in c]
    return pid


def _check_stopped(run: Run, sig: signal.Signals, status: int, err: list[str], *, ranks: int) -> int:
    """The common expectations after the signal; the step of the checkpoint the run keeps (0: none)."""
    assert status == 128 + sig, err[-20:]  # 130 for SIGINT, 143 for SIGTERM
    assert len(_ranks(run.seen)) == ranks - 1, run.seen  # rank 1 was running, so the test saw it
    assert _alive(run.seen) == {}, run.seen
    assert not any("Traceback" in line for line in err), err[-40:]
    rd = re.escape(str(run.run_dir))
    word = "interrupted" if sig == signal.SIGINT else r"terminated \(SIGTERM\)"
    go_on = rf"`tirl train --resume {rd}`"
    kept = re.fullmatch(rf"{word}: {rd} keeps checkpoint step-(\d+) — continue it with {go_on}", err[-1])
    none = re.fullmatch(rf"{word} before the first checkpoint of {rd}: {go_on} starts it again at step 1", err[-1])
    assert kept or none, err[-5:]
    for log in (run.run_dir / "ranks").glob("rank-*.log"):
        assert "Traceback" not in log.read_text(), log.read_text()[-2000:]
    step = int(kept.group(1)) if kept else 0
    ckpt = latest_checkpoint(run.run_dir)  # verify=True: every file's size and checksum
    assert (ckpt.step if ckpt else 0) == step == max(_checkpoints(run.run_dir), default=0)
    return step


def _resume(run_dir: Path, step: int, capsys: pytest.CaptureFixture[str]) -> None:
    """The printed command continues the run: one more step, metrics 1..step+1 with no torn or doubled line."""
    capsys.readouterr()
    assert main(["train", "--resume", str(run_dir), "--steps", str(step + 1), "--no-progress"]) == 0
    assert [r["step"] for r in read_metrics(run_dir)] == list(range(1, step + 2))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_nproc_2_stops_every_rank_after_a_checkpoint(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], sig: signal.Signals
) -> None:
    run = Run(model_dir, tmp_path / "run", nproc=2)
    run.wait_for("step-1", lambda: len(read_metrics(run.run_dir)) >= 1 and bool(_checkpoints(run.run_dir)))
    status, err = run.signal(sig)
    step = _check_stopped(run, sig, status, err, ranks=2)
    assert step >= 1
    if sig == signal.SIGTERM:  # the scheduler's case: the printed command continues the run
        _resume(run.run_dir, step, capsys)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_nproc_1_stops_after_a_checkpoint(model_dir: Path, tmp_path: Path, sig: signal.Signals) -> None:
    run = Run(model_dir, tmp_path / "run", nproc=1)
    run.wait_for("step-1", lambda: bool(_checkpoints(run.run_dir)))
    status, err = run.signal(sig)
    assert _check_stopped(run, sig, status, err, ranks=1) >= 1


def test_ctrl_c_in_the_first_step_keeps_a_run_that_starts_again(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both ranks up, the first rollout started (its trace has a line), no checkpoint yet."""
    run = Run(model_dir, tmp_path / "run", nproc=2)
    trace = run.run_dir / "pipeline_trace.jsonl"
    run.wait_for("the first rollout", lambda: trace.is_file() and trace.stat().st_size > 0)
    assert not _checkpoints(run.run_dir)
    status, err = run.signal(signal.SIGINT)
    if _check_stopped(run, signal.SIGINT, status, err, ranks=2) == 0:  # (the step may just have finished)
        _resume(run.run_dir, 0, capsys)


def test_ctrl_c_during_a_checkpoint_write_keeps_only_complete_checkpoints(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run(model_dir, tmp_path / "run", nproc=2)
    ckpts = run.run_dir / "checkpoints"

    def staging() -> bool:
        names = os.listdir(ckpts) if ckpts.is_dir() else []
        # step 1's is the first; a later one follows an update. Any later step's: a staging directory lives for
        # milliseconds, and a poll that missed step 2's (a loaded machine) let the 500-step run finish (exit 0)
        return any(n.startswith(".step-") and not n.startswith(".step-1.") for n in names)

    run.wait_for("a staging directory after step 1's", staging)
    status, err = run.signal(signal.SIGINT)
    step = _check_stopped(run, signal.SIGINT, status, err, ranks=2)
    assert step >= 1
    _resume(run.run_dir, step, capsys)
    assert not [n for n in os.listdir(ckpts) if n.startswith(".")]  # the resumed save removed any leftover


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_sigterm_while_rank_0_waits_in_a_collective_ends_it_without_one(model_dir: Path, tmp_path: Path) -> None:
    """Rank 1 frozen (SIGSTOP) after step 1: rank 0 rolls out step 2, then waits on rank 1 inside a collective.

    "Waits" is seen as rank 0 using no CPU for a second while rank 1 is stopped. SIGTERM must still end the run:
    telling rank 1 to stop would be one more collective, which waits as long as the first (up to 30 minutes).
    """
    run = Run(model_dir, tmp_path / "run", nproc=2)
    run.wait_for("step-1", lambda: bool(_checkpoints(run.run_dir)))
    rank_1 = _follower(run.proc.pid)
    os.kill(rank_1, signal.SIGSTOP)
    ticks = [_cpu_ticks(run.proc.pid), time.monotonic()]

    def idle() -> bool:
        now = _cpu_ticks(run.proc.pid)
        if now != ticks[0]:
            ticks[:] = [now, time.monotonic()]
        return time.monotonic() - ticks[1] > 1.0

    run.wait_for("rank 0 waiting on rank 1", idle)
    status, err = run.signal(signal.SIGTERM)
    assert _check_stopped(run, signal.SIGTERM, status, err, ranks=2) >= 1


def test_rank_1_ends_when_the_launcher_is_killed_before_the_rendezvous(model_dir: Path, tmp_path: Path) -> None:
    """``kill -9`` of the launcher as soon as rank 1 exists: nothing cleans up, rank 1 notices its parent is gone.

    Before, rank 1 waited at the rendezvous for a rank 0 that would never come, up to the 30-minute timeout.
    """
    run = Run(model_dir, tmp_path / "run", nproc=2)
    run.wait_for("rank 1", lambda: bool(_rank_1(_descendants(run.proc.pid))))
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait(timeout=DEADLINE_S)
    assert _rank_1(run.seen)
    assert _alive(_rank_1(run.seen)) == {}
    # the config the ranks read lies in the run (it was a /tmp/tirl-dist-*.json that a SIGKILL left behind)
    cmd = next(iter(_rank_1(run.seen).values()))  # rank 1's command line (a fork of it shows the same)
    args = cmd.split()
    config = Path(args[args.index(b"--config") + 1].decode())
    assert config == tmp_path / "run" / "ranks" / "config.json" and config.is_file()


STAGING = re.compile(r"\.step-(\d+)\.w")  # a checkpoint's hidden staging directory (tirl.fileio.staged_dir)


def _state(pid: int) -> str:
    """The state letter of ``pid`` (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _stop(run: Run, pid: int) -> None:
    """SIGSTOP ``pid`` (a process of ``run``) and wait until it is stopped."""
    os.kill(pid, signal.SIGSTOP)
    run.wait_for(f"pid {pid} stopped", lambda: _state(pid) == "T")


def _pending(pid: int, sig: signal.Signals) -> bool:
    """Whether ``sig`` was sent to ``pid`` and waits undelivered (``pid`` is stopped)."""
    masks = [line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
             if line.startswith(("SigPnd:", "ShdPnd:"))]  # fmt: skip
    return any(int(mask, 16) >> (sig - 1) & 1 for mask in masks)


def _rank_log(run: Run, rank: int) -> list[str]:
    return (run.run_dir / "ranks" / f"rank-{rank}.log").read_text().strip().splitlines()


def _stop_inside_a_write(run: Run) -> int:
    """Stop rank 0 (SIGSTOP) inside the write of a checkpoint after step 1's; that checkpoint's step.

    Inside: its staging directory is there and ``step-K`` is not, with rank 0 stopped. A staging directory lives
    for milliseconds; when rank 0 stopped after the rename, it goes on and the next checkpoint is waited for.
    """
    ckpts = run.run_dir / "checkpoints"

    def staged() -> list[int]:
        names = os.listdir(ckpts) if ckpts.is_dir() else []
        return [k for n in names if (m := STAGING.match(n)) and (k := int(m.group(1))) > 1]

    for _ in range(100):
        run.wait_for("a staging directory after step 1's", lambda: bool(staged()))
        _stop(run, run.proc.pid)
        inside = [k for k in staged() if not (ckpts / f"step-{k}").exists()]
        if inside:
            return inside[0]
        os.kill(run.proc.pid, signal.SIGCONT)
    raise AssertionError("rank 0 was never stopped inside a checkpoint write in 100 tries")


def test_a_second_ctrl_c_while_rank_0_waits_for_rank_1_kills_it_at_once(model_dir: Path, tmp_path: Path) -> None:
    """Rank 1 stopped (a rank slow to end); Ctrl-C; rank 0 sends rank 1 SIGTERM and waits its 5 s grace; Ctrl-C again.

    Rank 0 is stopped as soon as rank 1's SIGTERM is seen pending (rank 0 inside its wait), gets the second
    Ctrl-C there and goes on: it kills rank 1 at once (SIGKILL, said in rank 1's log) instead of waiting out
    the grace (before, the second Ctrl-C only restarted that wait), exit 130 with the one line.
    """
    run = Run(model_dir, tmp_path / "run", nproc=2)
    run.wait_for("step-1", lambda: bool(_checkpoints(run.run_dir)))
    rank_1 = _follower(run.proc.pid)
    _stop(run, rank_1)
    os.killpg(run.proc.pid, signal.SIGINT)  # the first Ctrl-C (pending on the stopped rank 1)
    run.wait_for("rank 0 sending rank 1 SIGTERM", lambda: _pending(rank_1, signal.SIGTERM))
    _stop(run, run.proc.pid)
    assert _state(rank_1) == "T", "rank 1 was killed at the end of its grace: the test came too late"
    os.killpg(run.proc.pid, signal.SIGINT)  # the second Ctrl-C
    os.kill(run.proc.pid, signal.SIGCONT)
    status, err = run.ended()
    assert _check_stopped(run, signal.SIGINT, status, err, ranks=2) >= 1
    assert _rank_log(run, 1)[-1:] == ["rank 1: killed by rank 0 at a second stop signal"]


def test_ctrl_c_then_sigterm_inside_a_checkpoint_write_abandons_it(model_dir: Path, tmp_path: Path) -> None:
    """Two stop signals reach rank 0 inside a checkpoint write: Ctrl-C, then SIGTERM (both wait while it is stopped).

    The second skips the graceful part: the write is abandoned (no ``step-K``; its staging directory is removed,
    or, when the signal landed just as it was created, left hidden for the next save), the
    run keeps the checkpoint before it, rank 1 is killed at once (its log says so), and the status and word are
    the first signal's (130, ``interrupted``).
    """
    run = Run(model_dir, tmp_path / "run", nproc=2)
    step = _stop_inside_a_write(run)
    os.kill(run.proc.pid, signal.SIGINT)
    os.kill(run.proc.pid, signal.SIGTERM)
    os.kill(run.proc.pid, signal.SIGCONT)  # the two are handled in the order of their numbers: SIGINT first
    status, err = run.ended()
    assert _check_stopped(run, signal.SIGINT, status, err, ranks=2) == step - 1
    assert not (run.run_dir / "checkpoints" / f"step-{step}").exists()
    assert _rank_log(run, 1)[-1:] == ["rank 1: killed by rank 0 at a second stop signal"]


def test_sigterm_to_a_background_run_finishes_the_checkpoint_write(model_dir: Path, tmp_path: Path) -> None:
    """A run started with SIGINT ignored (a background job; rank 1 inherits it), stopped inside a checkpoint write.

    Ctrl-C to its group changes nothing; SIGTERM stops it gracefully: the checkpoint being written is finished
    and kept (before, SIGTERM raised ``KeyboardInterrupt`` inside the write, which was abandoned), exit 143,
    and rank 1 ends by rank 0's SIGTERM although it ignores SIGINT (not killed at the end of its grace).
    """
    run = Run(model_dir, tmp_path / "run", nproc=2, sigint_ignored=True)
    step = _stop_inside_a_write(run)
    os.killpg(run.proc.pid, signal.SIGINT)  # discarded: every process of the run ignores it
    os.kill(run.proc.pid, signal.SIGTERM)
    os.kill(run.proc.pid, signal.SIGCONT)
    status, err = run.ended()
    assert _check_stopped(run, signal.SIGTERM, status, err, ranks=2) == step
    assert not [line for line in _rank_log(run, 1) if "killed by rank 0" in line]
