"""A local Ray cluster of real ``ray start`` processes for the tests, and its clean stop.

Each node is one ``ray start`` (the head, then nodes joining it) with its own CPU count, custom resources
and a small object store, in a private temp dir; :func:`stop_cluster` ends exactly this cluster's processes
(``ray stop --force`` would stop every Ray cluster on the machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
STORE = str(100 * 1024 * 1024)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_cli(env: dict[str, str], *args: str) -> None:
    """Run ``ray ARGS`` (raises with its stderr when it fails)."""
    proc = subprocess.run([RAY, *args], capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"ray {args[0]} failed: {proc.stderr[-3000:]}")


def node_args(temp_dir: str, cpus: int, resources: dict[str, float] | None = None) -> list[str]:
    """The ``ray start`` flags of one local node."""
    args = ["--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus), "--object-store-memory", STORE]
    args += ["--disable-usage-stats", "--temp-dir", temp_dir]
    return args + (["--resources", json.dumps(resources)] if resources else [])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def stop_cluster(marks: tuple[str, ...]) -> None:
    """Kill this cluster's processes only (their command lines name its temp dir or port) and their children."""
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    ours = {p for p in pids if any(m in _cmdline(p) for m in marks)}
    grown = True
    while grown:
        kids = {p for p in pids if p not in ours and _parent(p) in ours}
        ours |= kids
        grown = bool(kids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in ours:
            with contextlib.suppress(OSError):
                os.kill(p, sig)
        time.sleep(2 if sig == signal.SIGTERM else 0)
