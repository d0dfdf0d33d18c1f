"""Red team, session 45: what one run could leave in a warm server for every later run, and the vsock way out.

A pool server is its sandbox's PID 1 and outlives its runs, and so do its namespaces. Each ``pool`` test runs
the attacker and then ordinary programs through ONE server (size 1): on the code before the fix each attack
changed what every later run on that server got (docs/sandbox.md lists the before/after evidence). The fresh
``bwrap`` backend is checked where the same call is refused there too. Only the isolated backends run here: the
process fallbacks have no filter and no namespaces (documented in :mod:`tirl.sandbox.process`).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sandbox.conftest import make

from tirl.sandbox import ExecResult

ISOLATED = ["bwrap", "pool"]


async def _runs(backend: str, *codes: str) -> list[ExecResult]:
    """Run ``codes`` one after another on one sandbox (for the pool: one warm server)."""
    sb = make(backend, **({"size": 1} if backend == "pool" else {}))
    try:
        return [await sb.run(code, timeout_s=20) for code in codes]
    finally:
        await sb.close()


# Lowers the namespace's pid_max to its minimum and uses up the pids below it: after the wrap only pid 300 is left.
SYSCTL_ATTACK = """
import os
for path, value in (('/proc/sys/kernel/pid_max', '301'), ('/proc/sys/kernel/shmmni', '7')):
    try:
        with open(path, 'w') as f:
            f.write(value)
        print('wrote', path)
    except OSError as exc:
        print('refused', path, exc.errno)
for _ in range(400):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
"""
FORKS = """
import subprocess
for _ in range(20):
    subprocess.run(['true'], check=True)
print('forked 20', open('/proc/sys/kernel/shmmni').read().strip())
"""


@pytest.mark.parametrize("backend", ISOLATED)
async def test_a_sysctl_of_the_sandbox_s_namespaces_cannot_be_changed(host_audit: object, backend: str) -> None:
    """Before: ``wrote`` both, and every later run on that server failed to fork (EAGAIN), shmmni 7."""
    attack, after, again = await _runs(backend, SYSCTL_ATTACK, FORKS, FORKS)
    assert attack.exit_code == 0, attack
    assert "wrote" not in attack.stdout and attack.stdout.count("refused") == 2, attack.stdout
    for run in (after, again):
        assert run.exit_code == 0 and run.stdout.startswith("forked 20"), run
        assert run.stdout.split()[-1] != "7", run.stdout


PRLIMIT_ATTACK = """
import resource
try:
    resource.prlimit(1, resource.RLIMIT_NOFILE, (100, 100))
    print('lowered')
except OSError as exc:
    print('refused', exc.errno)
"""


@pytest.mark.parametrize("backend", ISOLATED)
async def test_the_code_cannot_lower_pid1_s_rlimits(host_audit: object, backend: str) -> None:
    """Before: ``lowered``, and every later run on the server failed before its code ran ("not allowed to raise
    maximum limit": the child sets its own limits from the server's)."""
    attack, after, again = await _runs(backend, PRLIMIT_ATTACK, "print('ran')", "print('ran')")
    assert attack.stdout.strip() == "refused 1", attack
    assert after.stdout == again.stdout == "ran\n", (after, again)


SCHED_ATTACK = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    try:
        call()
        print('changed', name)
    except OSError as exc:
        print('refused', name, exc.errno)
def ioprio_idle():  # ioprio_set(IOPRIO_WHO_PROCESS, 1, IOPRIO_CLASS_IDLE)
    if libc.syscall(251, 1, 1, 3 << 13) != 0:
        raise OSError(ctypes.get_errno(), 'ioprio_set')
attempt('nice', lambda: os.setpriority(os.PRIO_PROCESS, 1, 19))
attempt('nice by user', lambda: os.setpriority(os.PRIO_USER, 0, 19))
attempt('cpus', lambda: os.sched_setaffinity(1, {0}))
attempt('ioprio', ioprio_idle)
"""
SCHED_SEEN = """
import ctypes, os
libc = ctypes.CDLL(None)
cpus = ','.join(map(str, sorted(os.sched_getaffinity(0))))
print(os.getpriority(os.PRIO_PROCESS, 0), cpus, libc.syscall(252, 1, 0))
"""


async def test_the_code_cannot_change_the_server_s_priority_cpus_or_io_class(host_audit: object) -> None:
    """Before: all four ``changed``, and the next run on that server started at nice 19, on CPU 0 only, in the
    idle I/O class (``19 0 24576``; the host: nice 0, CPUs 0,1): the server passes them to every child it forks."""
    attack, after = await _runs("pool", SCHED_ATTACK, SCHED_SEEN)
    assert "changed" not in attack.stdout and attack.stdout.count("refused") == 4, attack
    # what the server inherited from us
    host = [str(os.getpriority(os.PRIO_PROCESS, 0)), ",".join(map(str, sorted(os.sched_getaffinity(0)))), "0"]
    assert after.stdout.split() == host, after


AUTOGROUP_ATTACK = """
with open('/proc/self/autogroup', 'w') as f:
    f.write('19')
print(open('/proc/self/autogroup').read().split()[-1])
"""


async def test_the_server_s_scheduler_autogroup_is_not_the_code_s(host_audit: object) -> None:
    """``/proc/self/autogroup`` sets the nice value of the caller's whole session. Before, a run shared the
    server's session: the next run on that server read ``nice 19``. Each run now has a session of its own."""
    try:
        open("/proc/self/autogroup").close()
    except OSError:
        pytest.skip("this kernel has no scheduler autogroups")
    attack, after = await _runs("pool", AUTOGROUP_ATTACK, "print(open('/proc/self/autogroup').read().split()[-1])")
    assert attack.stdout.strip() == "19", attack  # its own session's: allowed
    assert after.stdout.strip() == "0", after


VSOCK_PROBE = """
import socket
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    print('opened')
except OSError as exc:
    print('refused', exc.errno)
"""


@pytest.mark.parametrize("backend", ISOLATED)
async def test_no_vsock_socket_in_the_sandbox(host_audit: object, backend: str) -> None:
    """AF_VSOCK is not scoped by a network namespace (kernel 6.18): in a VM with a virtio-vsock device, a socket
    opened in the sandbox reaches the hypervisor (CID 2) around the empty network namespace. Before: ``opened``."""
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    except (OSError, AttributeError):
        pytest.skip("this host cannot open AF_VSOCK sockets, so the probe would pass without the filter")
    (probe,) = await _runs(backend, VSOCK_PROBE)
    assert probe.stdout.strip() == "refused 97", probe  # EAFNOSUPPORT


CRASH = """
import os
ballast = bytearray(32 << 20)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
os.kill(os.getpid(), 11)
"""


@pytest.fixture
def pipe_core_helper(tmp_path: Path) -> Iterator[Path]:
    """A pipe ``core_pattern`` (as systemd-coredump or apport install) that logs each dump's size; restored after.

    ``core_pattern`` is global (a container shares the host's), so this runs only as root, and only where no
    pipe helper is installed already (a real one is never replaced, not even for the test's few seconds).
    """
    import fcntl

    pattern = Path("/proc/sys/kernel/core_pattern")
    # one test at a time across xdist workers: a second backend's run read the first's helper as the host's,
    # skipped (gate of session 45), and could have restored that helper as the host's setting
    lock = open("/tmp/tirl-test-core-pattern.lock", "a")  # noqa: SIM115 - held until the fixture ends
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        yield from _with_pipe_helper(pattern, tmp_path)
    finally:
        lock.close()


def _with_pipe_helper(pattern: Path, tmp_path: Path) -> Iterator[Path]:
    try:
        old = pattern.read_text()
    except OSError:
        pytest.skip("no /proc/sys/kernel/core_pattern")
    if os.geteuid() != 0 or old.startswith("|"):
        pytest.skip("needs root and a file core_pattern (a pipe helper here is not replaced)")
    log = tmp_path / "dumps.log"
    helper = tmp_path / "helper.sh"
    helper.write_text(f'#!/bin/sh\necho "$1 $(wc -c)" >> {log}\n')
    helper.chmod(0o755)
    pattern.write_text(f"|{helper} %c")
    try:
        yield log
    finally:
        pattern.write_text(old)


@pytest.mark.parametrize("backend", ISOLATED)
async def test_a_crash_sends_no_core_dump_to_the_host_s_helper(
    host_audit: object, pipe_core_helper: Path, backend: str
) -> None:
    """Before (RLIMIT_CORE 0): the kernel ignores the limit for a pipe helper and streamed each crash's memory to
    it, as root on the host (``0 39321600`` per crash; 64 processes may crash per run). Now the dump is aborted."""
    (crash,) = await _runs(backend, CRASH)
    assert crash.exit_code in (-11, 139), crash  # the fresh backend's shell reports 128 + 11
    await asyncio.sleep(0.5)  # the helper runs asynchronously
    assert not pipe_core_helper.exists(), pipe_core_helper.read_text()


MQ_LEAVE = """
import ctypes, ctypes.util, os
rt = ctypes.CDLL(ctypes.util.find_library('rt') or None, use_errno=True)
fd = rt.mq_open(b'/leak', os.O_CREAT | os.O_WRONLY, 0o600, None)
assert fd >= 0, ctypes.get_errno()
assert rt.mq_send(fd, b'for the next episode', 20, 0) == 0, ctypes.get_errno()
print('left')
"""
MQ_FIND = """
import ctypes, ctypes.util, os
rt = ctypes.CDLL(ctypes.util.find_library('rt') or None, use_errno=True)
fd = rt.mq_open(b'/leak', os.O_RDONLY | os.O_NONBLOCK, 0, None)
if fd < 0:
    print('gone', ctypes.get_errno())
else:
    buf = ctypes.create_string_buffer(1 << 16)
    size = rt.mq_receive(fd, buf, ctypes.c_size_t(1 << 16), None)
    print('found', buf.raw[:size] if size >= 0 else ctypes.get_errno())
"""


async def test_a_posix_message_queue_does_not_reach_the_next_run(host_audit: object) -> None:
    """Before: ``found b'for the next episode'`` (a documented limit until session 45: the queues' names could not
    be listed). The servers now have their IPC namespace's own ``mqueue`` at ``/dev/mqueue``, emptied between runs."""
    leave, find = await _runs("pool", MQ_LEAVE, MQ_FIND)
    assert leave.stdout == "left\n", leave
    assert find.stdout.strip() == "gone 2", find  # ENOENT


# Red team, session 49. Each pair of connected sockets is sent over one of them (SCM_RIGHTS) with full buffers: a
# cycle that only the kernel's unix-socket garbage collector frees, asynchronously, after the processes are gone.
INFLIGHT_LEAVE = """
import socket
held = []  # open until the run ends: the cycles become garbage only when the server kills the run
for _ in range(40):
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    a.setblocking(False)
    try:
        while True:
            a.send(b'x' * 65536)
    except BlockingIOError:
        pass
    socket.send_fds(b, [b'y'], [a.fileno(), b.fileno()])
    if HOLD:
        held.append((a, b))
    else:  # garbage at once: the collector may take some during the run, and nothing closes a socket at its end
        a.close()
        b.close()
print('left', len(open('/proc/net/unix').read().splitlines()) - 1)
"""
INFLIGHT_FIND = """
sockets = len(open('/proc/net/unix').read().splitlines()) - 1
hold = bytearray(300 << 20)
print(sockets, 'sockets', len(hold) >> 20, 'MB')
"""


@pytest.mark.parametrize("hold", [True, False])
async def test_unix_sockets_left_in_flight_do_not_reach_the_next_run(host_audit: object, hold: bool) -> None:
    """Before: the next run found the 80 sockets and, where there is a memory cgroup, their ~300 MB of buffers: it
    was killed for memory it never took (or, on cgroup v1 with a lower limit, the limit could not be set: an
    infrastructure error). Now the server waits for the kernel to free them before it takes the next run."""
    sb = make("pool", size=1)
    try:
        leave = await sb.run(f"HOLD = {hold}\n" + INFLIGHT_LEAVE, timeout_s=20, memory_mb=512)
        find = await sb.run(INFLIGHT_FIND, timeout_s=20, memory_mb=512)
    finally:
        await sb.close()
    assert leave.stdout.startswith("left ") and (leave.stdout == "left 80\n" or not hold), leave
    assert find.error is None and not find.memory_exceeded, find
    assert find.stdout == "0 sockets 300 MB\n", find


# Red team, session 49: the next child is forked from the server after it read a run's output, so it starts with a
# copy of the server's memory. Prints a marker built at run time (the code never holds it whole), on both streams.
OUTPUT_LEAVE = """
import os, sys
mark = 'PRIVATE' + '-' + {tag!r}
for stream in (sys.stdout, sys.stderr):
    stream.write(mark + ' ' * {pad} + mark + '\\\\n')
    stream.flush()
"""
# Scans its own readable memory for any marker.
OUTPUT_FIND = """
import re
found = set()
with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:
    for line in maps:
        span, perms = line.split()[:2]
        if 'r' not in perms or '[vvar' in line or '[vsyscall' in line:
            continue
        lo, hi = (int(x, 16) for x in span.split('-'))
        try:
            mem.seek(lo)
            found.update(re.findall(rb'PRIVATE-[0-9a-f]{16}', mem.read(hi - lo)))
        except OSError:
            pass
print(sorted(found))
"""


@pytest.mark.parametrize("pad", [10, 100_000])
async def test_the_next_run_cannot_find_a_run_s_output_in_its_own_memory(host_audit: object, pad: int) -> None:
    """Before: the next run on the server found the marker (short output: in freed ``bytes`` objects of the
    server's reads and its answer; long output: in the head and tail it kept)."""
    tag = os.urandom(8).hex()
    sb = make("pool", size=1)
    try:
        leave = await sb.run(OUTPUT_LEAVE.format(tag=tag, pad=pad), timeout_s=20)
        find = await sb.run(OUTPUT_FIND, timeout_s=20)
    finally:
        await sb.close()
    assert f"PRIVATE-{tag}" in leave.stdout and f"PRIVATE-{tag}" in leave.stderr, leave
    assert find.exit_code == 0, find
    assert find.stdout == "[]\n", find
