"""The sandbox contract: run one piece of code, get an :class:`ExecResult`.

Backends (``bwrap``, ``process``) and the warm pool implement :class:`Sandbox`
by subclassing it: the shared :meth:`Sandbox.run` fills in the backend's
default limits and hands one :class:`RunRequest` to the backend's ``_run``.
Each backend's docstring lists what it covers and what it does not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

Lang = Literal["python", "bash"]


@dataclass(frozen=True, slots=True)
class ExecResult:
    """The outcome of one execution.

    ``stdout``/``stderr`` are decoded with replacement characters and cut to
    head + marker + tail when longer than the cap (``truncated`` is then True).
    ``exit_code`` is the process status (negative: killed by that signal;
    None: it never started).
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    memory_exceeded: bool = False
    truncated: bool = False
    wall_s: float = 0.0
    error: str | None = None  # infrastructure failure (the sandbox itself broke), not a failing program

    @property
    def ok(self) -> bool:
        """The program ran to completion with status 0."""
        return self.exit_code == 0 and not self.timed_out and not self.memory_exceeded and self.error is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``tirl sandbox exec --json``)."""
        return asdict(self)

    def observation(self) -> str:
        """The text shown to the model as the tool output."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append(self.stderr.rstrip("\n"))
        if self.timed_out:
            parts.append("[timed out]")
        if self.memory_exceeded:
            parts.append("[memory limit exceeded]")
        if self.error:
            parts.append(f"[sandbox error: {self.error}]")
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One call to :meth:`Sandbox.run`, with the backend's default limits filled in."""

    code: str
    lang: Lang
    timeout_s: float
    memory_mb: int
    workdir: Path | None
    session: str | None


class RunDefaults(TypedDict, total=False):
    """What a backend gives a run that leaves it unset: keywords of every backend's constructor.

    ``timeout_s`` (wall clock, default 5.0), ``memory_mb`` (address space per process, and all the sandbox's
    memory where it has a memory cgroup: :mod:`tirl.sandbox._cgroup`; default 1024) and
    ``max_output_chars`` (each of stdout and stderr, default 2000).
    """

    timeout_s: float
    memory_mb: int
    max_output_chars: int


@runtime_checkable
class Sandbox(Protocol):
    """Runs untrusted code. Implementations must be safe to call concurrently.

    Backends subclass this protocol and implement ``_run``; ``run`` is shared.
    """

    name: str
    timeout_s: float
    memory_mb: int
    max_output_chars: int

    def _set_defaults(self, defaults: RunDefaults) -> None:
        """Keep a constructor's :class:`RunDefaults` (the documented default for each one left out)."""
        self.timeout_s = defaults.get("timeout_s", 5.0)
        self.memory_mb = defaults.get("memory_mb", 1024)
        self.max_output_chars = defaults.get("max_output_chars", 2000)

    async def run(
        self,
        code: str,
        *,
        lang: Lang = "python",
        timeout_s: float | None = None,
        memory_mb: int | None = None,
        workdir: Path | None = None,
        session: str | None = None,
    ) -> ExecResult:
        """Run ``code`` and return its :class:`ExecResult`.

        ``workdir`` is mounted writable (else a fresh private one); ``session``
        keeps Python state across calls with the same key (notebook-style).
        A limit left as None (or 0) is the backend's own default.
        """
        limits = (timeout_s or self.timeout_s, memory_mb or self.memory_mb)
        return await self._run(RunRequest(code, lang, *limits, workdir, session))

    async def _run(self, req: RunRequest) -> ExecResult:
        """The backend's execution of one request (limits already resolved)."""
        ...

    async def end_session(self, session: str) -> None:
        """Forget the state kept for ``session`` (no-op if none)."""
        ...

    async def close(self) -> None:
        """Stop every process and remove every temporary directory this sandbox made."""
        ...
