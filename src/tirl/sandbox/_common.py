"""Pieces shared by the sandbox backends: limits, output capping, result building.

Kept free of any backend so that the fork server (``_server.py``), which runs
*inside* the sandbox with only the standard library, can reuse the same rules
by copying nothing: it has its own tiny copy of :func:`apply_rlimits`.
"""

from __future__ import annotations

import os
import resource
import signal
from dataclasses import dataclass

from tirl.sandbox.base import ExecResult

# What a sandboxed program sees as its environment; nothing of the parent's leaks in.
CLEAN_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONIOENCODING": "utf-8:replace",
}

TRUNCATION_MARKER = "\n[... {n} characters cut ...]\n"
BYTES_MARKER = "\n[... output cut, {n} bytes in all ...]\n"


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-execution resource limits (applied as rlimits in the executing process).

    ``cpu_s`` caps CPU seconds (SIGXCPU, reported as a timeout), ``memory_mb``
    the address space (an allocation past it fails: MemoryError in Python),
    ``nproc`` the processes of the sandbox user (a fork bomb hits EAGAIN; not
    enforced for uid 0), ``fsize_mb`` the size of any one written file (SIGXFSZ)
    and ``nofile`` the open descriptors.
    """

    timeout_s: float = 5.0
    memory_mb: int = 1024
    nproc: int = 64
    fsize_mb: int = 64
    nofile: int = 256

    @property
    def cpu_s(self) -> int:
        return max(1, int(self.timeout_s + 1.0))


def apply_rlimits(limits: Limits) -> None:
    """Set the rlimits of the calling process (call in the child, before exec)."""
    mb = 1024 * 1024
    pairs = [
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_AS, limits.memory_mb * mb),
        (resource.RLIMIT_NPROC, limits.nproc),
        (resource.RLIMIT_FSIZE, limits.fsize_mb * mb),
        (resource.RLIMIT_NOFILE, limits.nofile),
        (resource.RLIMIT_CORE, 0),
    ]
    for which, value in pairs:
        resource.setrlimit(which, (value, value))


class CappedBuffer:
    """Collects a byte stream, keeping only its first and last ``keep`` bytes.

    >>> b = CappedBuffer(4)
    >>> b.feed(b"0123456789")
    >>> (b.head, bytes(b.tail), b.total)
    (b'0123', b'6789', 10)
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head = b""
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    @property
    def dropped(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self, max_chars: int) -> tuple[str, bool]:
        """Decoded text (invalid UTF-8 becomes U+FFFD) cut to ``max_chars``; (text, truncated)."""
        head = self.head.decode("utf-8", errors="replace")
        if not self.dropped:
            return cut_text(head + self.tail.decode("utf-8", errors="replace"), max_chars)
        tail = self.tail.decode("utf-8", errors="replace")
        half = max_chars // 2
        marker = BYTES_MARKER.format(n=self.total)
        return head[:half] + marker + tail[-half:], True


def cut_text(text: str, max_chars: int) -> tuple[str, bool]:
    r"""``text`` if it fits in ``max_chars``, else head + marker + tail; (text, truncated).

    >>> cut_text("a" * 10 + "b" * 10, 8)[0]
    'aaaa\n[... 12 characters cut ...]\nbbbb'
    """
    if len(text) <= max_chars:
        return text, False
    half = max_chars // 2
    return text[:half] + TRUNCATION_MARKER.format(n=len(text) - 2 * half) + text[-half:], True


def memory_exceeded(exit_code: int | None, stderr: str) -> bool:
    """Whether a failed run ran out of memory (address-space rlimit or OOM kill)."""
    if exit_code == 0 or exit_code is None:
        return False
    markers = ("MemoryError", "Cannot allocate memory", "cannot allocate memory", "std::bad_alloc")
    return any(m in stderr for m in markers)


def build_result(
    out: CappedBuffer,
    err: CappedBuffer,
    exit_code: int | None,
    *,
    timed_out: bool,
    wall_s: float,
    max_chars: int,
    error: str | None = None,
) -> ExecResult:
    """Turn captured streams and a status into an :class:`ExecResult` (SIGXCPU counts as a timeout)."""
    stdout, t1 = out.text(max_chars)
    stderr, t2 = err.text(max_chars)
    if exit_code == -signal.SIGXCPU:
        timed_out = True
    return ExecResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        timed_out=timed_out,
        memory_exceeded=memory_exceeded(exit_code, stderr),
        truncated=t1 or t2,
        wall_s=wall_s,
        error=error,
    )


NUL_MESSAGE = "error: the code contains a NUL byte (\\x00); a program's text cannot hold one\n"


def nul_result(code: str) -> ExecResult | None:
    """The failed result for code that holds a NUL byte (no program can be given it), else None.

    This is the program's failure (exit status 1, the reason on stderr), not the sandbox's.
    """
    if "\0" not in code:
        return None
    return ExecResult(stdout="", stderr=NUL_MESSAGE, exit_code=1)


def exit_status(status: int) -> int:
    """A ``waitpid`` status as an exit code (negative signal number when killed)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)
