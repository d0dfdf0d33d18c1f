"""The in-process generator's own copy of the policy weights: asynchronous RL and ``generation.dtype``.

With ``rollout.max_staleness = 0`` and ``generation.dtype = float32`` the in-process ``hf`` generator
shares the trainer's module (generation and update alternate). With K > 0 they overlap, so the generator
samples from a *snapshot*; with ``generation.dtype`` ``bfloat16`` or ``float16`` it samples from a
low-precision copy while the trainer stays float32 — the vLLM-vs-FSDP log-prob mismatch, on the CPU, with
the generator's log-probs (TIS, ``train/gen_logprob_gap_max``) taken from the copy. :func:`generator_copy`
makes the copy (a LoRA policy is merged into plain weights, then cast to ``dtype``), and
:func:`sync_snapshot` copies the trainer's new weights into it (cast to the copy's dtype by
``load_state_dict``) and sets the generator's policy version in one step under the generator's
``model_lock``, so a generation batch sees either the old weights and version or the new ones, never a mix.
The trainer calls it after every optimiser step and once at resume (``RunParts.set_policy_version``).

Not covered: sharing memory between the two copies (the snapshot doubles the
model's weight memory, not its optimiser state), and GPU-to-GPU transfer
without a host round trip (``load_state_dict`` copies tensor by tensor on
the model's device).
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import torch

from tirl.models.memory import merged_copy


def generator_copy(model: Any, dtype: torch.dtype | None = None) -> Any:
    """A frozen, eval-mode copy of ``model`` (adapter merged in; cast to ``dtype`` when given) to sample from."""
    snap = merged_copy(model)
    if snap is model:
        snap = copy.deepcopy(model)
    if dtype is not None:
        snap.to(dtype)
    snap.eval()
    for p in snap.parameters():
        p.requires_grad_(False)
    return snap


def sync_snapshot(generator: Any, model: Any, version: int) -> None:
    """Copy ``model``'s weights into ``generator.model`` and set its ``policy_version``, under its ``model_lock``."""
    state = merged_copy(model).state_dict()
    lock: threading.Lock = generator.model_lock
    with lock, torch.no_grad():
        generator.model.load_state_dict(state)
        generator.policy_version = version
