"""Resample-on-Correct (``filter.mode=roc``): the selection against a plain reference, and the filter mode."""

from __future__ import annotations

import random
from collections import Counter

from tirl.config import load_config
from tirl.filters import VoidTurnFilter
from tirl.filters.roc import is_correct, resample_on_correct, tool_errors
from tirl.types import Group, Message, Role, Trajectory

CODE = "```python\nprint(1)\n```"
ERR = "```output\nNameError: name 'prnt' is not defined\n```"
OK = "```output\n42\n```"


def traj(tid: str, *, correct: bool, errors: int = 0, void: bool = False, clean: int = 1) -> Trajectory:
    msgs = [Message(role=Role.USER, content="q")]
    for out in [ERR] * errors + [OK] * clean:
        msgs += [Message(role=Role.ASSISTANT, content=CODE), Message(role=Role.TOOL, content=out)]
    msgs.append(Message(role=Role.ASSISTANT, content="hmm" if void else "\\boxed{42}"))
    return Trajectory(id=tid, messages=msgs, reward=1.0 if correct else 0.0)


def reference(trajs: list[Trajectory], keep: int) -> tuple[set[str], int]:
    """Plain reference: the correct ids RoC must keep (fewest void turns, then tool errors) and the negative count.

    Only valid when the ranking has no ties at the cut (then the seeded tie-break does not matter).
    """
    pos = [t for t in trajs if (t.reward or 0) >= 1]
    k_pos = int(keep * len(pos) / len(trajs) + 0.5)
    k_pos = min(k_pos, len(pos))
    k_neg = min(keep - k_pos, len(trajs) - len(pos))
    k_pos = min(len(pos), keep - k_neg)
    best = sorted(pos, key=lambda t: (len(t.void_turns), sum("Error" in (m.content or "") for m in t.messages)))
    return {t.id for t in best[:k_pos]}, k_neg


def test_tool_errors_counts_error_observations_only() -> None:
    t = traj("a", correct=True, errors=2, clean=3)
    assert tool_errors(t) == 2
    extra = [Message(role=Role.TOOL, content=s) for s in ("[timed out]", "[exit status 1]", "x = 'Error'", "fine")]
    t.messages.extend(extra)
    assert tool_errors(t) == 4  # the two markers count; a string that mentions Error in passing does not
    assert is_correct(t) and not is_correct(traj("b", correct=False))


def test_selection_matches_the_reference_and_keeps_input_order() -> None:
    rng = random.Random(0)
    for trial in range(200):
        n = rng.randint(2, 16)
        errs = rng.sample(range(n), n)  # distinct error counts: no tie at the cut
        trajs = [traj(f"t{i}", correct=rng.random() < 0.5, errors=errs[i]) for i in range(n)]
        keep = n // 2
        kept = resample_on_correct(trajs, keep, random.Random(trial))
        want_pos, want_neg = reference(trajs, keep)
        assert len(kept) == keep
        assert {t.id for t in kept if is_correct(t)} == want_pos
        assert sum(1 for t in kept if not is_correct(t)) == want_neg
        assert [t.id for t in kept] == [t.id for t in trajs if t in kept]  # input order


def test_void_turns_rank_before_tool_errors() -> None:
    void_clean = traj("v", correct=True, errors=0)
    void_clean.void_turns = [1]
    noisy = traj("e", correct=True, errors=3)
    kept = resample_on_correct(
        [void_clean, noisy, traj("n", correct=False), traj("m", correct=False)], 2, random.Random(1)
    )
    assert [t.id for t in kept if is_correct(t)] == ["e"]  # one correct kept (share 2/4): the non-void one


def test_incorrect_ones_are_downsampled_uniformly() -> None:
    trajs = [traj("p0", correct=True), traj("p1", correct=True)] + [traj(f"n{i}", correct=False) for i in range(6)]
    counts: Counter[str] = Counter()
    for seed in range(3000):
        counts.update(t.id for t in resample_on_correct(trajs, 4, random.Random(seed)) if not is_correct(t))
    # k_neg = 3 of 6 each time: every incorrect row kept about half the time (1500 +- ~4 sd)
    assert all(1350 < counts[f"n{i}"] < 1650 for i in range(6)), counts


def test_roc_mode_halves_each_group_and_keeps_void_like_off() -> None:
    trajs = [traj(f"c{i}", correct=True, errors=i) for i in range(4)] + [
        traj("v", correct=False, void=True),
        *[traj(f"w{i}", correct=False) for i in range(3)],
    ]
    res = VoidTurnFilter("roc").apply([Group("g", trajs)])
    kept = res.groups[0].trajectories
    assert len(kept) == 4 and res.usable == [4]
    assert {t.id for t in kept if is_correct(t)} == {"c0", "c1"}  # the two with the fewest tool errors
    assert len(res.removed) == 4 and res.stats.void == 1  # the void row is counted whether kept or not
    assert all(t.loss_weight == 1.0 for t in kept)
    again = VoidTurnFilter("roc").apply([Group("g", trajs)])
    assert [t.id for t in again.groups[0].trajectories] == [t.id for t in kept]  # seeded by the group: reproducible
    assert load_config(None, ["filter.mode=roc"]).filter.mode == "roc"
