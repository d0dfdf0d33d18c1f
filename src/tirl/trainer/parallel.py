"""Micro-batches of one update on CPU worker threads, one intra-op thread each, results in order.

A small model's operations on a few CPU cores are too small to split well
across OpenMP threads: with passive waiting (``OMP_WAIT_POLICY=PASSIVE``, which
tirl sets so that idle threads do not starve the generator and the sandbox)
every parallel region pays a wake-up, and the built-in 0.9M-parameter model's
update took the same time on 1 intra-op thread as on 2 (0.42 s per step of
64 sequences on this project's 2-core machine). Running independent
micro-batches side by side, each on its own Python thread with a single
intra-op thread, keeps every core busy instead: the operations release the
GIL, and the Python work per micro-batch is small next to its compute.

:class:`MicroPool` runs ``fn(item)`` for a list of items on ``workers``
threads and yields the results **in the items' order**, with at most
``workers`` items started and not yet consumed, so at most ``workers``
micro-batches' activations (and their results) exist at once. Consuming in
order is what keeps the update deterministic: the caller folds gradients and
statistics in the same order as a sequential loop over the same items.

:func:`auto_workers` is the rule the trainer uses: on the CPU, models under
:data:`~tirl.inference.hf.SMALL_MODEL_PARAMS` parameters get as many workers
as torch has intra-op threads (``trainer.threads``); bigger models and other
devices get 1 (their operations are large enough to use intra-op threads,
and each worker would hold a parameter-sized gradient).

Not covered: the workers set ``torch.set_num_threads(1)`` in their own
threads, which also changes the process-wide default that threads starting
their first torch operation inherit; :meth:`MicroPool.map` restores the
caller's value when it finishes, and tirl never generates while it updates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import torch

from tirl.inference.hf import SMALL_MODEL_PARAMS

T = TypeVar("T")
R = TypeVar("R")


def auto_workers(model: Any) -> int:
    """Micro-batches to compute at once: torch's intra-op thread count for a small CPU model, else 1."""
    first = next(iter(model.parameters()), None)
    if first is None or first.device.type != "cpu":
        return 1
    if sum(p.numel() for p in model.parameters()) >= SMALL_MODEL_PARAMS:
        return 1
    return max(1, torch.get_num_threads())


def _one_thread() -> None:
    torch.get_num_threads()  # torch's lazy per-thread set-up first, so that it cannot undo the next line
    torch.set_num_threads(1)


class MicroPool:
    """``workers`` threads with one intra-op thread each; :meth:`map` yields results in order."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._executor: ThreadPoolExecutor | None = None

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Generator[R, None, None]:
        """``fn(item)`` for every item, in order; with one worker it runs inline in the caller's thread."""
        if self.workers == 1 or len(items) <= 1:
            yield from (fn(item) for item in items)
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="tirl-micro", initializer=_one_thread)
        prev = torch.get_num_threads()
        pending: deque[Future[R]] = deque()
        try:
            for item in items:
                if len(pending) >= self.workers:
                    yield pending.popleft().result()
                pending.append(self._executor.submit(fn, item))
            while pending:
                yield pending.popleft().result()
        finally:
            for fut in pending:  # the caller stopped early (an exception, a non-finite loss): let them finish
                fut.cancel()
            for fut in pending:
                if not fut.cancelled():
                    fut.exception()
            torch.set_num_threads(prev)  # the workers' set_num_threads(1) also set the process-wide default

    def close(self) -> None:
        """Stop the worker threads."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
