"""Rank launch for ``tirl train --nproc N`` on this machine: the checks, the follower processes, rank 0's group.

Who does what:

- **Rank 0** is the ``tirl train`` process itself. It runs everything a
  one-process run runs — the generator, the environments (local or on Ray),
  the void filter, resampling, the advantages, the logs, the checkpoints and
  the evaluations — and, at each update, broadcasts the step's kept
  trajectories, their advantages and the shuffle seed to the other ranks
  (:class:`~tirl.distributed.ddp.DDPSync`). The advantages are therefore
  computed once, on the full batch, before the split.
- **Ranks 1..N-1** are ``python -m tirl.distributed.follower`` processes
  started by :meth:`LocalRanks.launch` (logs in ``RUN_DIR/ranks/``). They
  build their learner with the same factory as rank 0
  (:func:`tirl.trainer.learner.build_learner`) and only update. With
  ``--backend ray`` every rank runs in a Ray Train worker instead
  (:mod:`tirl.distributed.ray_ranks`).

:class:`LocalRanks` is the :class:`~tirl.trainer.learner.RankGroup` the
recipe drives: :meth:`~LocalRanks.start` binds rank 0's device and joins the
process group (watching the followers: one that exits, or no rendezvous
within :data:`INIT_TIMEOUT_S`, is one error), :meth:`~LocalRanks.share_state`
sends rank 0's (possibly resumed) weights and optimiser state,
:meth:`~LocalRanks.close` tells the followers to stop and reaps them (a
follower still waiting for the state, because rank 0 failed before sending
it, is killed after 5 s); when rank 0 was interrupted (Ctrl-C, SIGTERM) or
failed, it sends them SIGTERM instead, and :meth:`~LocalRanks.kill_now` kills them at once at a second
Ctrl-C or SIGTERM (a follower killed by rank 0 has it said in its log). A follower also ends by itself when
rank 0's process is gone (``kill -9``): it watches its parent
(:func:`tirl.distributed.follower.watch_parent`).

Failures: ``--nproc`` above the CPU count (gloo) or the GPU count (nccl) of
this machine (not checked with ``--backend ray``: the cluster holds the
ranks), a global batch (``trainer.prompts_per_step * algo.group_size``) that
does not divide by N, and a ``--master-port`` in use are set-up errors before
anything runs. A rank that dies makes the next collective fail on rank 0:
one ``error:`` line, exit 2, and the run directory keeps its last complete
checkpoint, so ``tirl train --resume`` continues it.

Not covered: multi-node launch without Ray (local ranks rendezvous on 127.0.0.1), restarting a dead rank.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from tirl.config import TirlConfig, config_to_dict
from tirl.distributed.ddp import (
    DDPSync,
    backend_for,
    bind_device,
    join_group,
    rank_device,
    share_leader_state,
    stop_followers,
)
from tirl.errors import SetupError
from tirl.trainer import run_files
from tirl.trainer.learner import Learner

INIT_TIMEOUT_S = 300.0


def machine_limit(device: str) -> tuple[int, str]:
    """How many ranks this machine allows, and of what."""
    if device.startswith("cuda"):
        return (torch.cuda.device_count() if torch.cuda.is_available() else 0), "GPUs"
    return os.cpu_count() or 1, "CPUs"


def port_free(port: int) -> bool:
    """Whether ``127.0.0.1:port`` can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_world(cfg: TirlConfig, nproc: int, port: int) -> None:
    """Set-up errors of ``--nproc``/``--master-port`` (raises :class:`SetupError` naming the fix)."""
    if nproc < 1:
        raise SetupError(f"--nproc {nproc} is invalid: use 1 or more trainer processes")
    if nproc == 1:
        return
    limit, what = machine_limit(cfg.model.device)
    if nproc > limit and cfg.trainer.backend != "ray":  # on Ray the cluster, not this machine, holds the ranks
        raise SetupError(
            f"--nproc {nproc} is larger than this machine allows ({limit} {what} for model.device="
            f"{cfg.model.device}): use --nproc {max(1, limit)} or fewer"
        )
    batch = cfg.trainer.prompts_per_step * cfg.algo.group_size
    if batch % nproc:
        raise SetupError(
            f"the global batch trainer.prompts_per_step x algo.group_size = {batch} does not divide by --nproc "
            f"{nproc}: set trainer.prompts_per_step to a multiple of {nproc // math.gcd(nproc, cfg.algo.group_size)} "
            f"or use an --nproc that divides {batch}"
        )
    if port and not port_free(port):
        raise SetupError(f"--master-port {port} is in use: pick a free port, or leave --master-port out (auto)")


@dataclass
class LocalRanks:
    """Rank 0's view of ranks 1..N-1 as processes on this machine (a :class:`~tirl.trainer.learner.RankGroup`)."""

    nproc: int
    port: int
    backend: str
    run_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    config_file: str = ""
    addr: str = "127.0.0.1"  # the rendezvous: rank 0's address
    sync: DDPSync | None = None  # rank 0's, released before the group is destroyed
    shared: bool = False  # the followers took rank 0's state: they now wait for steps (or the stop)

    @classmethod
    def launch(cls, cfg: TirlConfig, run_dir: Path, nproc: int, port: int, model_path: str | None) -> LocalRanks:
        """Check the request, then start ranks 1..N-1 (they wait for rank 0 at the rendezvous)."""
        check_world(cfg, nproc, port)
        world = cls(nproc, port or free_port(), backend_for(cfg.model.device), Path(run_dir))
        logs = world.run_dir / run_files.RANKS
        logs.mkdir(parents=True, exist_ok=True)
        # in the run, not /tmp: a launcher killed by SIGKILL leaves nothing behind outside it (the next launch
        # rewrites it); O_NOFOLLOW: a link planted there is not written through
        world.config_file = str(logs / "config.json")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        with os.fdopen(os.open(world.config_file, flags, 0o600), "w") as fh:
            json.dump(config_to_dict(cfg), fh)  # the config crosses the process boundary losslessly
        for rank in range(1, nproc):
            cmd = [sys.executable, "-m", "tirl.distributed.follower", "--rank", str(rank), "--world", str(nproc)]
            cmd += ["--port", str(world.port), "--config", world.config_file, "--parent", str(os.getpid())]
            if model_path:
                cmd += ["--model", model_path]
            env = {**os.environ, "LOCAL_RANK": str(rank)}  # one machine: the node-local index is the rank
            with (logs / f"rank-{rank}.log").open("wb") as log:
                world.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        return world

    def start(self, device: str) -> DDPSync:
        """Bind rank 0's device, join the process group as rank 0 (watching the followers); rank 0's sync."""
        bind_device(rank_device(device, 0))
        err: list[BaseException] = []

        def init() -> None:
            try:
                join_group(self.backend, self.addr, self.port, 0, self.nproc)
            except BaseException as exc:  # reported below as one error line
                err.append(exc)

        t = threading.Thread(target=init, daemon=True)
        t.start()
        deadline = time.monotonic() + INIT_TIMEOUT_S
        while t.is_alive():
            t.join(0.2)
            dead = [i + 1 for i, p in enumerate(self.procs) if p.poll() not in (None, 0)]
            if dead or time.monotonic() > deadline:
                why = f"rank(s) {dead} exited" if dead else f"no rendezvous within {INIT_TIMEOUT_S:.0f}s"
                raise SetupError(f"--nproc {self.nproc}: {why}; see {self.run_dir / 'ranks'}")
        if err:
            raise SetupError(f"--nproc {self.nproc}: the process group did not start ({err[0]}); see the rank logs")
        self.sync = DDPSync(rank=0, world_size=self.nproc)
        return self.sync

    def share_state(self, learner: Learner) -> None:
        """Send every follower rank 0's weights and optimiser state."""
        share_leader_state(learner.model, learner.optimizer, self.backend)
        self.shared = True

    def close(self, *, abort: bool = False) -> None:
        """Tell the ranks the run is over, leave the group, reap the processes (kill those that hang).

        ``abort`` (rank 0 was interrupted or failed): the followers get SIGTERM instead of the stop message, since
        rank 0's update thread may still be inside a collective with them, where a stop would be a mismatched
        collective (a hang of up to ``COLLECTIVE_TIMEOUT_S``); they hold nothing rank 0 has not checkpointed.
        A second call does nothing.
        """
        clean = False
        try:
            if abort:  # first, so that a collective rank 0's update thread is still inside fails at once
                for p in self.procs:
                    if p.poll() is None:
                        p.terminate()  # the default action ends it even inside a gloo wait
                self._reap(5)
            if self.sync is not None:
                # before the state was shared the followers wait in sync_state: they are killed instead
                clean = self.shared and not abort and stop_followers(self.backend)
                self.sync.release()
                self.sync = None
                dist.destroy_process_group()
        finally:
            self._reap(60 if clean else 5)  # never started or a rank died: the others cannot finish
            if self.config_file:
                Path(self.config_file).unlink(missing_ok=True)

    def kill_now(self) -> None:
        """Kill every follower still running (SIGKILL), without waiting: a second Ctrl-C or SIGTERM on rank 0.

        Called from rank 0's signal handler (:class:`tirl.trainer.stop_signals.StopSignals`), wherever its clean-up
        was; :meth:`close` reaps them. Each one's log says why it ended without a word of its own.
        """
        for rank, p in enumerate(self.procs, start=1):
            if p.poll() is None:
                p.kill()
                self._note(rank, "at a second stop signal")

    def _reap(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for each follower, kill the ones still running; none is left."""
        for rank, p in enumerate(self.procs, start=1):
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                self._note(rank, f"after a grace of {timeout:g} s")
        self.procs = []

    def _note(self, rank: int, why: str) -> None:
        """Append why rank 0 killed ``rank`` to that rank's log (best effort: the log may be gone)."""
        try:
            with (self.run_dir / run_files.RANKS / f"rank-{rank}.log").open("a") as log:
                log.write(f"rank {rank}: killed by rank 0 {why}\n")
        except OSError:
            pass
