"""Where a skyrl-gym env would run the model's code on the host, tirl's sandbox runs it instead.

skyrl-gym runs model-written code in two places, both in tirl's process with
tirl's privileges: its ``PythonCodeExecutorToolGroup`` (the ``python`` tool
of ``searchcode``) runs ``python -c CODE`` in a plain subprocess, and ``lcb``
executes the model's program in a forked child to compute the reward. There
the code could read and write the user's files, reach the network, outlive
the episode and, in ``lcb``, write its own verdict into the grader's memory.

:func:`sandbox_env` is applied to each env instance :class:`~tirl.integrations.skyrl_gym.SkyRLGymEnv`
builds, at the adapter boundary (the installed package is not edited, and no
module global of it is replaced):

* every tool group whose type is exactly ``PythonCodeExecutorToolGroup``
  gets its ``python`` entry in the group's tool registry replaced by
  :meth:`SandboxedCode.python_tool`: the code runs in the run's sandbox (the
  shared pool, or one made from ``[sandbox]``) under the tool's own timeout,
  and the tool returns skyrl-gym's text (:func:`tool_text`);
* an ``lcb`` env's ``step`` is replaced on the instance by
  :func:`tirl.integrations.skyrl_lcb.lcb_step`: the program runs in the
  sandbox and is judged on the host (that module says how);
* the env's class and each tool group's type are checked against
  :data:`KNOWN_CLASSES` and :data:`KNOWN_GROUPS`: anything tirl does not know
  may run the model's code where tirl cannot see it, and is refused unless the
  user set ``env.skyrl_host_code=true`` (:data:`HOST_CODE_KEY`).

The model's code timing out, crashing or being killed is an observation (the
tool says so; ``lcb`` scores 0), never an infrastructure failure; the sandbox
itself failing is (:attr:`SandboxedCode.infra_error`, which the adapter raises
as :class:`~tirl.envs.base.EnvError` after the step).

Covered: ``searchcode``'s python tool, ``lcb``'s reward; the classes that run
no model code (``gsm8k``, ``gsm8k_multi_turn``, ``aime``, ``search``).
Not covered: ``text2sql`` runs the model's SQL with sqlite on the row's
database file, in tirl's process (skyrl-gym wraps it in a transaction it rolls
back, and sqlite refuses ``ATTACH`` inside one; a query may still read every
table of that file); ``search`` sends the model's query to the search server
the user configured; the isolation is the run's sandbox backend's (with
``sandbox.backend=process`` there is none: :mod:`tirl.sandbox.process`); the
sandbox's interpreter is the base Python, without the project's packages
(e.g. no numpy unless the system Python has it); output longer than
``sandbox.max_output_chars`` is cut (skyrl-gym returns all of it); code longer
than the kernel's limit on one argument (128 KiB) gets the sandbox's error text (not skyrl-gym's run).
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from pathlib import Path
from typing import Any

from tirl.envs.base import EnvError
from tirl.envs.common import SandboxLease
from tirl.sandbox.base import ExecResult

__all__ = ["HOST_CODE_KEY", "KNOWN_CLASSES", "KNOWN_GROUPS", "SandboxedCode", "host_code_problem", "sandbox_env"]
__all__ += ["tool_text", "warn_host_code"]

#: The config key that lets env classes tirl cannot sandbox run the model's code on the host.
HOST_CODE_KEY = "env.skyrl_host_code"

_PREFIX = "skyrl_gym.envs."
#: skyrl-gym's env classes tirl knows (``module:Class``) and what happens to the model's code in each.
KNOWN_CLASSES: dict[str, str] = {
    _PREFIX + "gsm8k.env:GSM8kEnv": "runs no model code",
    _PREFIX + "gsm8k.multi_turn_env:GSM8kMultiTurnEnv": "runs no model code",
    _PREFIX + "aime.env:AIMEEnv": "runs no model code",
    _PREFIX + "search.env:SearchEnv": "runs no model code (queries go to the search server)",
    _PREFIX + "sql.env:SQLEnv": "runs the model's SQL on the row's sqlite file, in a rolled-back transaction",
    _PREFIX + "searchcode.env:SearchCodeEnv": "python tool in tirl's sandbox",
    _PREFIX + "lcb.env:LCBEnv": "the program judged for the reward runs in tirl's sandbox",
}
_LCB = _PREFIX + "lcb.env:LCBEnv"
_PYTHON_GROUP = "skyrl_gym.tools.python:PythonCodeExecutorToolGroup"
#: skyrl-gym's tool groups tirl knows: the python one is sandboxed, the others run no model code.
KNOWN_GROUPS = (_PYTHON_GROUP, "skyrl_gym.tools.search:SearchToolGroup", "skyrl_gym.tools.sql:SQLCodeExecutorToolGroup")


def class_path(obj: Any) -> str:
    """``module:QualifiedName`` of a class (or of an object's class)."""
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def host_code_problem(env_class: str, entry_point: Any) -> str | None:
    """Why tirl cannot vouch for ``env_class`` (registered with ``entry_point``); ``None`` when it knows it."""
    path = entry_point if isinstance(entry_point, str) else class_path(entry_point)
    if path in KNOWN_CLASSES:
        return None
    return (
        f"skyrl-gym env class {env_class!r} ({path}) is not one tirl knows, so tirl cannot tell whether it runs the "
        "model's code on this host, outside tirl's sandbox"
    )


def host_code_fix() -> str:
    """The fix an error about an unknown env class names (the registered names of the classes tirl knows)."""
    import skyrl_gym

    entries = {name: spec.entry_point for name, spec in skyrl_gym.registry.items()}
    known = ", ".join(sorted(name for name, entry in entries.items() if entry in KNOWN_CLASSES))
    return (
        f"use one of skyrl-gym's own classes ({known}), or set {HOST_CODE_KEY}=true to run it anyway "
        "(its code then runs unsandboxed, with your privileges)"
    )


def warn_host_code(env_class: str) -> None:
    """The loud note of a run that opted in to an env class tirl cannot sandbox."""
    warnings.warn(
        f"tirl skyrl-gym: {HOST_CODE_KEY}=true: env class {env_class!r} is not one tirl knows; any code it runs "
        "for the model (tools, reward) runs on this host, NOT in tirl's sandbox: it can read and write your "
        "files, reach the network and forge its reward",
        RuntimeWarning,
        stacklevel=2,
    )


def tool_text(result: ExecResult, timeout: float) -> str:
    """What skyrl-gym's ``PythonCodeExecutorToolGroup.python`` returns for this run.

    As skyrl-gym: stdout stripped; any stderr makes it an error text; a
    timeout names the tool's timeout. Added (skyrl-gym returns stdout there):
    a run that hit the memory limit, or ended with a non-zero status and no
    stderr (killed, ``sys.exit(3)``), says so.
    """
    error = "Error executing Python code: "
    if result.timed_out:
        return f"{error}Execution timed out after {timeout} seconds."
    if result.stderr:
        return error + result.stderr.strip()
    if result.memory_exceeded:
        return f"{error}memory limit exceeded."
    if result.exit_code not in (0, None):  # bwrap reports a signal as 128 + its number
        status = result.exit_code
        return error + (f"killed by signal {-status}." if status < 0 else f"exited with status {status}.")
    if result.error is not None:
        return f"{error}sandbox error: {result.error}"
    return result.stdout.strip()


class SandboxedCode:
    """Runs model-written code for one skyrl-gym env in the run's sandbox, from skyrl-gym's worker thread.

    skyrl-gym's ``step`` is synchronous and runs in a thread (``asyncio.to_thread``); the sandbox is
    asynchronous and lives on the episode's event loop, so each run is handed to that loop and waited for.
    """

    def __init__(self, lease: SandboxLease, loop: asyncio.AbstractEventLoop) -> None:
        self._lease = lease
        self._loop = loop
        self.infra_error: str | None = None  # the first failure of the sandbox itself (not of the model's code)

    async def _run(self, code: str, timeout_s: float, workdir: Path | None) -> ExecResult:
        sandbox = await self._lease.get()
        return await sandbox.run(code, lang="python", timeout_s=timeout_s, workdir=workdir)

    def run(self, code: str, *, timeout_s: float, workdir: Path | None = None) -> ExecResult:
        """Run ``code`` in the sandbox and wait (call it from a worker thread, never from the loop's own)."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            raise RuntimeError("SandboxedCode.run waits for the event loop: call it from a worker thread")
        try:
            result = asyncio.run_coroutine_threadsafe(self._run(code, timeout_s, workdir), self._loop).result()
        except Exception as exc:  # the sandbox broke: an infrastructure failure, raised by the adapter
            result = ExecResult(stdout="", stderr="", exit_code=None, error=f"{type(exc).__name__}: {exc}")
        if result.error is not None and self.infra_error is None:
            self.infra_error = result.error
        return result

    def python_tool(self, group: Any, code: str) -> str:
        """``PythonCodeExecutorToolGroup.python``, run in the sandbox under the group's timeout."""
        timeout = group.timeout
        return tool_text(self.run(code, timeout_s=float(timeout)), timeout)


def sandbox_env(env: Any, code: SandboxedCode, *, env_class: str, allow_host: bool) -> None:
    """Route every place ``env`` runs the model's code through ``code`` (see the module docstring).

    Raises :class:`EnvError` for a class or tool group tirl does not know unless ``allow_host``, and when a
    substitution did not take (a skyrl-gym whose internals changed).
    """
    path = class_path(env)
    unknown = [] if path in KNOWN_CLASSES else [path]
    for group in getattr(env, "tool_groups", None) or []:
        group_path = class_path(group)
        if group_path == _PYTHON_GROUP:
            tool = functools.partial(code.python_tool, group)
            registry = getattr(group, "_tool_registry", None)
            if not isinstance(registry, dict) or "python" not in registry:
                raise EnvError(f"skyrl-gym env {env_class!r}: cannot reach the python tool's registry — {_CHANGED}")
            registry["python"] = tool
            if group.get_tool("python") is not tool:
                raise EnvError(f"skyrl-gym env {env_class!r}: the python tool did not take tirl's sandbox — {_CHANGED}")
        elif group_path not in KNOWN_GROUPS:
            unknown.append(group_path)
    if path == _LCB:
        from tirl.integrations.skyrl_lcb import lcb_step

        env.step = functools.partial(lcb_step, env, code)
    if unknown and not allow_host:
        raise EnvError(
            f"skyrl-gym env {env_class!r} uses {', '.join(unknown)}, which tirl cannot sandbox — {host_code_fix()}"
        )


_CHANGED = "this skyrl-gym's internals differ from the ones tirl was written for; pin skyrl-gym to the tested version"
