"""Workspaces a killed tirl process left behind are removed by the next process's first provision.

A real child process provisions a workspace (as root: a mounted tmpfs) and is killed with SIGKILL; the
parent's first :func:`~tirl.envs.workspace.provision` under the same ``work_root`` unmounts and removes it,
and leaves alone a live process's workspace, one named for another machine, one named before the writer was
in the name, and a user's directory. Before, every killed run left its workspaces (and as root their mounts)
until someone removed them by hand.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tirl.envs import workspace as ws_mod
from tirl.envs.workspace import Template, provision, unmount_under
from tirl.fileio import host_tag

_CHILD = """
import sys, time
from pathlib import Path
from tirl.envs.workspace import Template, provision, unmount_under
ws = provision(Template(Path(sys.argv[1]), None, True), Path(sys.argv[2]))
print(ws.path, ws.mounted, flush=True)
time.sleep(600)
"""


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tirl-sweep-test-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    unmount_under(path)
    shutil.rmtree(path, ignore_errors=True)


def _child(repo: Path, root: Path) -> tuple[subprocess.Popen[str], Path, bool]:
    env = {**os.environ, "PYTHONPATH": str(Path(ws_mod.__file__).parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(repo), str(root)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    path, mounted = proc.stdout.readline().split()
    return proc, Path(path), mounted == "True"


def test_a_killed_runs_workspaces_go_and_nothing_else(root: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    dead, dead_ws, mounted = _child(repo, root)
    live, live_ws, _ = _child(repo, root)
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        assert (dead_ws / "a.py").is_file() and os.path.ismount(dead_ws) == mounted == (os.geteuid() == 0)
        kept = [
            root / f"tirl-swe-w{dead.pid}-{'0' * 8 if host_tag() != '0' * 8 else '1' * 8}-abcd1234",  # another machine
            root / "tirl-swe-abcd1234",  # named before the writer was in the name
            root / "tirl-swe-mine",  # a user's directory
        ]
        for path in kept:
            (path / "repo").mkdir(parents=True)
        assert root.resolve() not in ws_mod._SWEPT
        fresh = provision(Template(repo, None, True), root)
        assert not dead_ws.parent.exists(), "the killed run's workspace is still there"
        assert (live_ws / "a.py").is_file() and all(p.is_dir() for p in kept)
        assert fresh.path.parent.name.startswith(f"tirl-swe-w{os.getpid()}-{host_tag()}-")
        fresh.remove()
    finally:
        live.kill()
        live.wait()
