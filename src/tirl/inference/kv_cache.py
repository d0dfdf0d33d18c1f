"""The in-process generator's KV cache: buffers allocated once per batch, seeded from the prefix cache, merged.

:class:`PreallocLayer` holds one layer's keys and values for a whole batch in a buffer of ``capacity``
positions (doubled when outgrown) and writes each new token into its slot, where transformers'
``DynamicLayer`` concatenates (a copy of the whole cache per token and layer); the values are the same
(tested). :func:`seeded_layers` builds a batch's layers from prefix-cache hits (each row's cached positions
right-aligned, zeros before them); :func:`merged_layers` joins a running batch and newly admitted rows into
one batch (both left-padded to the longer of the two).

Padding positions hold zeros or a pad token's keys: masked out by the attention mask, but finite, so a
weight of 0 on them stays 0. Not covered: sliding-window or linear-attention layers (full attention only).
"""

from __future__ import annotations

import functools

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from tirl.inference.prefix_cache import CachedPrefix


class PreallocLayer(DynamicLayer):
    """A :class:`DynamicLayer` whose keys and values live in buffers allocated once for the whole batch.

    The stock layer concatenates every new token onto the cache (a copy of the whole cache per token and
    layer); this one writes the new token into its slot and returns a view of the filled part, which
    holds the same values. A batch that outgrows ``capacity`` gets a buffer twice as large.
    """

    is_initialized: bool  # the stock layer's flag (set by its __init__), which this class sets and reads

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self._k = torch.empty(0, 0, 0, 0)
        self._v = torch.empty(0, 0, 0, 0)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``key_states``/``value_states`` [B, H, n, D] after the cached positions; return the filled views."""
        end = self.length + key_states.shape[-2]
        if not self.is_initialized or end > self._k.shape[-2]:
            self._grow(key_states, value_states, max(end, self.capacity, 2 * self._k.shape[-2]))
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, size: int) -> None:
        b, h, _, dk = key_states.shape
        k = key_states.new_empty((b, h, size, dk))
        v = value_states.new_empty((b, h, size, value_states.shape[-1]))
        if self.is_initialized:
            k[:, :, : self.length] = self._k[:, :, : self.length]
            v[:, :, : self.length] = self._v[:, :, : self.length]
        self._k, self._v = k, v
        self.device = key_states.device
        self.is_initialized = True

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (the buffers shrink to them); only the filled positions are copied.

        Copying the whole buffer (``index_select`` on it) moved ``capacity / length`` times the bytes:
        a batch's buffers hold its prompt width plus ``tirl.inference.hf.CACHE_CHUNK`` positions, most of them not yet
        written when rows finish.
        """
        if self.is_initialized:
            n = self.length
            k = self._k.new_empty((indices.numel(), *self._k.shape[1:]))
            v = self._v.new_empty((indices.numel(), *self._v.shape[1:]))
            torch.index_select(self._k[:, :, :n], 0, indices, out=k[:, :, :n])
            torch.index_select(self._v[:, :, :n], 0, indices, out=v[:, :, :n])
            self._k, self._v = k, v
            self.keys, self.values = k[:, :, :n], v[:, :, :n]


def seeded_layers(
    hits: list[CachedPrefix | None], cached: list[int], c_width: int, cache_capacity: int
) -> list[DynamicLayer]:
    """One :class:`PreallocLayer` per model layer: each row's first ``cached[j]`` hit positions, ending at ``c_width``.

    The padding before them holds zeros: masked out by the attention mask, but finite, so a weight of 0 on
    them stays 0.
    """
    ref = next(h for h in hits if h is not None)
    layers: list[DynamicLayer] = []
    for layer_index, (k0, v0) in enumerate(zip(ref.keys, ref.values, strict=True)):
        k = k0.new_zeros((len(hits), k0.shape[0], c_width, k0.shape[-1]))  # [b_live, H, C, D]
        v = v0.new_zeros((len(hits), v0.shape[0], c_width, v0.shape[-1]))
        for j, (hit, c) in enumerate(zip(hits, cached, strict=True)):
            if hit is not None:
                k[j, :, c_width - c :] = hit.keys[layer_index][:, :c]
                v[j, :, c_width - c :] = hit.values[layer_index][:, :c]
        layer = PreallocLayer(cache_capacity)
        layer.update(k, v)
        layers.append(layer)
    return layers


class PreallocCache(DynamicCache):
    """A :class:`DynamicCache` whose layers are :class:`PreallocLayer` of ``capacity`` positions."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.layer_class_to_replicate = functools.partial(PreallocLayer, capacity)  # type: ignore[assignment]


def merged_layers(
    first: PreallocCache, first_len: int, second: PreallocCache, second_len: int, length: int, capacity: int
) -> list[DynamicLayer]:
    """One layer list holding ``first``'s rows then ``second``'s, each left-padded with zeros to ``length``."""
    layers: list[DynamicLayer] = []
    for a, b in zip(first.layers, second.layers, strict=True):
        ka, kb = a.keys[:, :, :first_len], b.keys[:, :, :second_len]  # [b1, H, n1, D], [b2, H, n2, D]
        va, vb = a.values[:, :, :first_len], b.values[:, :, :second_len]
        k = ka.new_zeros((ka.shape[0] + kb.shape[0], ka.shape[1], length, ka.shape[-1]))
        v = va.new_zeros((va.shape[0] + vb.shape[0], va.shape[1], length, va.shape[-1]))
        b1 = ka.shape[0]
        k[:b1, :, length - first_len :] = ka
        k[b1:, :, length - second_len :] = kb
        v[:b1, :, length - first_len :] = va
        v[b1:, :, length - second_len :] = vb
        layer = PreallocLayer(capacity)
        layer.update(k, v)
        layers.append(layer)
    return layers


__all__ = ["PreallocCache", "PreallocLayer", "merged_layers", "seeded_layers"]
