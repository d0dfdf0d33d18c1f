"""``make test``'s xdist scheduling (tests/conftest.py): single tests, but a module with a module-scoped fixture whole.

Each case runs a real pytest-xdist session (``-n 2 --dist load``, as ``make test``) in a subprocess, with this
repository's conftest copied beside small test files: a module-scoped fixture is set up once (not once per
worker) while plain tests still go to both workers; ``SAME_WORKER``'s modules (two in the copy) run on one worker
and are collected first; a module-scoped fixture defined outside its module (which the scheduler's source scan cannot
see) is refused with one error naming the module. About 5-15 s each: two xdist workers start and import the
conftest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
XDIST = ["-n", "2", "--dist", "load"]

LOGGING = """
import os
from pathlib import Path

import pytest

LOG = Path(os.environ["XDIST_CASE_LOG"])


def note(what):
    with LOG.open("a") as f:
        f.write(what + " " + os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
"""
SHARED = (
    LOGGING
    + """

@pytest.fixture(scope="module")
def built():
    note("built")
    return 1


@pytest.mark.parametrize("i", range(12))
def test_uses_the_module_fixture(built, i):
    assert built == 1
"""
)


def _noting(name: str, n: int) -> str:
    """A test module of ``n`` tests that each note ``name`` and their worker."""
    return (
        LOGGING
        + f"""

@pytest.mark.parametrize("i", range({n}))
def test_{name}(i):
    note("{name}")
"""
    )


PLAIN = _noting("plain", 4)
#: PLAIN whose tests each wait (up to 20 s) until the other worker has noted a plain test too. With plain tests as
#: single-test units, the free worker takes the next one while this one waits, so the spread over both workers no
#: longer depends on which worker starts first on a loaded machine (instant tests could all land on one); with
#: plain tests grouped into one unit, no other worker ever notes one and the assertion below fails.
PLAIN_WAITING = (
    PLAIN
    + """
    import time

    me = os.environ.get("PYTEST_XDIST_WORKER", "main")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(ln.startswith("plain ") and not ln.endswith(" " + me) for ln in LOG.read_text().splitlines()):
            return
        time.sleep(0.05)
"""
)
RAY = _noting("ray", 3)


def _session(
    tmp_path: Path, files: dict[str, str], *args: str, same_worker: str = ""
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """A real pytest run over ``files`` with this repository's conftest (``same_worker``: one more
    ``SAME_WORKER`` module in the copy); its result and the lines its tests noted."""
    conftest = (HERE / "conftest.py").read_text(encoding="utf-8")
    if same_worker:
        conftest += f"\nSAME_WORKER[{same_worker!r}] = 'ray'\n"
    (tmp_path / "conftest.py").write_text(conftest, encoding="utf-8")
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
    files = {f"tests/test_plain_{i}.py": PLAIN_WAITING for i in range(4)}
    files["tests/test_shared.py"] = SHARED
    files["tests/distributed/test_ray_cluster.py"] = RAY
    files["tests/distributed/test_ray_more.py"] = RAY  # a second SAME_WORKER module, named to the copied conftest
    proc, lines = _session(tmp_path, files, *XDIST, same_worker="tests/distributed/test_ray_more.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [ln for ln in lines if ln.startswith("built ")] in (["built gw0"], ["built gw1"]), lines
    ray_workers = {ln.split()[1] for ln in lines if ln.startswith("ray ")}
    assert len([ln for ln in lines if ln.startswith("ray ")]) == 6 and len(ray_workers) == 1, lines
    assert {ln.split()[1] for ln in lines if ln.startswith("plain ")} == {"gw0", "gw1"}, lines


def test_the_ray_modules_are_collected_first(tmp_path: Path) -> None:
    files = {"tests/a/test_plain.py": PLAIN, "tests/distributed/test_ray_cluster.py": RAY}  # "a" sorts first
    proc, lines = _session(tmp_path, files, "-p", "no:randomly")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [ln.split()[0] for ln in lines] == ["ray"] * 3 + ["plain"] * 4, lines


def test_a_module_fixture_from_a_conftest_is_refused_naming_the_module(tmp_path: Path) -> None:
    fixture = 'import pytest\n\n\n@pytest.fixture(scope="module")\ndef built():\n    return 1\n'
    files = {"tests/sub/conftest.py": fixture, "tests/sub/test_uses_it.py": "def test_it(built):\n    assert built\n"}
    proc, lines = _session(tmp_path, files, *XDIST)
    assert proc.returncode != 0 and lines == [], proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "tests/sub/test_uses_it.py: uses a module-scoped fixture defined outside it" in out, out
