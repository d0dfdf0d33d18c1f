"""``make test``'s xdist scheduling (tests/conftest.py): whole modules per worker, the Ray modules together, long first.

Each case runs a real pytest-xdist session (``-n 2 --dist loadfile --no-loadscope-reorder``, as ``make test``)
in a subprocess, with this repository's conftest copied beside small test files: a module-scoped fixture is set
up once (not once per worker); the two Ray modules of ``SAME_WORKER`` run on one worker; a module with a
``slow`` test is collected before the others. About 5-15 s: two xdist workers start and import the conftest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
XDIST = ["-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]

LOGGING = """
import os
from pathlib import Path

import pytest

LOG = Path(os.environ["XDIST_CASE_LOG"])


def note(what):
    with LOG.open("a") as f:
        f.write(what + " " + os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
"""
SHARED = LOGGING + """

@pytest.fixture(scope="module")
def built():
    note("built")
    return 1


@pytest.mark.parametrize("i", range(12))
def test_uses_the_module_fixture(built, i):
    assert built == 1
"""
PLAIN = LOGGING + """

@pytest.mark.parametrize("i", range(4))
def test_plain(i):
    note("plain")
"""
RAY = LOGGING + """

@pytest.mark.parametrize("i", range(3))
def test_ray(i):
    note("ray")
"""
SLOW = LOGGING + """

@pytest.mark.slow
def test_slow():
    note("slow")
"""


def _session(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: long\n", encoding="utf-8")
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body, encoding="utf-8")
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(SRC), "TIRL_LEFTOVER_GRACE_S": "1", "XDIST_CASE_LOG": str(log)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "tests"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False)
    return proc, (log.read_text(encoding="utf-8").splitlines() if log.exists() else [])


def test_a_module_fixture_is_built_once_and_the_ray_modules_share_a_worker(tmp_path: Path) -> None:
    files = {f"tests/test_plain_{i}.py": PLAIN for i in range(4)}
    files["tests/test_shared.py"] = SHARED
    files["tests/distributed/test_ray_cluster.py"] = RAY
    files["tests/distributed/test_ray_ranks.py"] = RAY
    proc, lines = _session(tmp_path, files, *XDIST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [ln for ln in lines if ln.startswith("built ")] in (["built gw0"], ["built gw1"]), lines
    ray_workers = {ln.split()[1] for ln in lines if ln.startswith("ray ")}
    assert len([ln for ln in lines if ln.startswith("ray ")]) == 6 and len(ray_workers) == 1, lines
    assert {ln.split()[1] for ln in lines} == {"gw0", "gw1"}, lines  # both workers took modules


def test_the_ray_modules_then_modules_with_a_slow_test_run_first(tmp_path: Path) -> None:
    files = {"tests/test_a_plain.py": PLAIN, "tests/test_z_slow.py": SLOW}
    files["tests/distributed/test_ray_ranks.py"] = RAY
    proc, lines = _session(tmp_path, files, "-p", "no:randomly")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [ln.split()[0] for ln in lines] == ["ray"] * 3 + ["slow"] + ["plain"] * 4, lines
