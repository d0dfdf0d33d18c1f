"""Drop void trajectories from a verl ``DataProto`` batch before ``compute_advantage`` (tirl's ``drop`` mode).

Place (verl 0.9, ``verl/trainer/ppo/ray_trainer.py``, ``RayPPOTrainer.fit``)::

    batch = batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
    batch = batch.union(gen_batch_output)
    if "response_mask" not in batch.batch.keys():
        batch.batch["response_mask"] = compute_response_mask(batch)
    batch, void_stats = drop_void_trajectories(batch, self.tokenizer, divisible_by=<DP world size>)  # <- here
    metrics.update(void_stats.metrics())
    if batch is None:  # nothing left to train on: skip the step
        continue
    if self.config.trainer.balance_batch:
        self._balance_batch(batch, metrics=metrics)
    ...                            # old/ref log-probs, values, rewards
    batch = compute_advantage(batch, ...)

There, a void trajectory leaves the batch before anything is computed from
it: the old-policy and reference log-probs, the GRPO group mean/std (verl
groups by ``non_tensor_batch["uid"]``, and a dropped row is in no group), the
importance ratios and the KL. Dropping after the rewards but before
``compute_advantage`` is also correct for the statistics; it only wastes the
log-prob passes.

How a trajectory is judged: verl keeps a multi-turn episode as one response
whose ``response_mask`` is 1 on the model's tokens and 0 on tool/environment
tokens; each maximal run of 1s is one assistant turn. Each turn is decoded
(``skip_special_tokens=True``) and judged by tirl's rule
(:func:`tirl.parsing.judge_message`, with the run's :class:`ParseRules`); a
trajectory with a void turn is void. Without ``response_mask`` the response's
``attention_mask`` is used (one turn).

Groups (``non_tensor_batch["uid"]``, one per prompt): a group left with fewer than ``min_group_size``
(default 2) valid rows leaves whole, counted in ``thin``. verl's GRPO gives a lone row mean 0 and std 1, so
its advantage would be its raw score — a signal no group baseline backs. ``min_group_size=1`` keeps such
rows (for an estimator with a batch baseline). Without ``uid`` no group rule applies.

``divisible_by``: verl splits the batch evenly across data-parallel ranks (``DataProto.chunk``), so the kept
size must be a multiple of the world size (and of the mini-batch size). Rows are taken off, counted in
``trimmed``, one at a time from the group with the most rows above ``min_group_size`` (its last row); only
when no group has a spare row does a whole group go (the smallest, the last of equals). So trimming never
leaves a group below ``min_group_size``.

Nothing left (every row void, or fewer usable rows than ``divisible_by``): the function returns ``None`` for
the batch, never an empty ``DataProto`` (verl fails on one far from the cause). Skip the step and
generate again, as tirl's trainer resamples; ``stats.kept`` is 0.

Attribution: verl writes no per-row keys that say where the spikes sit (``actor/pg_clipfrac``,
``actor/ppo_kl`` and ``actor/grad_norm`` are batch totals), so :meth:`VoidDropStats.metrics` adds tirl's
generator-side ``void/*`` keys (:mod:`tirl.trainer.attribution`), computed on the batch *before* the void rows
leave: ``void/share_trajectories``, ``void/share_tokens`` (of the ``response_mask`` tokens) and, when the
batch holds verl's ``rollout_log_probs`` (``actor_rollout_ref.rollout.calculate_log_probs=True``),
``void/share_lowprob_tokens``, ``void/min_logprob_void`` and ``void/min_logprob_valid``. The ratio and
gradient shares need the actor's update and are not logged from here; ``tirl diagnose training`` then reads
the low-prob share as the spike share. A share with no such token in the batch is left out (verl's loggers
take numbers only).

Not covered: ``mask`` mode (zeroing ``response_mask`` of void rows keeps them
in the group statistics, which is what this function exists to avoid),
tool calls kept only as structured data (the decoded text is judged), and
verl's ``DataProtoFuture``. Works on any object shaped like verl's
``DataProto`` (``batch`` mapping of tensors, ``non_tensor_batch`` of numpy
arrays, ``select_idxs``); verl itself is not imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from tirl.filters.void_turn import FilterStats
from tirl.parsing import DEFAULT_RULES, ParseRules, judge_message
from tirl.trainer.attribution import AttributionStats
from tirl.types import Message, Role

__all__ = [
    "VerlBatch", "VoidDropStats", "assistant_turns", "drop_void_trajectories", "generator_attribution", "void_rows",
]  # fmt: skip


class VerlBatch(Protocol):
    """What this module uses of verl's ``DataProto``."""

    batch: Any  # TensorDict: responses [B, R], attention_mask [B, P+R], response_mask [B, R] (optional)
    non_tensor_batch: dict[str, np.ndarray]

    def select_idxs(self, idxs: Any) -> Any:
        """A new batch holding the rows ``idxs``."""
        ...


@dataclass(slots=True)
class VoidDropStats(FilterStats):
    """What :func:`drop_void_trajectories` did: tirl's filter counts plus the rows it took off the valid ones.

    ``trajectories``, ``valid`` and ``void`` are those of :class:`~tirl.filters.void_turn.FilterStats`;
    ``empty_groups`` and ``min_valid_per_group`` count the rows that stay (``failed`` is always 0 and
    ``void_ids`` empty: a verl row has no trajectory id, ``void_rows`` lists the void rows' indices).
    ``thin``: valid rows that left with a group below ``min_group_size``; ``trimmed``: valid rows taken off
    for ``divisible_by``. ``metrics()`` adds ``filter/thin_group_trajectories`` and
    ``filter/trimmed_trajectories`` to its ``filter/*`` metrics.
    """

    trimmed: int = 0
    thin: int = 0
    void_rows: list[int] = field(default_factory=list)
    attribution: dict[str, float | None] = field(default_factory=dict)  # generator-side void/* (module doc)

    @property
    def kept(self) -> int:
        """Rows left in the batch: the valid ones less the thin groups and the trimmed rows."""
        return self.valid - self.thin - self.trimmed

    def metrics(self) -> dict[str, float]:
        """``filter/*`` metrics for verl's logger (tirl's names, as in its own training log)."""
        known = {k: v for k, v in self.attribution.items() if v is not None}  # a null share: absent for verl's logger
        return {
            **FilterStats.metrics(self),
            "filter/thin_group_trajectories": float(self.thin),
            "filter/trimmed_trajectories": float(self.trimmed),
            **known,
        }


GENERATOR_KEYS = ("void/share_trajectories", "void/share_tokens")
LOGPROB_KEYS = ("void/share_lowprob_tokens", "void/min_logprob_void", "void/min_logprob_valid")


def generator_attribution(batch: VerlBatch, void: list[bool]) -> dict[str, float | None]:
    """The generator-side ``void/*`` metrics of ``batch`` (all rows, before any leaves); see the module doc."""
    mask = _response_mask(batch).float()  # [B, R]
    has_lp = "rollout_log_probs" in batch.batch.keys()  # noqa: SIM118 (TensorDict refuses `in` without .keys())
    gen = batch.batch["rollout_log_probs"].float() if has_lp else torch.zeros_like(mask)
    stats = AttributionStats()
    zeros = torch.zeros_like(mask)
    stats.add(torch.tensor(void, dtype=torch.bool), mask, gen, zeros, zeros, None)
    metrics = stats.metrics()
    return {k: metrics.get(k) for k in (*GENERATOR_KEYS, *(LOGPROB_KEYS if has_lp else ()))}


def assistant_turns(token_ids: list[int], mask: list[int]) -> list[list[int]]:
    """The maximal runs of ``mask == 1`` in ``token_ids``: one list of ids per assistant turn."""
    turns: list[list[int]] = []
    current: list[int] | None = None
    for tok, m in zip(token_ids, mask, strict=True):
        if m:
            if current is None:
                current = []
                turns.append(current)
            current.append(int(tok))
        else:
            current = None
    return turns


def _response_mask(batch: VerlBatch) -> torch.Tensor:
    responses = batch.batch["responses"]  # [B, R]
    if "response_mask" in batch.batch.keys():  # noqa: SIM118 (TensorDict refuses `in` without .keys())
        return batch.batch["response_mask"]
    return batch.batch["attention_mask"][:, -responses.shape[1] :]


def void_rows(batch: VerlBatch, tokenizer: Any, rules: ParseRules = DEFAULT_RULES) -> list[bool]:
    """Whether each row's trajectory has a void assistant turn (a row with no model token is void)."""
    responses = batch.batch["responses"].tolist()
    masks = _response_mask(batch).tolist()
    out = []
    for ids, mask in zip(responses, masks, strict=True):
        turns = assistant_turns(ids, mask) or [[]]
        texts = [tokenizer.decode(t, skip_special_tokens=True) for t in turns]
        out.append(any(judge_message(Message(role=Role.ASSISTANT, content=t), rules).is_void for t in texts))
    return out


def _trim(members: dict[str, list[int]], divisible_by: int, min_group_size: int) -> int:
    """Take rows off ``members`` (group -> its kept rows, in place) until the total divides; rows taken."""
    total = sum(map(len, members.values()))
    taken = 0
    while total % divisible_by:
        spare = [g for g, rows in members.items() if len(rows) > min_group_size]
        if spare:
            group = max(reversed(spare), key=lambda g: len(members[g]))  # the most rows; the last of equals
            members[group].pop()
            took = 1
        else:
            group = min(reversed(list(members)), key=lambda g: len(members[g]))
            took = len(members.pop(group))
        total -= took
        taken += took
    return taken


def drop_void_trajectories(
    batch: VerlBatch,
    tokenizer: Any,
    rules: ParseRules = DEFAULT_RULES,
    *,
    divisible_by: int = 1,
    min_group_size: int = 2,
) -> tuple[Any | None, VoidDropStats]:
    """The batch without its void trajectories, thin groups and trimmed rows (``None`` if nothing is left).

    See the module doc for the rules; ``stats`` says what left and why.
    """
    if divisible_by < 1:
        raise ValueError(f"divisible_by must be >= 1, got {divisible_by}")
    if min_group_size < 1:
        raise ValueError(f"min_group_size must be >= 1, got {min_group_size}")
    void = void_rows(batch, tokenizer, rules)
    n = len(void)
    uids = batch.non_tensor_batch.get("uid")
    grouped = uids is not None
    groups = [str(u) for u in uids] if uids is not None else [str(i) for i in range(n)]
    members: dict[str, list[int]] = {g: [] for g in groups}
    for i in range(n):
        if not void[i]:
            members[groups[i]].append(i)
    floor = min_group_size if grouped else 1
    thin = [g for g, rows in members.items() if 0 < len(rows) < floor]
    thin_rows = sum(len(members.pop(g)) for g in thin)
    members = {g: rows for g, rows in members.items() if rows}
    trimmed = _trim(members, divisible_by, floor)
    counts = [len(members.get(g, [])) for g in dict.fromkeys(groups)]
    stats = VoidDropStats(
        trajectories=n,
        valid=n - sum(void),
        void=sum(void),
        trimmed=trimmed,
        thin=thin_rows,
        empty_groups=sum(1 for c in counts if c == 0),
        min_valid_per_group=min(counts) if counts else 0,
        void_rows=[i for i in range(n) if void[i]],
        attribution=generator_attribution(batch, void),
    )
    kept = sorted(i for rows in members.values() for i in rows)
    if not kept:
        return None, stats
    return batch.select_idxs(np.array(kept, dtype=np.int64)), stats
