"""The one thread on which ``tirl serve`` tokenizes requests, so that the event loop keeps answering.

Encoding text prompts and rendering chat messages ran on the event loop: 256 text prompts of 13,000
characters (3.3 MB, each under the character bound of the tiny model) held it for 1.7 s before the 400, and
with a real model's long tokens the character bound admits a whole 8 MB body (~10 s); every other client,
``/health`` included, waited (red team, session 45). Here that work runs on one dedicated thread, and the
fast tokenizer's encode releases the GIL. One thread, never a pool: a Hugging Face fast tokenizer is a Rust
object behind a borrow check, and an encode first sets options on it (``split_special_tokens``, used by the
chat formats, is such a setting), so two encodes at once may fail with ``Already borrowed``; one thread keeps
every encode in order, as the single event-loop thread did. Decoding (the sampler's stop-string checks, the
response text) only reads the tokenizer and stays where it was.

Not covered: fairness between clients: requests are tokenized one after another in arrival order, so a client
that sends many long prompts delays other clients' tokenizing (never ``/health`` or finished answers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class TokenizerThread:
    """Runs tokenizer work on one dedicated worker thread, awaited from the event loop."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tirl-tokenize")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the tokenizer thread; its exception (an ``APIError`` too) is raised here."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        """Stop the thread (work not yet started is dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
