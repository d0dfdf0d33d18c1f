"""How ``tirl.sandbox._spawn`` sets a child up: the helper chain (sh, setpriv, prlimit) and its fallback.

The chain exists so that CPython can start children with vfork (no ``preexec_fn``, no ``user=``); these tests
check that it is what runs when the helpers are there, and that a child set up either way sees the same
uid, groups and rlimits. The cgroup join through the chain is exercised by tests/sandbox/test_memory_limits.py
(its OOM and "started outside its cgroup" cases).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tirl.sandbox import _spawn
from tirl.sandbox._common import Limits, rlimit_values

# the unprivileged uid cannot reach the venv's interpreter under a private checkout
SYSTEM_PYTHON = shutil.which("python3", path=_spawn.HELPER_PATH) or sys.executable
HELPERS = _spawn.Helpers(sh="/bin/sh", setpriv="/usr/bin/setpriv", prlimit="/usr/bin/prlimit")
PROBE = (
    "import json, os, resource\n"
    "names = ['RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_NPROC', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', 'RLIMIT_CORE']\n"
    "print(json.dumps({'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(), 'groups': os.getgroups(),\n"
    "                  'limits': [list(resource.getrlimit(getattr(resource, n))) for n in names]}))\n"
)


def reference_chain(limits: Limits | None, user: int | None, procs: Path | None) -> list[str]:
    """The chain written out by hand: join, then drop, then limit."""
    out: list[str] = []
    if procs is not None:
        out += ["/bin/sh", "-c", 'printf 0 > "$0" && exec "$@"', str(procs)]
    if user is not None:
        out += ["/usr/bin/setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"]
    if limits is not None:
        mb = 1 << 20
        values = {
            "cpu": limits.cpu_s,
            "as": limits.memory_mb * mb,
            "nproc": limits.nproc,
            "fsize": limits.fsize_mb * mb,
            "nofile": limits.nofile,
            "core": 1,
        }
        out += ["/usr/bin/prlimit", *(f"--{k}={v}:{v}" for k, v in values.items()), "--"]
    return out


@pytest.mark.parametrize("user", [None, 65534])
@pytest.mark.parametrize("procs", [None, Path("/sys/fs/cgroup/memory/x/cgroup.procs")])
@pytest.mark.parametrize("limits", [None, Limits(timeout_s=2.5, memory_mb=300, nproc=7, fsize_mb=3, nofile=40)])
def test_the_chain_matches_a_hand_written_one(limits: Limits | None, user: int | None, procs: Path | None) -> None:
    assert _spawn.setup_chain(HELPERS, limits, user, procs) == reference_chain(limits, user, procs)
    assert _spawn.setup_chain(None, limits, user, procs) is None


def test_rlimit_values_cover_what_apply_rlimits_sets() -> None:
    limits = Limits(timeout_s=4.0, memory_mb=10, nproc=3, fsize_mb=2, nofile=9)
    assert [(n, v) for n, _, v in rlimit_values(limits)] == [
        ("cpu", 5),
        ("as", 10 << 20),
        ("nproc", 3),
        ("fsize", 2 << 20),
        ("nofile", 9),
        ("core", 1),
    ]


def test_the_helpers_are_installed() -> None:
    # `make install` installs util-linux when setpriv or prlimit is missing; without them every sandboxed
    # command forks the whole trainer (tirl.sandbox._spawn's docstring)
    found = _spawn.helpers()
    assert found is not None
    assert all(os.access(p, os.X_OK) for p in (found.sh, found.setpriv, found.prlimit))


async def _probe(monkeypatch: pytest.MonkeyPatch, use_helpers: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run PROBE through ``spawn``; return what the child saw and the arguments the child was started with."""
    seen: dict[str, Any] = {}
    real = asyncio.create_subprocess_exec

    async def spy(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
        seen.update(kwargs, argv=list(argv))
        return await real(*argv, **kwargs)

    monkeypatch.setattr(_spawn.asyncio, "create_subprocess_exec", spy)
    if not use_helpers:
        monkeypatch.setattr(_spawn, "helpers", lambda: None)
    user = 65534 if os.geteuid() == 0 else None
    limits = Limits(timeout_s=9.0, memory_mb=700, nproc=50, fsize_mb=5, nofile=33)
    result = await _spawn.spawn(
        [SYSTEM_PYTHON, "-I", "-c", PROBE], cwd=Path("/"), env={}, limits=limits, max_chars=10_000, user=user
    )
    assert result.exit_code == 0, result
    return json.loads(result.stdout), seen


async def test_a_child_set_up_by_the_helpers_sees_what_preexec_fn_gives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    chained, how_chained = await _probe(monkeypatch, use_helpers=True)
    monkeypatch.undo()
    plain, how_plain = await _probe(monkeypatch, use_helpers=False)
    assert chained == plain
    # the fast path: nothing that makes CPython fork the parent
    assert how_chained["preexec_fn"] is None and how_chained["user"] is None
    assert how_chained["argv"][0] == "/usr/bin/prlimit" or how_chained["argv"][0].endswith("setpriv")
    assert how_plain["preexec_fn"] is not None
    mb = 1 << 20
    assert chained["limits"] == [[10, 10], [700 * mb] * 2, [50, 50], [5 * mb] * 2, [33, 33], [1, 1]]
    if os.geteuid() == 0:
        assert (chained["uid"], chained["euid"], chained["gid"]) == (65534, 65534, 65534)
        assert chained["groups"] in ([], [65534])
    else:
        assert chained["uid"] == os.getuid() and resource.getrlimit(resource.RLIMIT_NOFILE)[0] != 33


async def test_a_command_killed_at_its_deadline_is_never_reported_as_exit_255(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The kill at the deadline used proc.kill(), whose poll could reap the child under asyncio's watcher thread,
    which then logged "Unknown child process pid N" and reported exit status 255 (measured: 27 of 400 commands
    that end around a 50 ms deadline, as below). Now only the group kill runs: nothing but the watcher reaps."""
    import logging

    caplog.set_level(logging.WARNING, logger="asyncio")
    results = []
    for _ in range(20):
        batch = [
            _spawn.spawn(["sh", "-c", f"sleep 0.0{i % 10}"], cwd=Path("/tmp"), env={"PATH": "/usr/bin:/bin"},
                         limits=Limits(timeout_s=0.05), max_chars=100)
            for i in range(20)
        ]  # fmt: skip
        results += await asyncio.gather(*batch)
    assert [r.exit_code for r in results if r.exit_code == 255] == []
    assert "Unknown child process" not in caplog.text
    assert any(r.timed_out for r in results) and any(r.exit_code == 0 and not r.timed_out for r in results)
