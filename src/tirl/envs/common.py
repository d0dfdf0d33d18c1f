"""Small components the built-in environments compose: a sandbox lease and block execution."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.config import SandboxConfig
from tirl.fences import CodeBlock
from tirl.parsing import PYTHON_LANGS
from tirl.sandbox.base import ExecResult, Lang, Sandbox


class SandboxLease:
    """A sandbox that is either borrowed (shared, never closed here) or created on first use and owned.

    Environments are per episode, so the rollout should pass one shared
    sandbox (or warm pool) to every env; without one, each env creates its own
    with ``tirl.sandbox.create_sandbox(config)`` and closes it in ``close``.
    """

    def __init__(self, sandbox: Sandbox | None, config: SandboxConfig | None) -> None:
        self._sandbox = sandbox
        self._config = config
        self._owned = False

    async def get(self) -> Sandbox:
        """The sandbox (created now if none was given)."""
        if self._sandbox is None:
            from tirl.sandbox import create_sandbox  # imported late: the sandbox package is optional here

            made: Any = create_sandbox(self._config or SandboxConfig())
            if inspect.isawaitable(made):
                made = await made
            self._sandbox = made
            self._owned = True
        return self._sandbox

    @property
    def config(self) -> SandboxConfig | None:
        """The configuration used when the sandbox is created here."""
        return self._config

    async def close(self) -> None:
        """Close the sandbox if this lease created it."""
        if self._owned and self._sandbox is not None:
            sandbox, self._sandbox, self._owned = self._sandbox, None, False
            await sandbox.close()


def block_lang(block: CodeBlock) -> Lang:
    """``python`` for python fences, ``bash`` for shell fences."""
    return "python" if block.lang.lower() in PYTHON_LANGS else "bash"


@dataclass(slots=True)
class BlockRuns:
    """The results of running a turn's code blocks in order."""

    results: list[ExecResult] = field(default_factory=list)
    infra_error: str | None = None  # the first sandbox failure, which stops the remaining blocks

    @property
    def wall_s(self) -> float:
        """Total execution time."""
        return sum(r.wall_s for r in self.results)

    def info(self) -> dict[str, Any]:
        """JSON-ready summary for ``StepResult.info``."""
        return {
            "exit_codes": [r.exit_code for r in self.results],
            "timed_out": any(r.timed_out for r in self.results),
            "exec_s": round(self.wall_s, 6),
        }


async def run_blocks(
    sandbox: Sandbox,
    blocks: list[tuple[Lang, str]],
    *,
    timeout_s: float | None = None,
    workdir: Path | None = None,
    session: str | None = None,
) -> BlockRuns:
    """Run ``(lang, code)`` pairs one after another; stop at the first infrastructure error."""
    runs = BlockRuns()
    for lang, code in blocks:
        result = await sandbox.run(
            code, lang=lang, timeout_s=timeout_s, workdir=workdir, session=session if lang == "python" else None
        )
        runs.results.append(result)
        if result.error is not None:
            runs.infra_error = result.error
            break
    return runs
