"""The generator contract: token ids in; sampled ids, their log-probs and a finish reason out.

Backends (``hf`` in-process transformers, ``openai`` HTTP, ``vllm``) implement
:class:`Generator`. Calls are async and may arrive concurrently from many
episodes; a backend batches them.

Optional capabilities are declared as protocols, checked with ``isinstance``
by the wiring (:mod:`tirl.trainer.wiring`), never probed attribute by attribute:

==================  =====================================================  =====================
protocol            what the trainer does with it                          backends
==================  =====================================================  =====================
:class:`Versioned`  sets ``policy_version`` after each update              hf, openai, vllm
:class:`WeightSyncing`  calls ``sync_weights(model, tokenizer, version)``  openai, vllm
:class:`BusyMetered`    reads ``busy_seconds()`` into the trace's ``gpu_util``  hf
:class:`Startable`  awaits ``start()`` before the run (checks URL, key, model)  openai
==================  =====================================================  =====================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

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
