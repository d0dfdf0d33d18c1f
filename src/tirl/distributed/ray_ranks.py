"""Trainer ranks 1..N-1 of ``tirl train --nproc N --backend ray`` as Ray actors (not Ray Train).

Each rank is one actor (:class:`RankActor`) that runs the same follower code
as a local rank (:func:`tirl.trainer.distributed.follower`) and joins rank 0's
process group over TCP at rank 0's node address. Actors are spread over the
cluster's nodes (``SPREAD``); on GPU each asks for one GPU, on CPU for none
(the rank's threads are ``trainer.threads``), so they never wait for CPU slots
that the environment hosts hold. The config travels as JSON text (a node may
not see rank 0's files); the model path must exist on every node (the same
path, or a shared file system).

:class:`RayRank` gives rank 0 the same handle as a local process
(``poll``/``kill``/``wait``), so failures are reported the same way.

Not covered: Ray Train's worker groups, placement groups with gang
scheduling (an actor that cannot be placed makes rank 0 time out at the
rendezvous), restarting a dead rank.
"""

from __future__ import annotations

import os
import socket
import subprocess
from typing import Any

from tirl.distributed.ray_backend import _connect, _ray


class RankActor:
    """Runs one follower rank in a Ray worker process."""

    def run(self, argv: list[str]) -> dict[str, Any]:
        """The follower's exit code, and where it ran."""
        from tirl.trainer.distributed import follower

        rc = follower(argv)
        return {"rc": rc, "pid": os.getpid(), "host": socket.gethostname()}

    def where(self) -> dict[str, Any]:
        """The actor's node and process."""
        import ray

        return {"pid": os.getpid(), "host": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id()}


class RayRank:
    """A rank actor seen through ``subprocess.Popen``'s ``poll``/``kill``/``wait``."""

    def __init__(self, actor: Any, ref: Any, placement: dict[str, Any]) -> None:
        self.actor = actor
        self.ref = ref
        self.placement = placement
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """None while running, else the exit code (1 when the actor died)."""
        if self.returncode is None:
            ray = _ray()
            ready, _ = ray.wait([self.ref], timeout=0)
            if ready:
                try:
                    self.returncode = int(ray.get(self.ref)["rc"])
                except Exception:  # the actor or its process died: reported as a failed rank
                    self.returncode = 1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the rank to end (``subprocess.TimeoutExpired`` after ``timeout``)."""
        ready, _ = _ray().wait([self.ref], timeout=timeout)
        if not ready:
            raise subprocess.TimeoutExpired("ray rank", timeout or 0.0)
        code = self.poll()
        return 1 if code is None else code

    def kill(self) -> None:
        """Kill the actor."""
        _ray().kill(self.actor, no_restart=True)


def driver_address(address: str | None) -> str:
    """Connect to the cluster (``trainer.ray_address``) and return this node's address for the rendezvous."""
    ray = _ray()
    if not ray.is_initialized():
        _connect(ray, address)
    return str(ray.util.get_node_ip_address())


def launch_rank(argv: list[str], *, gpu: bool) -> RayRank:
    """Start one rank actor running ``follower(argv)``."""
    ray = _ray()
    actor = (
        ray.remote(RankActor)
        .options(num_cpus=0, num_gpus=1 if gpu else 0, max_restarts=0, scheduling_strategy="SPREAD")
        .remote()
    )
    placement = ray.get(actor.where.remote(), timeout=300)
    return RayRank(actor, actor.run.remote(argv), placement)
