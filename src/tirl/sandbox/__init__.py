r"""Where model-written code runs: :func:`create_sandbox` picks and builds a backend.

>>> from tirl.config import SandboxConfig
>>> sb = create_sandbox(SandboxConfig(backend="process", warm_pool=False), warn=False)
>>> import asyncio
>>> asyncio.run(sb.run("print(6 * 7)")).stdout
'42\n'

Backends: ``bwrap`` (:mod:`tirl.sandbox.bwrap`, isolated, one interpreter per
run), the warm pool on top of it (:mod:`tirl.sandbox.pool`, isolated, forked
from pre-started interpreters) and ``process`` (:mod:`tirl.sandbox.process`,
no isolation, for machines without bubblewrap). Each module's docstring lists
what it covers and what it does not.
"""

from __future__ import annotations

import warnings

from tirl.config import SandboxConfig
from tirl.errors import SetupError
from tirl.sandbox.base import ExecResult, Lang, RunDefaults, Sandbox
from tirl.sandbox.bwrap import BwrapSandbox, bwrap_problem
from tirl.sandbox.pool import WarmPool
from tirl.sandbox.process import ProcessSandbox

__all__ = ["BwrapSandbox", "ExecResult", "Lang", "ProcessSandbox", "RunDefaults", "Sandbox", "WarmPool"]
__all__ += ["create_sandbox"]


def create_sandbox(cfg: SandboxConfig | None = None, *, warn: bool = True) -> Sandbox:
    """Build the sandbox that ``cfg`` asks for.

    ``backend="auto"`` uses bubblewrap when it works on this machine, else the
    plain-process fallback with a warning that says what it does not protect
    against. ``backend="bwrap"`` fails with :class:`SetupError` if bubblewrap
    cannot run. With ``warm_pool`` (default) the isolated backend is the warm
    pool of ``pool_size`` pre-started interpreters.
    """
    cfg = cfg or SandboxConfig()
    common = RunDefaults(timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb, max_output_chars=cfg.max_output_chars)
    backend = cfg.backend
    if backend in ("auto", "bwrap"):
        problem = bwrap_problem()
        if problem is None:
            backend = "bwrap"
        elif cfg.backend == "bwrap":
            raise SetupError(
                f"config sandbox.backend='bwrap' but {problem}; install bubblewrap or set sandbox.backend=process"
            )
        else:
            if warn:
                warnings.warn(f"tirl sandbox: bubblewrap unusable: {problem}", RuntimeWarning, stacklevel=2)
            backend = "process"
    if backend == "bwrap":
        if cfg.warm_pool:
            return WarmPool(isolate=True, size=cfg.pool_size, **common)
        return BwrapSandbox(**common)
    if cfg.warm_pool:
        return WarmPool(isolate=False, size=cfg.pool_size, warn=warn, **common)
    return ProcessSandbox(warn=warn, **common)
