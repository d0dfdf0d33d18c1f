"""The generator contract: token ids in; sampled ids, their log-probs and a finish reason out.

Backends (``hf`` in-process transformers, ``openai`` HTTP, ``vllm``) implement
:class:`Generator`. Calls are async and may arrive concurrently from many
episodes; a backend batches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

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
