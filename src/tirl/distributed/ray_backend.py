"""Environments and their sandboxes on Ray actors, scheduled by the local rollout strategies.

Placement (``trainer.backend = "ray"``):

* **Env hosts** — one :class:`EnvHost` actor per Ray node (or ``hosts=N``),
  each pinned to its node. A host owns a sandbox pool (``create_sandbox``
  on that node) and every env instance created on it; ``reset`` (workspace
  and sandbox set-up — the Initializer's work), ``step`` (tool execution)
  and ``evaluate`` (hidden tests — the Evaluator's work) run there.
* **The driver** (where ``tirl train`` runs) keeps the scheduling: the
  pipeline's queues, worker pools, timeouts, retries, trace and fault
  accounting are the local ones (:mod:`tirl.rollout.pipeline`,
  :mod:`tirl.rollout.strategies`), unchanged. They see the remote envs
  through :class:`RayEnvProxy`, an ordinary :class:`~tirl.envs.base.Env`
  whose methods are actor calls, made by the ``EnvFactory`` of
  :class:`RayEnvPool`. The trainer and the generator also stay in the
  driver (or behind an OpenAI-compatible server, ``--generator openai``).

Faults: when a host dies (node lost, OOM, ``ray.kill``) every call on its
envs raises :class:`~tirl.envs.base.EnvError`, so the episode ends
``init_failed`` / ``error`` / ``eval_failed`` through the usual accounting,
the pool stops placing envs there, and an Initializer retry lands on a live
host. A batch always has all its trajectories.

Not covered: restarting dead hosts (``max_restarts=0``: an env's state
cannot be rebuilt), moving the generator or trainer onto Ray, envs
registered at run time in the driver only (the hosts import envs by their
registered name or an import string, so register them in an importable
module), and securing the Ray cluster (run it on a private network). Token
authentication works: when the cluster asks for a token, the driver sends
the local one (``~/.ray/auth_token``, ``RAY_AUTH_TOKEN``); every node of such
a cluster must run with ``RAY_AUTH_MODE=token`` and the same token.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import socket
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from tirl.config import EnvConfig, SandboxConfig
from tirl.envs.base import Env, EnvError, EvalResult, StepResult, Task
from tirl.errors import SetupError
from tirl.types import Message

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnvRecipe:
    """How a host builds envs: ``make_env(env_name, config=env_config, sandbox=<host sandbox>, **kwargs)``.

    With ``sandbox_config=None`` no sandbox is passed (the env makes its own, if any). An env may be built with
    some ``env_config`` fields changed (:meth:`RayEnvPool.factory`: evaluation's ``reward_mode="all"``).
    """

    env_name: str
    env_config: EnvConfig | None = None
    sandbox_config: SandboxConfig | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


class EnvHost:
    """The actor body: env instances by id, and one sandbox pool shared by them (async actor)."""

    def __init__(self, recipe: EnvRecipe) -> None:
        self.recipe = recipe
        self.envs: dict[str, Env] = {}
        self.sandbox: Any = None
        self.created = 0

    def _make(self, changes: dict[str, Any] | None = None) -> Env:
        from tirl.envs.registry import make_env

        config = self.recipe.env_config
        if changes and config is not None:
            config = replace(config, **changes)
        kwargs = dict(self.recipe.kwargs)
        if self.recipe.sandbox_config is not None:
            if self.sandbox is None:
                from tirl.sandbox import create_sandbox

                self.sandbox = create_sandbox(self.recipe.sandbox_config, warn=False)
            kwargs["sandbox"] = self.sandbox
        return make_env(self.recipe.env_name, config=config, **kwargs)

    def _env(self, env_id: str) -> Env:
        env = self.envs.get(env_id)
        if env is None:
            raise EnvError(f"env {env_id} does not exist on this host (closed, or its reset failed)")
        return env

    def info(self) -> dict[str, Any]:
        """Node id, process id and live env count of this host."""
        import os

        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "envs": len(self.envs)}

    async def reset(
        self, env_id: str, task: Task, seed: int | None, changes: dict[str, Any] | None = None
    ) -> list[Message]:
        """Create env ``env_id`` (the recipe's config with ``changes``) and reset it."""
        env = self._make(changes)
        self.envs[env_id] = env
        self.created += 1
        return list(await env.reset(task, seed=seed))

    async def step(self, env_id: str, action: Message) -> StepResult:
        """``step`` of env ``env_id``."""
        return await self._env(env_id).step(action)

    async def evaluate(self, env_id: str) -> EvalResult:
        """``evaluate`` of env ``env_id``."""
        return await self._env(env_id).evaluate()

    async def close(self, env_id: str) -> None:
        """Close and forget env ``env_id`` (no-op if unknown)."""
        env = self.envs.pop(env_id, None)
        if env is not None:
            await env.close()

    async def shutdown(self) -> None:
        """Close every env and the sandbox."""
        envs, self.envs = list(self.envs.values()), {}
        await asyncio.gather(*(e.close() for e in envs), return_exceptions=True)
        if self.sandbox is not None:
            await self.sandbox.close()
            self.sandbox = None


def ray_module() -> Any:
    """The ``ray`` module; without Ray installed one :class:`SetupError` naming the extra."""
    try:
        import ray
    except ImportError:
        raise SetupError("trainer.backend=ray needs Ray — pip install 'tirl[ray]'") from None
    return ray


class RayEnvProxy:
    """An :class:`~tirl.envs.base.Env` whose methods run on an :class:`EnvHost` actor."""

    def __init__(
        self, pool: RayEnvPool, host: int, env_id: str, name: str, changes: dict[str, Any] | None = None
    ) -> None:
        self.pool = pool
        self.host = host
        self.env_id = env_id
        self.name = name
        self.changes = changes  # env_config fields the host changes for this env (None: the recipe's)
        self._opened = False

    async def _call(self, method: str, *args: Any) -> Any:
        ray = self.pool.ray
        handle = self.pool.handles[self.host]
        if not self.pool.alive[self.host]:
            raise EnvError(f"env host {self.host} is dead ({self.pool.death[self.host]})")
        ref = getattr(handle, method).remote(self.env_id, *args)
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(ref)  # a pipeline timeout: stop the remote coroutine too
            raise
        except ray.exceptions.RayActorError as exc:
            self.pool.mark_dead(self.host, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            raise EnvError(f"env host {self.host} died during {method}: {self.pool.death[self.host]}") from None

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """Create the env on its host and reset it there."""
        self._opened = True
        return list(await self._call("reset", task, seed, self.changes))

    async def step(self, action: Message) -> StepResult:
        """``step`` on the host."""
        return await self._call("step", action)  # type: ignore[no-any-return]

    async def evaluate(self) -> EvalResult:
        """``evaluate`` on the host."""
        return await self._call("evaluate")  # type: ignore[no-any-return]

    async def close(self) -> None:
        """Close the env on its host; nothing to do when the host is dead (the env died with it)."""
        self.pool.placed[self.host] -= 1
        if self._opened and self.pool.alive[self.host]:
            await self._call("close")


def _auth_refused(exc: BaseException) -> bool:
    """Whether a failed ``ray.init`` was the cluster refusing a missing or wrong auth token."""
    seen: BaseException | None = exc
    while seen is not None:
        if "InvalidAuthToken" in str(seen) or type(seen).__name__ == "AuthenticationError":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _send_cluster_token() -> bool:
    """Turn Ray's token authentication on for this process when a local token exists; True when it is on.

    The token is ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``; ``RAY_AUTH_MODE``, when set, decides instead.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return False
    return bool(maybe_enable_token_auth_if_token_available(warn_if_disabled=False))


#: GCS connection attempts (about a second each) of tirl's first ``ray.init``: enough for a running cluster; an auth
#: refusal then costs this many seconds, not Ray's default 20, and any other failure is retried with Ray's default.
FIRST_CONNECT_RETRIES = 3


@contextlib.contextmanager
def _few_gcs_retries() -> Iterator[None]:
    """Ray's GCS connect retries lowered to :data:`FIRST_CONNECT_RETRIES`.

    Not when the user set ``RAY_gcs_server_port_wait_time_s`` (Ray honours it instead), nor on a Ray without the
    constant (nothing to lower).
    """
    try:
        from ray._private import ray_constants
    except ImportError:
        yield
        return
    before = getattr(ray_constants, "NUM_REDIS_GET_RETRIES", None)
    if before is None or os.environ.get("RAY_gcs_server_port_wait_time_s") is not None:  # noqa: SIM112 (Ray's spelling)
        yield
        return
    ray_constants.NUM_REDIS_GET_RETRIES = min(before, FIRST_CONNECT_RETRIES)
    try:
        yield
    finally:
        ray_constants.NUM_REDIS_GET_RETRIES = before


def _init_again(ray: Any, kwargs: dict[str, Any]) -> ConnectionError | None:
    """``ray.init(**kwargs)`` after clearing a failed attempt's state; its error, or None when it connected."""
    with contextlib.suppress(Exception):
        ray.shutdown()
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:
        return exc
    return None


def _unresolved_host(address: str | None) -> str | None:
    """``"'nowhere' does not resolve (...)"`` when ``address`` is ``HOST:PORT`` and HOST has no address, else None.

    Only the name: a refused port may be a cluster still starting, which Ray's retries are for. ``auto``,
    ``local`` and ``ray://`` addresses are Ray's to read.
    """
    if not address or "://" in address or address in ("auto", "local"):
        return None
    host = address.rpartition(":")[0].strip("[]") if ":" in address else address
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        return f"{host!r} does not resolve ({exc.strerror})"
    except (OSError, UnicodeError):
        return None
    return None


def connect(ray: Any, address: str | None) -> None:
    """``ray.init`` at ``address``; on an auth-token refusal, again with the local token.

    ``ray start --head`` turns token authentication on by itself when a token
    exists (Ray writes ``~/.ray/auth_token`` on the first local ``ray.init()``),
    but a driver given an explicit address does not send it (InvalidAuthToken).
    It cannot send it up front either: a token-mode driver connected to a
    cluster without authentication refuses its workers' calls, so its actors
    never start. So tirl connects without, and retries with the token only
    when the cluster asked for one.
    """
    unknown = _unresolved_host(address)
    if unknown:  # Ray retried a name that resolves to nothing for minutes, its blocking call deaf to Ctrl-C
        raise SetupError(f"cannot connect to the Ray cluster at {address!r}: its host {unknown} — check "
                         "--ray-address (HOST:PORT of `ray start --head`)")  # fmt: skip
    kwargs: dict[str, Any] = {"address": address, "log_to_driver": False, "include_dashboard": False}
    try:
        with _few_gcs_retries():  # a refused token is refused at every retry: 20 s of them by default
            ray.init(**kwargs)
        return
    except ConnectionError as exc:
        error: ConnectionError = exc
    if not _auth_refused(error):  # not the token: perhaps a cluster still starting, so Ray's full patience
        again = _init_again(ray, kwargs)
        if again is None:
            return
        error = again
    token = _auth_refused(error) and _send_cluster_token()
    if token:
        again = _init_again(ray, kwargs)
        if again is None:
            return
        error = again
    hint = " The cluster refused the local auth token: give tirl its token (RAY_AUTH_TOKEN)." if token else ""
    if not token and _auth_refused(error):
        hint = " The cluster wants an auth token: put it in ~/.ray/auth_token or RAY_AUTH_TOKEN."
    raise SetupError(
        f"cannot connect to the Ray cluster at {address!r} ({error}) — start it with "
        f"`ray start --head --port 6379` and pass --ray-address HOST:6379.{hint}"
    ) from None


class RayEnvPool:
    """Env hosts on a Ray cluster and the ``EnvFactory`` that places envs on them.

    ``address``: the cluster (``"auto"``, ``"HOST:PORT"``, ``None`` = connect
    to a running cluster if there is one, else start a local one). ``hosts``:
    the number of hosts (None = one per alive node, each pinned to its node).
    """

    def __init__(
        self,
        recipe: EnvRecipe,
        *,
        address: str | None = None,
        hosts: int | None = None,
        max_concurrency: int = 1000,
    ) -> None:
        ray = ray_module()
        self.ray = ray
        self.recipe = recipe
        if not ray.is_initialized():
            connect(ray, address)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor_cls = ray.remote(EnvHost)
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        count = hosts or len(nodes)
        self.handles: list[Any] = []
        for i in range(count):
            strategy = NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False)
            self.handles.append(
                actor_cls.options(
                    num_cpus=0,
                    max_restarts=0,
                    max_concurrency=max_concurrency,
                    scheduling_strategy=strategy,
                    # Ray runs async actors on uvloop when it is installed; uvloop's subprocess_exec rejects the
                    # user/group arguments the sandbox passes, so the hosts keep the standard asyncio loop.
                    runtime_env={"env_vars": {"RAY_USE_UVLOOP": "0"}},
                ).remote(recipe)
            )
        self.alive = [True] * count
        self.death = [""] * count
        self.placed: Counter[int] = Counter()
        self._ids = itertools.count()

    async def ready(self, timeout_s: float = 120.0) -> list[dict[str, Any]]:
        """Wait until every host has started; returns their ``info()``."""
        refs = [h.info.remote() for h in self.handles]
        try:
            async with asyncio.timeout(timeout_s):
                return list(await asyncio.gather(*refs))
        except TimeoutError:
            raise SetupError(f"the Ray env hosts did not start within {timeout_s}s — check `ray status`") from None

    def mark_dead(self, host: int, why: str) -> None:
        """Stop placing envs on ``host``."""
        if self.alive[host]:
            self.alive[host] = False
            self.death[host] = why
            log.warning("ray env host %d died: %s", host, why)

    def make_env(self, task: Task, changes: dict[str, Any] | None = None) -> Env:
        """The ``EnvFactory``: a proxy on the live host with the fewest envs (``changes``: see :meth:`factory`)."""
        live = [i for i, ok in enumerate(self.alive) if ok]
        if not live:
            raise EnvError("no live Ray env host: " + "; ".join(f"host {i}: {d}" for i, d in enumerate(self.death)))
        host = min(live, key=lambda i: self.placed[i])
        self.placed[host] += 1
        return RayEnvProxy(self, host, f"{task.id}#{next(self._ids)}", self.recipe.env_name, changes)

    def factory(self, **changes: Any) -> Callable[[Task], Env]:
        """An ``EnvFactory`` whose envs the hosts build with these ``env_config`` fields changed."""
        return functools.partial(self.make_env, changes=dict(changes))

    async def close(self) -> None:
        """Shut the hosts down (close their envs and sandboxes) and kill the actors."""
        refs = [h.shutdown.remote() for h, ok in zip(self.handles, self.alive, strict=True) if ok]
        if refs:
            try:
                async with asyncio.timeout(30):
                    await asyncio.gather(*refs, return_exceptions=True)
            except TimeoutError:
                log.warning("ray env hosts did not shut down within 30s; killing them")
        for h in self.handles:
            self.ray.kill(h)
        self.handles = []
        self.alive = []
