"""Pieces shared by the sandbox backends: limits, output capping, result building.

The output buffer and cutting rules live in :mod:`tirl.sandbox._wire` (standard library only), whose
source the fork server (``_server.py``) also runs inside the sandbox; they are re-exported here.
"""

from __future__ import annotations

import os
import resource
import signal
from dataclasses import dataclass

from tirl.sandbox._wire import BYTES_MARKER, TRUNCATION_MARKER, CappedBuffer, cut_text
from tirl.sandbox.base import ExecResult

__all__ = ["BYTES_MARKER", "CLEAN_ENV", "CORE_LIMIT", "TRUNCATION_MARKER", "CappedBuffer", "Limits", "cut_text"]
__all__ += ["MAX_ARG_BYTES", "apply_rlimits", "argv_result", "build_result", "exit_status", "memory_exceeded"]
__all__ += ["nul_result", "rlimit_values"]

# What a sandboxed program sees as its environment; nothing of the parent's leaks in.
CLEAN_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONIOENCODING": "utf-8:replace",
}


# RLIMIT_CORE of every sandboxed process: 1 byte, not 0. With 0 the kernel still streams a crashing process's
# whole memory to a pipe ``core_pattern`` helper (systemd-coredump, apport; a container shares the host's), as
# root, on the host: the red team of session 45 sent 60 MB per crash, up to 64 crashes a run. 1 is the kernel's
# "abort the dump" value for a pipe (it logs one rate-limited line), and below a page for a core file.
CORE_LIMIT = 1


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


def rlimit_values(limits: Limits) -> list[tuple[str, int, int]]:
    """Each rlimit ``limits`` sets: (prlimit's option name, resource, value for both soft and hard)."""
    mb = 1024 * 1024
    return [
        ("cpu", resource.RLIMIT_CPU, limits.cpu_s),
        ("as", resource.RLIMIT_AS, limits.memory_mb * mb),
        ("nproc", resource.RLIMIT_NPROC, limits.nproc),
        ("fsize", resource.RLIMIT_FSIZE, limits.fsize_mb * mb),
        ("nofile", resource.RLIMIT_NOFILE, limits.nofile),
        ("core", resource.RLIMIT_CORE, CORE_LIMIT),
    ]


def apply_rlimits(limits: Limits) -> None:
    """Set the rlimits of the calling process (call in the child, before exec)."""
    for _name, which, value in rlimit_values(limits):
        resource.setrlimit(which, (value, value))


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
    oom_killed: bool = False,
) -> ExecResult:
    """Turn captured streams and a status into an :class:`ExecResult` (SIGXCPU counts as a timeout).

    ``oom_killed``: the kernel's OOM killer killed a process of the sandbox (its memory cgroup says so).
    """
    stdout, t1 = out.text(max_chars)
    stderr, t2 = err.text(max_chars)
    if exit_code == -signal.SIGXCPU:
        timed_out = True
    return ExecResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        timed_out=timed_out,
        memory_exceeded=oom_killed or memory_exceeded(exit_code, stderr),
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


#: The longest program a command line carries (``bash -c CODE``, ``python -c CODE``): Linux's MAX_ARG_STRLEN,
#: 32 pages of 4 KiB, less the argument's closing NUL.
MAX_ARG_BYTES = 32 * 4096 - 1


def argv_result(code: str) -> ExecResult | None:
    r"""The failed result for code that no command line can carry, else None (for backends that exec it in argv).

    ``execve`` refuses a NUL byte (:func:`nul_result`), a character the file system encoding cannot write (a
    lone surrogate: a tool call's JSON arguments ``"\ud800"`` decode to one) and an argument longer than
    :data:`MAX_ARG_BYTES`. Like the NUL byte, each is the program's failure (exit status 1, the reason on
    stderr), never a sandbox ``error``: the program's text is the policy's to choose, and an ``error`` ends the
    episode as an infrastructure failure, outside the update.
    """
    if (refused := nul_result(code)) is not None:
        return refused
    try:
        size = len(os.fsencode(code))
    except UnicodeEncodeError as exc:
        char = f"U+{ord(code[exc.start]):04X}"
        message = (
            f"error: the code holds a lone surrogate ({char} at character {exc.start}), which no command line "
            "can carry; write the character as an escape sequence instead\n"
        )
        return ExecResult(stdout="", stderr=message, exit_code=1)
    if size > MAX_ARG_BYTES:
        message = (
            f"error: the code is {size:,} bytes; a command line carries at most {MAX_ARG_BYTES:,} (Linux's "
            "MAX_ARG_STRLEN); write long text to a file in pieces (several commands that append to it)\n"
        )
        return ExecResult(stdout="", stderr=message, exit_code=1)
    return None


def session_result(code: str) -> ExecResult | None:
    """The failed result for code too long for one session turn, else None (the warm pool's sessions).

    A session turn reaches its kernel as one message on a unix socket, which the socket's send buffer caps
    (~208 KiB by default). The cap is :data:`MAX_ARG_BYTES`, the command-line limit, so a session takes the
    programs every backend takes. Like :func:`argv_result`, the program's failure (exit status 1, the reason
    on stderr), never a sandbox ``error``: before, a longer turn killed the session server, and the ``error``
    ended the episode as an infrastructure failure, outside the update.
    """
    size = len(code.encode("utf-8", "surrogatepass"))
    if size <= MAX_ARG_BYTES:
        return None
    message = (
        f"error: the code is {size:,} bytes; a session turn carries at most {MAX_ARG_BYTES:,}; write long text "
        "to a file in pieces (several turns that append to it)\n"
    )
    return ExecResult(stdout="", stderr=message, exit_code=1)
