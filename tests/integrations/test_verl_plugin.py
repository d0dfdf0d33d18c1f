"""drop_void_trajectories on a verl DataProto batch, then verl's own GRPO advantage against a plain reference loop.

In the main venv verl is not installed (it pins transformers<5.11), so the batch is a minimal object with
DataProto's shape (``batch`` of tensors, ``non_tensor_batch`` of numpy arrays, ``select_idxs`` that indexes
both, as verl 0.9.1's ``verl/protocol.py`` does). ``make test-verl`` runs this file in its own venv with the
real verl: there the batch is a real ``verl.DataProto`` and the advantages come from verl's
``compute_grpo_outcome_advantage``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

import tirl
from tirl.integrations.verl import assistant_turns, drop_void_trajectories, void_rows

try:
    from verl import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
except ImportError:  # the main venv: DataProto's shape only
    DataProto = None
    compute_grpo_outcome_advantage = None

FENCE = "```"
CODE, ANSWER = f"{FENCE}python\nprint(6*7)\n{FENCE}", "so \\boxed{42}"
#: (assistant turns, reward) per trajectory; two groups of three (uid a, b)
ROWS = [
    ([CODE, ANSWER], 1.0),
    ([CODE, "let me think"], 0.0),  # void second turn
    ([ANSWER], 0.5),
    (["hmm"], 0.0),  # void
    ([CODE, "", ANSWER], 0.0),  # an empty middle turn decodes to "" -> void
    ([CODE, CODE, ANSWER], 1.0),
]
UIDS = ["a", "a", "a", "b", "b", "b"]


class ShapedDataProto:
    """DataProto's shape: what drop_void_trajectories uses, indexed like verl's ``select_idxs``."""

    def __init__(self, batch: dict[str, torch.Tensor], non_tensor_batch: dict[str, np.ndarray]) -> None:
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch

    def select_idxs(self, idxs: np.ndarray) -> ShapedDataProto:
        rows = torch.from_numpy(idxs)
        return ShapedDataProto({k: v[rows] for k, v in self.batch.items()},
                               {k: v[idxs] for k, v in self.non_tensor_batch.items()})  # fmt: skip


def _tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(Path(tirl.__file__).parent / "assets" / "tiny-tir")  # light imports: verl venv


def _batch(tok: Any) -> Any:
    obs = tok.encode("\noutput: 42\n", add_special_tokens=False)
    responses, masks = [], []
    for turns, _ in ROWS:
        ids: list[int] = []
        mask: list[int] = []
        for k, text in enumerate(turns):
            if k:  # tool output between turns: mask 0
                ids += obs
                mask += [0] * len(obs)
            turn = tok.encode(text, add_special_tokens=False) or [tok.eos_token_id]  # "" -> a lone special token
            ids += turn
            mask += [1] * len(turn)
        responses.append(ids)
        masks.append(mask)
    width = max(map(len, responses)) + 3  # right padding, mask 0
    pad = tok.pad_token_id or 0
    resp = torch.tensor([r + [pad] * (width - len(r)) for r in responses])
    rmask = torch.tensor([m + [0] * (width - len(m)) for m in masks])
    prompt = torch.ones(len(ROWS), 4, dtype=torch.long)
    scores = torch.zeros(len(ROWS), width)
    for i, (_, reward) in enumerate(ROWS):
        scores[i, len(responses[i]) - 1] = reward  # verl puts the outcome reward on the last response token
    batch = {"prompts": prompt, "responses": resp, "response_mask": rmask, "token_level_rewards": scores,
             "attention_mask": torch.cat([prompt, (rmask > 0) | (resp != pad)], dim=1).long()}  # fmt: skip
    non_tensor = {"uid": np.array(UIDS, dtype=object), "row": np.arange(len(ROWS))}
    if DataProto is not None:
        return DataProto.from_dict(tensors=batch, non_tensors=non_tensor)
    return ShapedDataProto(batch, non_tensor)


def test_assistant_turns_are_the_runs_of_the_response_mask() -> None:
    assert assistant_turns([1, 2, 3, 4, 5, 6, 0], [1, 1, 0, 0, 1, 0, 0]) == [[1, 2], [5]]
    assert assistant_turns([1, 2], [0, 0]) == []


def test_void_rows_judge_each_assistant_turn() -> None:
    tok = _tokenizer()
    assert void_rows(_batch(tok), tok) == [False, True, False, True, True, False]


def _reference_grpo(rewards: list[float], uids: list[str], eps: float = 1e-6) -> list[float]:
    """A plain loop of verl's GRPO outcome advantage (unbiased std; a single member: mean 0, std 1)."""
    out = []
    for r, u in zip(rewards, uids, strict=True):
        group = [x for x, v in zip(rewards, uids, strict=True) if v == u]
        if len(group) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(group) / len(group)
            std = math.sqrt(sum((x - mean) ** 2 for x in group) / (len(group) - 1))
        out.append((r - mean) / (std + eps))
    return out


def test_void_trajectories_leave_the_batch_before_the_advantage() -> None:
    tok = _tokenizer()
    kept, stats = drop_void_trajectories(_batch(tok), tok)
    rows = kept.non_tensor_batch["row"].tolist()
    assert rows == [0, 2, 5] and list(kept.non_tensor_batch["uid"]) == ["a", "a", "b"]
    assert kept.batch["responses"].shape[0] == 3
    assert (stats.trajectories, stats.void, stats.kept, stats.trimmed) == (6, 3, 3, 0)
    assert stats.void_rows == [1, 3, 4] and stats.min_valid_per_group == 1 and stats.empty_groups == 0
    assert stats.metrics()["filter/void_ratio"] == 0.5
    rewards = [ROWS[i][1] for i in rows]
    want = _reference_grpo(rewards, ["a", "a", "b"])  # group a: {1.0, 0.5}; group b: {1.0} alone
    if compute_grpo_outcome_advantage is not None:  # real verl: its own GRPO on the filtered batch
        adv, _ = compute_grpo_outcome_advantage(
            kept.batch["token_level_rewards"], kept.batch["response_mask"], kept.non_tensor_batch["uid"]
        )
        got = [float(adv[i][kept.batch["response_mask"][i].bool()][0]) for i in range(3)]
        assert got == pytest.approx(want, abs=1e-5)
    assert want[0] > 0 > want[1]  # without the void rows, 0.5 is below its group's mean


def test_divisible_by_trims_the_tail_and_counts_it() -> None:
    tok = _tokenizer()
    kept, stats = drop_void_trajectories(_batch(tok), tok, divisible_by=2)
    assert kept.non_tensor_batch["row"].tolist() == [0, 2] and stats.trimmed == 1
    assert stats.empty_groups == 1 and stats.min_valid_per_group == 0
    metrics = stats.metrics()  # tirl's own filter/* names (FilterStats), plus the trimmed tail
    assert metrics["filter/valid_trajectories"] == 3.0 and metrics["filter/trimmed_trajectories"] == 1.0
    assert stats.kept == 2 and metrics["filter/failed_trajectories"] == 0.0
    with pytest.raises(ValueError, match="divisible_by"):
        drop_void_trajectories(_batch(tok), tok, divisible_by=0)


def test_the_patch_logs_the_generator_side_attribution_before_the_rows_leave() -> None:
    """verl has no per-row spike keys; the patch logs tirl's void/* generator-side shares, by a plain loop."""
    tok = _tokenizer()
    batch = _batch(tok)
    stats = drop_void_trajectories(batch, tok)[1].metrics()
    mask = batch.batch["response_mask"].tolist()
    void = [False, True, False, True, True, False]
    tokens = [sum(m) for m in mask]
    assert stats["void/share_trajectories"] == 0.5
    assert stats["void/share_tokens"] == pytest.approx(
        sum(t for t, v in zip(tokens, void, strict=True) if v) / sum(tokens)
    )
    assert "void/share_lowprob_tokens" not in stats  # no rollout_log_probs: no generator log-prob keys
    lp = torch.full(batch.batch["responses"].shape, -0.5)
    lp[1, 0], lp[0, 0], lp[3, 0] = -7.0, -6.0, -9.0  # rows 1 and 3 void, row 0 valid; all on sampled tokens
    lp[2, -1] = -20.0  # right padding (mask 0): never counted
    batch.batch["rollout_log_probs"] = lp
    stats = drop_void_trajectories(batch, tok)[1].metrics()
    assert stats["void/share_lowprob_tokens"] == pytest.approx(2 / 3)
    assert stats["void/min_logprob_void"] == -9.0 and stats["void/min_logprob_valid"] == -6.0
    assert "void/share_ratio_outliers" not in stats and "void/share_grad_norm" not in stats
