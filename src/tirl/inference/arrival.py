"""The arrival gate of ``tirl serve``: HTTP requests reach the batched sampler in bursts.

Used by :class:`tirl.inference.server.ModelServer`. Not covered: fairness
between clients (a burst is let in in arrival order).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class ArrivalGate:
    """Lets requests into the sampler in bursts, so that what would be one batch in-process is one batch here.

    HTTP clients send their next requests one by one as their answers
    arrive, spread over tens to hundreds of milliseconds. Without this gate
    the sampler starts a batch with the first few and the rest wait a whole
    batch: closed-loop clients then split into groups that never re-join.
    The gate holds requests while a batch runs (they could not start anyway)
    and, once the sampler is idle, until

    * as many requests wait as were let in last time (closed-loop clients send
      back what they got), and then none arrived for ``gap_s``; or
    * ``max_wait_s`` passed since the sampler became idle; or
    * ``max_batch`` requests wait.

    The cost: a request that arrives alone after a larger burst waits up to
    ``max_wait_s``; one that arrives alone on an idle server waits ``gap_s``.
    """

    POLL_S = 0.002  # how often a held burst checks whether the running batch has ended

    def __init__(self, is_busy: Callable[[], bool], *, gap_s: float, max_wait_s: float, max_batch: int) -> None:
        self.is_busy = is_busy
        self.gap_s = gap_s
        self.max_wait_s = max_wait_s
        self.max_batch = max_batch
        self.expected = 1  # how many were let in last time
        self._waiting: list[asyncio.Future[None]] = []
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def wait(self) -> None:
        """Return when this request may go to the sampler."""
        if self.max_wait_s <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        self._arrived.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        await fut

    async def _arrival(self, timeout_s: float) -> bool:
        self._arrived.clear()
        try:
            async with asyncio.timeout(timeout_s):
                await self._arrived.wait()
        except TimeoutError:
            return False
        return True

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        idle_since: float | None = None
        while len(self._waiting) < self.max_batch:
            if self.is_busy():
                idle_since = None
                await self._arrival(self.POLL_S)
                continue
            now = loop.time()
            idle_since = now if idle_since is None else idle_since
            left = idle_since + self.max_wait_s - now
            if left <= 0:
                break
            if len(self._waiting) >= self.expected:
                if not await self._arrival(min(self.gap_s, left)):
                    break  # the burst is over
            else:
                await self._arrival(min(left, self.POLL_S * 5))
        waiting, self._waiting = self._waiting, []
        self.expected = max(1, len(waiting))
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)
