"""Fixtures for the model tests: a model made by ``tirl model init`` (no download) and the real sandbox."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

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
