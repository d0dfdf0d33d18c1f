"""The memory limit covers memory that no rlimit sees: memfd, tmpfs files, /dev/shm and SysV shared memory.

Each attack writes ``HOLD_MB`` (2.5x the limit) into a kind of memory that the address-space rlimit does
not count (a memfd filled with ``write()`` and never mapped, files in ``/tmp``, ``/work`` and
``/dev/shm``, SysV segments attached ``CHUNK_MB`` at a time), against a fresh bwrap sandbox and a pool
server. With a memory cgroup (as root, :mod:`tirl.sandbox._cgroup`) the kernel kills the run and it is
reported as ``memory_exceeded``; without one, ``memfd_create`` and ``shmget`` are refused by the seccomp
filter with ENOMEM (also ``memory_exceeded``), and files stay bounded by the tmpfs cap. The disk cap is
set above ``HOLD_MB`` so that the memory limit, not ENOSPC, is what stops the files.

Not covered here: the plain process backends (no isolation, documented), and cgroup v2, which this
machine does not have (it mounts the memory controller on v1); the v2 path is covered only by the
parsing tests below.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from tests.sandbox.conftest import make

from tirl.sandbox import _cgroup, _spawn
from tirl.sandbox._launch import Launch
from tirl.sandbox.base import ExecResult

LIMIT_MB = 256
HOLD_MB = 640
CHUNK_MB = 64
DISK_MB = 1024

MEMFD = f"""
import os
fd = os.memfd_create("hoard")
block = b"x" * (1 << 20)
for _ in range({HOLD_MB}):
    os.write(fd, block)
print("held", os.fstat(fd).st_size >> 20)
"""

FILE = """
block = b"x" * (1 << 20)
with open({path!r}, "wb") as f:
    for _ in range({mb}):
        f.write(block)
        f.flush()
print("held")
"""

SYSV = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
for i in range({HOLD_MB // CHUNK_MB}):
    ident = libc.shmget(0, {CHUNK_MB} << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if ident < 0:
        raise OSError(ctypes.get_errno(), "shmget: " + __import__("os").strerror(ctypes.get_errno()))
    addr = libc.shmat(ident, None, 0)
    ctypes.memset(addr, 120, {CHUNK_MB} << 20)
    libc.shmdt(ctypes.c_void_p(addr))
print("held")
"""

ATTACKS = {
    "memfd": MEMFD,
    "tmp-file": FILE.format(path="/tmp/hoard", mb=HOLD_MB),
    "work-file": FILE.format(path="/work/hoard", mb=HOLD_MB),
    "dev-shm-file": FILE.format(path="/dev/shm/hoard", mb=HOLD_MB),
    "sysv-shm": SYSV,
}


async def _runs(backend: str, codes: list[str], disk_mb: int = DISK_MB) -> list[ExecResult]:
    sb = make(backend, disk_mb=disk_mb, memory_mb=LIMIT_MB, timeout_s=30.0)
    try:
        return [await sb.run(code) for code in codes]
    finally:
        await sb.close()


def _needs_cgroup() -> None:
    if _cgroup.memory_parent() is None:
        pytest.skip(f"no writable memory cgroup here ({_cgroup.why_not()}); the fallback is tested below")


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("backend", ["bwrap", "pool"])
async def test_memory_past_the_limit_is_killed_and_reported(host_audit: object, backend: str, attack: str) -> None:
    _needs_cgroup()
    # The pool's run after the attack shows the server is usable again (or was replaced).
    hoard, after = await _runs(backend, [ATTACKS[attack], "print(6 * 7)"])
    assert hoard.memory_exceeded and not hoard.ok and "held" not in hoard.stdout, hoard
    assert after.ok and after.stdout == "42\n", after


async def test_a_session_kernel_past_the_limit_is_killed_and_reported(host_audit: object) -> None:
    _needs_cgroup()
    pool = make("pool", size=1, disk_mb=DISK_MB, memory_mb=LIMIT_MB, timeout_s=30.0)
    try:
        await pool.run("kept = 1", session="s")
        hoard = await pool.run(MEMFD, session="s")
        after = await pool.run("print('kept' in globals())", session="s")
    finally:
        await pool.close()
    assert hoard.memory_exceeded and "held" not in hoard.stdout and "state was lost" in hoard.stderr, hoard
    assert after.ok and after.stdout == "False\n", after


@pytest.mark.parametrize("attack", ["memfd", "tmp-file"])
async def test_code_that_lowers_its_oom_score_is_still_killed_and_reported(host_audit: object, attack: str) -> None:
    _needs_cgroup()
    # At score 0 the OOM killer may take the pool's server instead of the child: the same report, a new server.
    code = "open('/proc/self/oom_score_adj', 'w').write('0')\n" + ATTACKS[attack]
    hoard, after = await _runs("pool", [code, "print(6 * 7)"])
    assert hoard.memory_exceeded and not hoard.ok and "held" not in hoard.stdout and hoard.error is None, hoard
    assert after.ok and after.stdout == "42\n", after


async def test_a_pool_server_takes_each_runs_own_limit(host_audit: object) -> None:
    _needs_cgroup()
    pool = make("pool", size=1, disk_mb=DISK_MB, memory_mb=1024, timeout_s=30.0)
    big = "open('/tmp/big', 'wb').write(b'x' * (400 << 20))\nprint('wrote')"
    try:
        lowered = await pool.run(big, memory_mb=LIMIT_MB)
        raised = await pool.run(big)  # the server's default again
    finally:
        await pool.close()
    assert lowered.memory_exceeded and "wrote" not in lowered.stdout, lowered
    assert raised.ok and raised.stdout == "wrote\n", raised


@pytest.mark.parametrize("backend", ["bwrap", "pool"])
async def test_code_under_the_limit_still_runs(host_audit: object, backend: str) -> None:
    ok = """
import os
fd = os.memfd_create("fits")
os.write(fd, b"y" * (64 << 20))
open("/tmp/fits", "wb").write(b"z" * (32 << 20))
data = bytearray(96 << 20)
print("fine", os.fstat(fd).st_size >> 20, os.path.getsize("/tmp/fits") >> 20, len(data) >> 20)
"""
    _needs_cgroup()
    (result,) = await _runs(backend, [ok])
    assert result.ok and result.stdout == "fine 64 32 96\n", result


@pytest.mark.parametrize("backend", ["bwrap", "pool"])
async def test_without_a_cgroup_memfd_and_sysv_shm_are_refused(
    host_audit: object, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cgroup, "memory_parent", lambda: None)
    memfd, sysv, files = await _runs(backend, [MEMFD, SYSV, FILE.format(path="/tmp/hoard", mb=HOLD_MB)], 64)
    for result in (memfd, sysv):
        assert result.memory_exceeded and "held" not in result.stdout, result
        assert "Cannot allocate memory" in result.stderr, result
    # Files are bounded by the tmpfs cap and the file-size limit (64 MB here): the write fails.
    assert not files.ok and "held" not in files.stdout, files
    assert "File too large" in files.stderr or "No space left on device" in files.stderr, files


@pytest.mark.parametrize("setup", ["helpers", "preexec_fn"])
async def test_a_sandbox_started_outside_its_cgroup_is_killed_at_once(
    host_audit: object, monkeypatch: pytest.MonkeyPatch, setup: str
) -> None:
    _needs_cgroup()
    # A caller that starts a Launch without joining its cgroup: the sandbox would have no memory limit.
    # Both ways of setting the child up (tirl.sandbox._spawn): the helper chain and its preexec_fn fallback.
    if setup == "helpers":
        assert _spawn.helpers() is not None, "setpriv/prlimit missing: the Makefile installs util-linux"
        monkeypatch.setattr(_spawn, "_JOIN_SCRIPT", 'exec "$@"')
    else:
        monkeypatch.setattr(_spawn, "helpers", lambda: None)
        monkeypatch.setattr(Launch, "preexec", lambda self: None)
    (result,) = await _runs("bwrap", ["import time\ntime.sleep(20)\nprint('ran')"])
    assert result.error is not None and "memory cgroup" in result.error, result
    assert "ran" not in result.stdout and result.wall_s < 10, result


def test_a_v1_memory_hierarchy_is_found_under_our_own_cgroup() -> None:
    cgroup = "12:pids:/x\n4:memory:/process_api/abc\n1:name=systemd:/\n0::/\n"
    mounts = (
        "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
        "31 25 0:27 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw\n"
    )
    found = _cgroup.locate(cgroup, mounts, v2_controllers=lambda path: "")
    assert found == (Path("/sys/fs/cgroup/memory/process_api/abc"), 1)


def test_a_v2_hierarchy_is_used_only_when_it_has_the_memory_controller() -> None:
    cgroup = "0::/user.slice/me\n"
    mounts = "40 30 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    with_memory = _cgroup.locate(cgroup, mounts, v2_controllers=lambda path: "cpu io memory pids")
    assert with_memory == (Path("/sys/fs/cgroup/user.slice/me"), 2)
    assert _cgroup.locate(cgroup, mounts, v2_controllers=lambda path: "cpu io pids") is None


def test_a_path_that_is_not_our_own_cgroup_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cgroup.procs").write_text("1\n2\n")  # some other cgroup (ours would list our pid)
    monkeypatch.setattr(_cgroup, "locate", lambda *args: (tmp_path, 1))
    found, why = _cgroup._probe()
    assert found is None and "is not the cgroup this process runs in" in why
    assert list(tmp_path.iterdir()) == [tmp_path / "cgroup.procs"]  # nothing was made there


def test_an_oom_kill_count_is_read_from_either_version(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\noom_group_kill 0\n")
    assert _cgroup.oom_kills(v1, 1) == 3 and _cgroup.oom_kills(v2, 2) == 2
    assert _cgroup.oom_kills(tmp_path / "gone", 1) == 0


def test_no_sandbox_cgroup_is_left_behind(host_audit: object) -> None:
    _needs_cgroup()
    parent = _cgroup.memory_parent()
    assert parent is not None
    before = {p.name for p in parent[0].iterdir() if p.name.startswith(_cgroup.PREFIX)}
    asyncio.run(_runs("pool", ["print(1)"]))
    asyncio.run(_runs("bwrap", ["print(1)"]))
    mine = f"{_cgroup.PREFIX}{os.getpid()}-"
    after = {p.name for p in parent[0].iterdir() if p.name.startswith(mine)}
    assert after <= before, after - before
