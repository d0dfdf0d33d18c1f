"""``tirl.distributed.ray_backend.connect``: how many GCS attempts each ``ray.init`` gets, and the order of tries.

A cluster that wants an auth token refuses every attempt of a driver without one, and Ray retries its GCS
connection ``NUM_REDIS_GET_RETRIES`` times (20, about a second each) before raising: tirl's first try gets
:data:`~tirl.distributed.ray_backend.FIRST_CONNECT_RETRIES`, then the token (Ray's own retries), or, when the
first failure was not about the token, Ray's full patience once more. A recording stand-in for the ``ray`` module
is passed to ``connect`` (its parameter); Ray's real constant is read and restored. The real clusters, with and
without a token, are ``test_ray_cluster.py``'s. Also: ``tirl train --nproc 2`` refuses a model directory without
``config.json`` before it connects or starts a rank.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")
from ray._private import ray_constants
from tests.cli_contract.cli_run import assert_refused, run_cli

from tirl.distributed import ray_backend
from tirl.errors import SetupError


class Recorder:
    """``ray.init`` that fails with the given errors in turn (then connects), noting the retries it ran under."""

    def __init__(self, *errors: str) -> None:
        self.errors = list(errors)
        self.retries: list[int] = []

    def init(self, **_: Any) -> None:
        self.retries.append(ray_constants.NUM_REDIS_GET_RETRIES)
        if self.errors:
            raise ConnectionError(self.errors.pop(0))

    def shutdown(self) -> None:
        pass


def test_a_running_cluster_is_reached_on_the_first_short_try() -> None:
    default = ray_constants.NUM_REDIS_GET_RETRIES
    rec = Recorder()
    ray_backend.connect(rec, "127.0.0.1:1")
    assert rec.retries == [min(default, ray_backend.FIRST_CONNECT_RETRIES)]
    assert default == ray_constants.NUM_REDIS_GET_RETRIES  # restored


def test_a_token_refusal_goes_to_the_token_after_the_short_try(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_backend, "_send_cluster_token", lambda: True)
    default = ray_constants.NUM_REDIS_GET_RETRIES
    rec = Recorder("InvalidAuthToken: the cluster wants a token")
    ray_backend.connect(rec, "127.0.0.1:1")
    assert rec.retries == [ray_backend.FIRST_CONNECT_RETRIES, default]


def test_another_failure_gets_rays_full_patience_then_one_error_line() -> None:
    default = ray_constants.NUM_REDIS_GET_RETRIES
    rec = Recorder("GCS not up yet", "GCS not up yet")
    with pytest.raises(SetupError, match=r"cannot connect to the Ray cluster at '127\.0\.0\.1:1'"):
        ray_backend.connect(rec, "127.0.0.1:1")
    assert rec.retries == [ray_backend.FIRST_CONNECT_RETRIES, default]


def test_the_users_gcs_wait_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", "60")
    default = ray_constants.NUM_REDIS_GET_RETRIES
    rec = Recorder()
    ray_backend.connect(rec, "127.0.0.1:1")
    assert rec.retries == [default]


def test_a_model_dir_without_config_is_refused_before_connecting(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: each Ray Train rank found it after start-up (20+ s). The address is unreachable: had tirl tried to
    connect, the error would name the cluster (after minutes of Ray's retries), not the model directory."""
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    out = run_cli(capsys, "train", "--model", bad, "--run-dir", tmp_path / "r", "--nproc", "2", "--no-progress",
                  "--backend", "ray", "--ray-address", "127.0.0.1:9")  # fmt: skip
    assert_refused(out, str(bad), "has no config.json")


@pytest.mark.parametrize("address", ["nowhere:1", "no-such-host.invalid:6379"])
def test_an_unknown_host_is_one_error_line_before_ray_is_asked(address: str) -> None:
    """``--ray-address nowhere:1`` waited through Ray's GCS retries, twice (2 min 30 s and counting, with Ray's own
    warnings every 5 s and Ctrl-C unanswered inside Ray's blocking call): a name that resolves to nothing is no
    cluster still starting."""
    rec = Recorder()
    with pytest.raises(SetupError, match=r"cannot connect to the Ray cluster at .*: its host .* does not resolve"):
        ray_backend.connect(rec, address)
    assert rec.retries == []  # ray.init never ran
