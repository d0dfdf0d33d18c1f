"""The suite's leftover check (tests/conftest.py) really fails a session that leaves a thread or a process behind.

Each case runs a real pytest session in a subprocess over a one-test file, with this repository's conftest
copied beside it: a clean session passes; a thread or a child process left running fails it, naming the
test it appeared in. Each case starts a pytest session (3-12 s on a busy 2-core machine; a leak adds 1 s of
grace), which is why the file takes over 20 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

CLEAN = """
import threading

def test_joins_its_thread():
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
"""
THREAD = """
import threading

STOP = threading.Event()

def test_leaks_a_thread():
    threading.Thread(target=STOP.wait, name="forgotten-worker", daemon=True).start()
"""
PROCESS = """
import subprocess

def test_leaks_a_process():
    subprocess.Popen(["sleep", "30"])
"""


def _session(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_case.py").write_text(body, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(SRC), "TIRL_LEFTOVER_GRACE_S": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False)


def test_a_clean_session_passes(tmp_path: Path) -> None:
    proc = _session(tmp_path, CLEAN)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_thread_left_running_fails_the_session_and_names_its_test(tmp_path: Path) -> None:
    proc = _session(tmp_path, THREAD)
    assert proc.returncode == 1, proc.stdout
    assert "left 1 thread(s)/process(es) running" in proc.stdout
    assert "thread 'forgotten-worker' (appeared in test_case.py::test_leaks_a_thread)" in proc.stdout


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="child processes are read from /proc")
def test_a_child_process_left_running_fails_the_session_and_names_its_test(tmp_path: Path) -> None:
    proc = _session(tmp_path, PROCESS)
    assert proc.returncode == 1, proc.stdout
    assert "(appeared in test_case.py::test_leaks_a_process): sleep 30" in " ".join(proc.stdout.split())
