"""The generator contract: token ids in; sampled ids, their log-probs and a finish reason out.

Backends (``hf`` in-process transformers, ``openai`` HTTP, ``vllm``) implement
:class:`Generator`. Calls are async and may arrive concurrently from many
episodes; a backend batches them (the in-process ones, ``hf`` and ``vllm``, with
one shared :class:`RequestBatcher`).

Optional capabilities are declared as protocols, checked with ``isinstance``
by the wiring (:mod:`tirl.trainer.wiring`), never probed attribute by attribute:

==================  =====================================================  =====================
protocol            what the trainer does with it                          backends
==================  =====================================================  =====================
:class:`Versioned`  sets ``policy_version`` after each update              hf, openai, vllm
:class:`WeightSyncing`  calls ``sync_weights(model, tokenizer, version)``  openai, vllm
:class:`AdapterSyncing`  a LoRA policy: ``sync_adapter(model, version)``, not merged  vllm
:class:`BusyMetered`    reads ``busy_seconds()`` into the trace's ``gpu_util``  hf
:class:`Startable`  awaits ``start()`` before the run (checks URL, key, model)  openai
==================  =====================================================  =====================
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import math
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from tirl.rollout.staleness import ROLLOUT_STEP

FinishReason = Literal["stop", "length", "eos"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling settings of one request."""

    max_new_tokens: int = 96
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()  # stop strings; the stop string is included in the output
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class GenerationResult:
    """The sampled continuation of one prompt."""

    token_ids: list[int]
    logprobs: list[float]  # log-prob of each sampled token under the distribution it was sampled from
    finish_reason: FinishReason
    text: str = ""
    policy_version: int = 0
    extra: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Generator(Protocol):
    """Samples continuations of token-id prompts."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        """Sample one continuation of ``prompt_ids``."""
        ...

    async def close(self) -> None:
        """Release the backend (threads, HTTP sessions, GPU memory)."""
        ...


@runtime_checkable
class Versioned(Protocol):
    """A generator that stamps its results with the policy version it samples from."""

    policy_version: int


@runtime_checkable
class WeightSyncing(Protocol):
    """A generator with its own copy of the weights, updated from the trainer's after each update."""

    policy_version: int

    def sync_weights(self, model: Any, tokenizer: Any, version: int) -> None:
        """Load the trainer's current weights; later samples carry ``version``."""
        ...


@runtime_checkable
class AdapterSyncing(Protocol):
    """A weight-syncing generator that loads a LoRA policy's adapter itself (no merged copy of the model)."""

    def sync_adapter(self, model: Any, version: int) -> None:
        """Load the adapter of the peft model ``model``; later samples carry ``version``."""
        ...


@runtime_checkable
class BusyMetered(Protocol):
    """A generator that measures its own busy time (the trace turns it into ``gpu_util``)."""

    def busy_seconds(self) -> float:
        """Cumulative seconds with at least one request being generated."""
        ...


@runtime_checkable
class Startable(Protocol):
    """A generator that must be started (and checked) before the first request."""

    async def start(self) -> Any:
        """Connect and check the backend; raises a ``SetupError`` naming the fix."""
        ...


@dataclass(slots=True)
class Request:
    """One queued generation request."""

    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future[GenerationResult]
    step: float = math.inf  # the rollout step it serves (ROLLOUT_STEP; none: the newest)
    order: int = 0  # arrival order


class WaitCountingLock:
    """A mutex that says how many threads are waiting for it.

    The in-process generator holds one for each batch; with continuous batching a batch could keep taking
    new requests for as long as episodes run, so it stops taking them as soon as anyone (a weight update,
    ``tirl serve``'s reload) waits for the lock, and the update gets in when the batch drains.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._guard = threading.Lock()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Threads blocked in :meth:`acquire` now."""
        return self._waiting

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As :meth:`threading.Lock.acquire`, counted in :attr:`waiting` while it blocks."""
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        with self._guard:
            self._waiting += 1
        try:
            return self._lock.acquire(True, timeout)
        finally:
            with self._guard:
                self._waiting -= 1

    def release(self) -> None:
        """Release the lock."""
        self._lock.release()

    def locked(self) -> bool:
        """Whether someone holds it."""
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _set_result(fut: asyncio.Future[GenerationResult], result: GenerationResult) -> None:
    if not fut.done():
        fut.set_result(result)


def _weak_call(
    ref: weakref.WeakMethod[Callable[[list[Request]], list[GenerationResult]]], owner: str
) -> Callable[[list[Request]], list[GenerationResult]]:
    """``run_batch`` through a weak reference to its owner's method.

    The owner holds its batcher, and a batcher holding the owner's bound method made a reference cycle: an
    owner dropped without ``close()`` kept its worker thread (and that thread's OpenMP team) alive until the
    next full garbage collection. With the weak reference it is freed at once, and its executor's thread exits.
    """

    def call(batch: list[Request]) -> list[GenerationResult]:
        method = ref()
        if method is None:
            raise RuntimeError(f"{owner} was garbage-collected while requests were queued")
        return method(batch)

    return call


@dataclass(eq=False)
class RequestBatcher:
    """The request queue in front of an in-process generator: requests that arrive together run as one batch.

    ``submit`` queues one request and returns its result; a drain task waits ``batch_window_s``
    for more requests, then hands up to ``max_batch`` live ones (None: all queued) to the
    backend's ``run_batch`` on ONE worker thread, so batches never overlap each other or
    anything else the owner runs on ``executor`` (weight loads). A backend that batches continuously
    (``hf``) calls :meth:`take_queued` from that thread between its steps, appends what it takes to the
    batch list it was given (results come back in the list's order), and may hand a result over before
    the batch ends with :meth:`deliver`. When more requests are queued
    than ``max_batch``, the batch takes the oldest rollout step's first (:data:`ROLLOUT_STEP`,
    set by the overlapped rollout of ``rollout.max_staleness``), in arrival order within a step,
    as :class:`~tirl.rollout.staleness.OldestStepFirst` does for HTTP backends. An exception in
    ``run_batch`` fails that batch's requests only; requests cancelled while queued are skipped.
    Not covered: fairness between callers of one step, or a cap on the queue's length.

    ``owner`` names the generator in errors; ``thread_name`` prefixes the worker thread's name.
    """

    run_batch: Callable[[list[Request]], list[GenerationResult]]
    owner: str
    thread_name: str
    batch_window_s: float
    max_batch: int | None = None
    queue: list[Request] = field(default_factory=list, init=False)
    closed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.thread_name)
        if inspect.ismethod(self.run_batch):  # the owner's own method: hold it weakly (see _weak_call)
            self.run_batch = _weak_call(weakref.WeakMethod(self.run_batch), self.owner)
        self._drain_task: asyncio.Task[None] | None = None
        self._arrivals = itertools.count()
        self._lock = threading.Lock()  # the queue is read by the worker thread too (take_queued)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        """Queue one request; it runs in the next batch."""
        if self.closed:
            raise RuntimeError(f"{self.owner}.generate called after close()")
        if not prompt_ids:
            raise ValueError("prompt_ids is empty; a prompt needs at least one token")
        loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[GenerationResult] = loop.create_future()
        step = ROLLOUT_STEP.get()
        with self._lock:
            self.queue.append(
                Request(list(prompt_ids), params, fut, math.inf if step is None else step, next(self._arrivals))
            )
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = loop.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self.queue:
            if self.batch_window_s > 0:
                await asyncio.sleep(self.batch_window_s)
            with self._lock:
                n = len(self.queue) if self.max_batch is None else self.max_batch
                if n < len(self.queue):
                    self.queue.sort(key=lambda r: (r.step, r.order))  # the oldest step's requests first
                batch = [r for r in self.queue[:n] if not r.future.done()]
                del self.queue[:n]
            if not batch:
                continue
            try:
                results = await loop.run_in_executor(self.executor, self.run_batch, batch)
            except Exception as exc:
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(exc)
                continue
            for r, res in zip(batch, results, strict=True):  # the batch list grew by what it admitted
                _set_result(r.future, res)

    def take_queued(self, n: int) -> list[Request]:
        """From the worker thread: up to ``n`` queued requests (the oldest step's first), off the queue."""
        with self._lock:
            if self.closed or n <= 0:
                return []
            pending = [r for r in self.queue if not r.future.done()]
            pending.sort(key=lambda r: (r.step, r.order))
            taken, self.queue[:] = pending[:n], pending[n:]
        return taken

    def deliver(self, request: Request, result: GenerationResult) -> None:
        """From the worker thread: hand ``request`` its result now (the batch goes on)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(_set_result, request.future, result)

    def close(self) -> None:
        """Fail queued requests and stop the worker thread."""
        self.closed = True
        with self._lock:
            for r in self.queue:
                if not r.future.done():
                    r.future.set_exception(RuntimeError(f"{self.owner} closed"))
            self.queue.clear()
        self.executor.shutdown(wait=False, cancel_futures=True)
