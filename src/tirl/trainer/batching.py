"""Turn filtered trajectories into padded tensors, mini-batches and memory-bounded micro-batches.

Tensors are aligned on *target* positions (see :mod:`tirl.algorithms.losses`):
for a trajectory with tokens ``x_0 .. x_{L-1}``, position ``t`` holds the
target ``x_{t+1}``, its loss-mask bit and the generator's log-prob for it.
Sequences are right-padded (pad id, mask 0), which leaves the positions of
real tokens unchanged for a causal LM.

A trajectory whose ``loss_weight`` is 0 (the filter's ``mask`` mode)
keeps its place in the batch (and so in its group's advantage statistics)
but gets an all-zero loss mask.

Not covered: sequence packing across trajectories (one row per trajectory).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

from tirl.types import Trajectory


@dataclass(slots=True)
class TrainBatch:
    """A padded batch of trajectories (one row each)."""

    input_ids: Tensor  # [B, L] long
    attention_mask: Tensor  # [B, L] long
    targets: Tensor  # [B, L-1] long: input_ids[:, 1:]
    mask: Tensor  # [B, L-1] float: 1 where the target token was sampled by the policy
    gen_logprobs: Tensor  # [B, L-1] float: the generator's log-prob of each target
    advantages: Tensor  # [B] float
    rows: list[int]  # index of each row in the step's trajectory list

    @property
    def size(self) -> int:
        """Number of rows."""
        return len(self.rows)

    @property
    def tokens(self) -> int:
        """Number of loss tokens."""
        return int(self.mask.sum().item())


def collate(
    trajs: list[Trajectory], advantages: Tensor, rows: list[int], pad_id: int, max_len: int | None = None
) -> TrainBatch:
    """Pad ``trajs[i]`` for ``i`` in ``rows`` into one :class:`TrainBatch`.

    advantages: Tensor  # [N] one per trajectory of ``trajs``
    max_len: optional cap; longer trajectories are cut at the right (their tail gets no loss)
    """
    picked = [trajs[i] for i in rows]
    for t in picked:
        t.check_token_view()
    lengths = [len(t.token_ids) if max_len is None else min(len(t.token_ids), max_len) for t in picked]
    width = max(max(lengths, default=2), 2)
    b = len(picked)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.float32)
    gen = torch.zeros((b, width), dtype=torch.float32)
    for r, (t, n) in enumerate(zip(picked, lengths, strict=True)):
        ids[r, :n] = torch.tensor(t.token_ids[:n], dtype=torch.long)
        attn[r, :n] = 1
        if t.loss_weight > 0:
            mask[r, :n] = torch.tensor(t.loss_mask[:n], dtype=torch.float32)
        gen[r, :n] = torch.tensor(t.logprobs[:n], dtype=torch.float32)
    return TrainBatch(
        input_ids=ids,
        attention_mask=attn,
        targets=ids[:, 1:],
        mask=mask[:, 1:],
        gen_logprobs=gen[:, 1:],
        advantages=advantages[rows].float(),
        rows=list(rows),
    )


def split_minibatches(n: int, minibatches: int, rng: random.Random) -> list[list[int]]:
    """Shuffle ``range(n)`` and cut it into ``min(minibatches, n)`` nearly equal parts."""
    order = list(range(n))
    rng.shuffle(order)
    k = max(1, min(minibatches, n))
    return [sorted(order[i::k]) for i in range(k)]


def split_microbatches(rows: list[int], lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Cut one mini-batch into micro-batches whose padded size ``rows * max_len`` stays under ``max_tokens``.

    Rows are sorted by length first so that each micro-batch pads little; a
    single row longer than ``max_tokens`` gets a micro-batch of its own.
    """
    ordered = sorted(rows, key=lambda i: lengths[i])
    out: list[list[int]] = []
    cur: list[int] = []
    for i in ordered:
        if cur and (len(cur) + 1) * lengths[i] > max_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out
