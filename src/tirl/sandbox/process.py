"""The plain-process fallback, for machines where bubblewrap cannot run.

This is **not isolation**. It runs the code as an ordinary child process of
the same user, so use it only for code you would run yourself.

Covered:
    - a wall-clock timeout that kills the program's process group;
    - rlimits on CPU time, address space (memory), process count, file size,
      open files; no core dumps;
    - a scrubbed environment (no variable of the parent is passed on);
    - a fresh temporary working directory (also ``HOME`` and ``TMPDIR``),
      removed afterwards;
    - output cut to head + marker + tail; invalid UTF-8 decoded with U+FFFD.

Not covered (the bubblewrap backend covers all of these):
    - **network**: the program can connect anywhere, loopback included, and
      resolve names;
    - **file system**: it can read everything the user can (home directory,
      secrets, the project) and write everywhere the user can (``/tmp``,
      home, the project);
    - **processes**: it sees and can signal the user's other processes,
      including its parent; a child that calls ``setsid`` (a daemon) leaves the
      process group and survives the timeout;
    - **fork bombs when run as root**: the kernel does not apply the process
      count limit to uid 0;
    - **disk**: the file-size limit caps each file, not their number, so the
      disk can still be filled.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Unpack

from tirl.sandbox._common import CLEAN_ENV, Limits, argv_result
from tirl.sandbox._spawn import spawn
from tirl.sandbox.base import ExecResult, RunDefaults, RunRequest, Sandbox

WARNING = (
    "tirl sandbox: using the plain-process fallback (no bubblewrap). It does NOT isolate "
    "network, file system or processes: the code can read your home directory and secrets, write anywhere "
    "you can, open network connections and leave daemons behind. Install bubblewrap (apt-get install "
    "bubblewrap) for isolation."
)


class ProcessSandbox(Sandbox):
    """Runs code as a plain child process with rlimits and a timeout (see the module docstring)."""

    name = "process"

    def __init__(self, *, python: str | None = None, warn: bool = True, **defaults: Unpack[RunDefaults]) -> None:
        self._set_defaults(defaults)
        self.python = python or sys.executable
        self.uids: set[int] = set()  # always empty: code runs as our own uid
        if warn:
            warnings.warn(WARNING, RuntimeWarning, stacklevel=2)

    async def _run(self, req: RunRequest) -> ExecResult:
        """Run ``req.code`` once; ``req.session`` is accepted but state is not kept (each run is fresh)."""
        code = req.code
        if (refused := argv_result(code)) is not None:  # bash -c / python -c: the code is an argument
            return refused
        # The process count covers all of the user's processes here, so it can only stop a runaway bomb.
        limits = Limits(timeout_s=req.timeout_s, memory_mb=req.memory_mb, nproc=1024)
        argv = [self.python, "-I", "-c", code] if req.lang == "python" else ["/bin/bash", "-c", code]
        tmp = Path(tempfile.mkdtemp(prefix="tirl-proc-"))
        cwd = req.workdir or tmp
        env = dict(CLEAN_ENV, HOME=str(cwd), TMPDIR=str(tmp))
        try:
            return await spawn(argv, cwd=cwd, env=env, limits=limits, max_chars=self.max_output_chars)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    async def end_session(self, session: str) -> None:
        """Nothing to forget: this backend keeps no state between runs."""

    async def close(self) -> None:
        """Nothing to stop: every run cleans up after itself."""
