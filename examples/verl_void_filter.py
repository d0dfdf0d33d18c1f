"""The verl patch: void trajectories leave a ``DataProto`` before log-probs and advantages.

In verl 0.9's ``verl/trainer/ppo/ray_trainer.py`` (``RayPPOTrainer.fit``), right after the rollout's output
joins the batch, call :func:`void_filter_step`::

    batch = batch.union(gen_batch_output)
    if "response_mask" not in batch.batch.keys():
        batch.batch["response_mask"] = compute_response_mask(batch)
    batch = void_filter_step(batch, self.tokenizer, world_size, metrics)   # tirl
    if batch is None:                                                      # tirl: nothing to train on
        continue                                                           # next batch (resample)
    if self.config.trainer.balance_batch:
        self._balance_batch(batch, metrics=metrics)
    ...                                                                    # old log-probs, ref, values
    batch = compute_advantage(batch, ...)

The removed trajectories are in none of the group statistics, old log-probs, ratios or KL. A group left with
one valid trajectory leaves too (verl would give it its raw score as advantage: mean 0, std 1), and
``divisible_by`` keeps the batch splittable over the data-parallel ranks without leaving a group alone.
``None`` means nothing is left (every trajectory void, or fewer than the world size): skip the step.
``make test`` runs this on an object with ``DataProto``'s shape (verl pins an older transformers than tirl's
venv); ``make test-verl`` on a real one.
Not covered: resampling within the step is verl's (``algorithm.filter_groups`` in DAPO's recipe), not
tirl's; this example skips the step instead.
"""

from __future__ import annotations

from typing import Any

from tirl.integrations.verl import drop_void_trajectories
from tirl.parsing import ACTION_RULES


def void_filter_step(batch: Any, tokenizer: Any, world_size: int, metrics: dict[str, Any]) -> Any | None:
    """The lines to add to ``RayPPOTrainer.fit``: drop void trajectories, log ``filter/*`` metrics.

    ``None``: nothing left to train on this step.
    """
    batch, stats = drop_void_trajectories(batch, tokenizer, rules=ACTION_RULES["tir"], divisible_by=world_size)
    metrics.update(stats.metrics())
    return batch
