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


def _batch(tok: Any, rows: list[tuple[list[str], float]] = ROWS, uids: list[str] | None = UIDS) -> Any:
    """``rows`` as a DataProto (a real one where verl is installed); ``uids=None`` leaves out the ``uid`` key."""
    obs = tok.encode("\noutput: 42\n", add_special_tokens=False)
    responses, masks = [], []
    for turns, _ in rows:
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
    prompt = torch.ones(len(rows), 4, dtype=torch.long)
    scores = torch.zeros(len(rows), width)
    for i, (_, reward) in enumerate(rows):
        scores[i, len(responses[i]) - 1] = reward  # verl puts the outcome reward on the last response token
    batch = {"prompts": prompt, "responses": resp, "response_mask": rmask, "token_level_rewards": scores,
             "attention_mask": torch.cat([prompt, (rmask > 0) | (resp != pad)], dim=1).long()}  # fmt: skip
    non_tensor = {"row": np.arange(len(rows))}
    if uids is not None:
        non_tensor["uid"] = np.array(uids, dtype=object)
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


def _advantages(kept: Any) -> list[float]:
    """verl's own GRPO advantage of each kept row (real verl only)."""
    adv, _ = compute_grpo_outcome_advantage(
        kept.batch["token_level_rewards"], kept.batch["response_mask"], kept.non_tensor_batch["uid"]
    )
    return [float(adv[i][kept.batch["response_mask"][i].bool()][0]) for i in range(len(adv))]


def test_void_trajectories_leave_the_batch_before_the_advantage() -> None:
    tok = _tokenizer()
    kept, stats = drop_void_trajectories(_batch(tok), tok, min_group_size=1)
    rows = kept.non_tensor_batch["row"].tolist()
    assert rows == [0, 2, 5] and list(kept.non_tensor_batch["uid"]) == ["a", "a", "b"]
    assert kept.batch["responses"].shape[0] == 3
    assert (stats.trajectories, stats.void, stats.kept, stats.trimmed, stats.thin) == (6, 3, 3, 0, 0)
    assert stats.void_rows == [1, 3, 4] and stats.min_valid_per_group == 1 and stats.empty_groups == 0
    assert stats.metrics()["filter/void_ratio"] == 0.5
    rewards = [ROWS[i][1] for i in rows]
    want = _reference_grpo(rewards, ["a", "a", "b"])  # group a: {1.0, 0.5}; group b: {1.0} alone
    if compute_grpo_outcome_advantage is not None:  # real verl: its own GRPO on the filtered batch
        assert _advantages(kept) == pytest.approx(want, abs=1e-5)
    assert want[0] > 0 > want[1]  # without the void rows, 0.5 is below its group's mean
    assert want[2] == pytest.approx(1.0)  # a lone row: verl's mean 0, std 1 -> its raw score is its advantage


def test_a_group_left_with_one_trajectory_leaves_whole() -> None:
    """The default ``min_group_size=2``: group b's lone survivor (row 5) has no group baseline and leaves."""
    tok = _tokenizer()
    kept, stats = drop_void_trajectories(_batch(tok), tok)
    assert kept.non_tensor_batch["row"].tolist() == [0, 2]
    assert (stats.valid, stats.thin, stats.kept, stats.empty_groups, stats.min_valid_per_group) == (3, 1, 2, 1, 0)
    assert stats.metrics()["filter/thin_group_trajectories"] == 1.0
    if compute_grpo_outcome_advantage is not None:
        assert _advantages(kept) == pytest.approx(_reference_grpo([1.0, 0.5], ["a", "a"]), abs=1e-5)


GOOD, ZERO, VOID = ([ANSWER], 1.0), ([CODE, ANSWER], 0.0), (["hmm"], 0.0)


def test_divisible_by_takes_spare_rows_and_leaves_no_group_alone() -> None:
    """Two groups of three valid rows, 4 ranks: one spare row from each group goes, not group b's last three."""
    tok = _tokenizer()
    kept, stats = drop_void_trajectories(_batch(tok, [GOOD, ZERO, GOOD] * 2, list("aaabbb")), tok, divisible_by=4)
    assert kept.non_tensor_batch["row"].tolist() == [0, 1, 3, 4]
    assert (stats.kept, stats.trimmed, stats.min_valid_per_group, stats.empty_groups) == (4, 2, 2, 0)
    metrics = stats.metrics()  # tirl's own filter/* names (FilterStats), plus the trimmed and thin rows
    assert metrics["filter/valid_trajectories"] == 6.0 and metrics["filter/trimmed_trajectories"] == 2.0
    assert metrics["filter/failed_trajectories"] == 0.0


def test_divisible_by_drops_a_whole_group_when_no_group_has_a_spare() -> None:
    tok = _tokenizer()
    kept, stats = drop_void_trajectories(_batch(tok, [GOOD, ZERO] * 3, list("aabbcc")), tok, divisible_by=4)
    assert kept.non_tensor_batch["row"].tolist() == [0, 1, 2, 3]
    assert (stats.kept, stats.trimmed, stats.empty_groups, stats.min_valid_per_group) == (4, 2, 1, 0)


def test_nothing_to_train_on_is_none_never_an_empty_batch() -> None:
    """Fewer usable rows than ``divisible_by``, or every row void: ``None`` (skip the step and resample)."""
    tok = _tokenizer()
    kept, stats = drop_void_trajectories(_batch(tok), tok, divisible_by=4)  # 2 usable rows, 4 ranks
    assert kept is None and (stats.kept, stats.trimmed, stats.thin) == (0, 2, 1)
    kept, stats = drop_void_trajectories(_batch(tok, [VOID] * 4, list("aabb")), tok)
    assert kept is None and (stats.void, stats.kept, stats.empty_groups) == (4, 0, 2)
    with pytest.raises(ValueError, match="divisible_by"):
        drop_void_trajectories(_batch(tok), tok, divisible_by=0)
    with pytest.raises(ValueError, match="min_group_size"):
        drop_void_trajectories(_batch(tok), tok, min_group_size=0)


def test_without_uid_no_group_rule_applies() -> None:
    """No ``uid`` (not a grouped estimator): the valid rows stay, trimmed from the tail to ``divisible_by``."""
    tok = _tokenizer()
    kept, stats = drop_void_trajectories(_batch(tok, uids=None), tok, divisible_by=2)
    assert kept.non_tensor_batch["row"].tolist() == [0, 2] and (stats.trimmed, stats.thin) == (1, 0)


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
