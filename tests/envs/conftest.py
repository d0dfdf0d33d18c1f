"""Fixtures for the environment tests: the real sandbox (bubblewrap when usable) and a shared cache."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tirl.config import SandboxConfig
from tirl.envs.workspace import unmount_under
from tirl.sandbox import create_sandbox
from tirl.sandbox.base import Sandbox


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    """The real sandbox: bubblewrap where it works, else the process fallback (no warm pool: stateless)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        backend = os.environ.get("TIRL_ENVS_TEST_BACKEND", "auto")  # auto: bubblewrap where it works
        sb = create_sandbox(SandboxConfig(backend=backend, warm_pool=False, timeout_s=10.0), warn=False)  # type: ignore[arg-type]
    yield sb


@pytest.fixture(scope="session")
def swe_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One template/pytest-bundle cache for the whole session (built once, like in training)."""
    return tmp_path_factory.mktemp("swe-cache")


@pytest.fixture
def work_root() -> Iterator[Path]:
    """A workspace root every uid can traverse (the bubblewrap sandbox runs as an unprivileged uid)."""
    import os
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="tirl-envs-test-", dir="/tmp"))
    os.chmod(root, 0o755)
    yield root
    unmount_under(root)  # a test that failed before its env closed: its tmpfs (as root) leaked
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def make_swe(sandbox: Sandbox, swe_cache: Path, work_root: Path):  # type: ignore[no-untyped-def]
    """A factory of swe-lite envs on the shared sandbox, cache and workspace root (keywords go to SweLiteEnv)."""
    from tirl.envs.swe_lite import SweLiteEnv

    def factory(**kw: object) -> SweLiteEnv:
        return SweLiteEnv(sandbox=sandbox, cache_dir=swe_cache, work_root=work_root, **kw)  # type: ignore[arg-type]

    return factory
