"""Fixtures for the model tests: a model made by ``tirl model init`` (no download) and the real sandbox."""

from __future__ import annotations

import asyncio
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tirl.config import SandboxConfig
from tirl.models.init import ModelSpec, init_model
from tirl.sandbox import create_sandbox
from tirl.sandbox.base import Sandbox


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default (tiny) Qwen2 model of ``tirl model init``."""
    return init_model(ModelSpec(arch="qwen2"), tmp_path_factory.mktemp("init") / "qwen2")


@pytest.fixture(scope="session")
def model_sandbox() -> Iterator[Sandbox]:
    """The real sandbox (bubblewrap where it works), stateless."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sb = create_sandbox(SandboxConfig(warm_pool=False, timeout_s=10.0), warn=False)
    yield sb


def swe_demonstrations(tasks: Sequence[Any], chat: Any, prefix: str) -> list[Any]:
    """The swe-lite expert's episodes for ``tasks`` through the real env, sandbox and judge (a fresh ``/tmp``
    work root every uid can traverse: the bubblewrap sandbox runs as an unprivileged uid)."""
    from tirl.envs.registry import env_factory
    from tirl.envs.tasks.swe_experts import curriculum_expert_solution
    from tirl.sft import build_demonstrations

    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(root, 0o755)

    async def make() -> list[Any]:
        sandbox = create_sandbox(SandboxConfig(warm_pool=False, timeout_s=10.0), warn=False)
        try:
            factory = env_factory("swe-lite", sandbox=sandbox, max_turns=10, work_root=root, cache_dir=root / "cache")
            return await build_demonstrations(
                list(tasks),
                curriculum_expert_solution,
                chat,
                factory,
                max_turns=10,
                max_total_tokens=6144,
                concurrency=1,
            )
        finally:
            await sandbox.close()

    return asyncio.run(make())
