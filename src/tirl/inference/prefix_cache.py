"""Keys and values of an episode's earlier turns, kept between generation calls of the in-process generator.

An agent's turn ``t + 1`` is prompted with turn ``t``'s prompt, the tokens it sampled and the tool's output.
Without reuse the generator prefills that whole context again every turn — on swe-lite's episodes of 5-10
turns and 1-2k tokens, 74% of the model's time went to such prefills (16 validation episodes of ``tiny-swe``:
18.6 s of prefill against 6.4 s of decoding). :class:`PrefixCache` holds, for each finished generation row,
the keys and values of every position the model has seen (its prompt and its sampled tokens but the last,
which was never fed back), and hands them to the next request whose prompt starts with exactly those ids,
so only the new tokens (the last sampled token and the observation) are prefilled.

What makes an entry usable: its ids are a proper prefix of the new prompt (compared token by token, so a
wrong hit is impossible), and the model's weights are the ones the entry was computed with. Weights are
identified by :func:`weights_fingerprint` — each parameter's identity and its tensor version counter, which
every in-place update bumps (an optimiser step, ``load_state_dict``, a LoRA merge) — so an update without a
``policy_version`` bump (an SFT loop's evaluation, a user's own training step) still empties the cache.

An entry is taken out when it is used (the episode's longer context replaces it) and the least recently
stored entries are dropped past ``max_bytes``. Keys and values stay on the model's device.

Not covered: sharing one prefix between several episodes (a group's common prompt is prefilled once per
episode; a radix tree would share it), keeping an entry for more than one continuation, sliding-window
or linear-attention layers (the in-process generator's cache holds full-attention layers only).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Fingerprint = tuple[tuple[int, int], ...]


def weights_fingerprint(model: Any) -> Fingerprint:
    """Each parameter's identity and version counter: changes whenever any weight is replaced or updated in place."""
    return tuple((id(p), int(p._version)) for p in model.parameters())


@dataclass(slots=True)
class CachedPrefix:
    """The keys and values of the positions ``ids`` (positions ``0 .. len(ids) - 1``), one tensor pair per layer."""

    ids: list[int]
    keys: list[torch.Tensor]  # per layer [H, n, D]
    values: list[torch.Tensor]  # per layer [H, n, D]
    weights: Fingerprint

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


@dataclass
class PrefixCache:
    """Finished rows' keys and values, looked up by the longest exact prefix of a new prompt.

    ``max_bytes`` bounds what is held (0 disables the cache: nothing is stored). The counters: ``hits`` and
    ``misses`` per request, ``evicted`` (entries dropped for room) and ``stale`` (entries dropped because the
    weights changed).
    """

    max_bytes: int
    hits: int = 0
    misses: int = 0
    evicted: int = 0
    stale: int = 0
    _entries: OrderedDict[int, CachedPrefix] = field(default_factory=OrderedDict, init=False, repr=False)
    _bytes: int = field(default=0, init=False, repr=False)
    _next: int = field(default=0, init=False, repr=False)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def _drop(self, key: int) -> CachedPrefix:
        entry = self._entries.pop(key)
        self._bytes -= entry.nbytes
        return entry

    def _drop_stale(self, weights: Fingerprint) -> None:
        for key in [k for k, e in self._entries.items() if e.weights != weights]:
            self._drop(key)
            self.stale += 1

    def take(self, prompt: Sequence[int], weights: Fingerprint) -> CachedPrefix | None:
        """Remove and return the longest entry whose ids are a proper prefix of ``prompt`` (None: a miss).

        A proper prefix leaves at least one token to prefill, whose logits start the new turn.
        """
        self._drop_stale(weights)
        best: tuple[int, int] | None = None  # (length, key)
        n = len(prompt)
        for key, entry in self._entries.items():
            m = len(entry.ids)
            if m >= n or (best is not None and m <= best[0]):
                continue
            if prompt[m - 1] != entry.ids[-1] or prompt[0] != entry.ids[0]:
                continue  # cheap checks before the full comparison
            if list(prompt[:m]) == entry.ids:
                best = (m, key)
        if best is None:
            self.misses += 1
            return None
        self.hits += 1
        return self._drop(best[1])

    def put(self, entry: CachedPrefix) -> None:
        """Hold ``entry``, dropping the least recently stored entries past ``max_bytes`` (too big: not held)."""
        size = entry.nbytes
        if not entry.ids or size > self.max_bytes:
            return
        self._drop_stale(entry.weights)
        while self._entries and self._bytes + size > self.max_bytes:
            self._drop(next(iter(self._entries)))
            self.evicted += 1
        self._entries[self._next] = entry
        self._next += 1
        self._bytes += size

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
        self._bytes = 0


__all__ = ["CachedPrefix", "Fingerprint", "PrefixCache", "weights_fingerprint"]
