"""A virtual clock for asyncio: sleeps and timeouts take no wall time (tests and the exact pipeline benchmark)."""

from __future__ import annotations

import asyncio
import heapq
from typing import Any


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever no callback is ready.

    Code runs unchanged, but every sleep and timeout takes zero wall time and
    exactly its duration in loop time: a discrete-event simulation of the
    same schedule. It does not count the CPU time of the code itself (that
    takes zero loop time), and it must not wait on real I/O (sockets,
    subprocesses), whose completion the virtual clock cannot see.

    >>> async def nap():
    ...     await asyncio.sleep(3600)
    ...     return asyncio.get_running_loop().time()
    >>> VirtualTimeLoop.run(nap())
    3600.0
    """

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0

    def time(self) -> float:
        """The virtual clock (starts at 0)."""
        return self._now

    def _run_once(self) -> None:
        sched: list[Any] = self._scheduled  # type: ignore[attr-defined]
        while sched and sched[0]._cancelled:
            self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
            heapq.heappop(sched)._scheduled = False
        if not self._ready and sched:  # type: ignore[attr-defined]
            self._now = max(self._now, sched[0]._when)
        super()._run_once()  # type: ignore[misc]

    @classmethod
    def run(cls, coro: Any) -> Any:
        """Run ``coro`` to completion on a fresh virtual-time loop and close it."""
        loop = cls()
        try:
            return loop.run_until_complete(coro)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
