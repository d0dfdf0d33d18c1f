"""tirl.wording.counted against a plain table of the nouns tirl's messages count, and in the messages themselves."""

from __future__ import annotations

import pytest

from tirl.rollout.evaluation import TaskOutcome
from tirl.rollout.paired import PairedSamples
from tirl.wording import counted, plural_of

PLURALS = {  # written out by hand
    "trajectory": "trajectories", "task": "tasks", "step": "steps", "void turn": "void turns",
    "rewarded trajectory": "rewarded trajectories", "episode": "episodes", "day": "days", "key": "keys",
}  # fmt: skip


@pytest.mark.parametrize(("noun", "plural"), sorted(PLURALS.items()))
def test_counted_uses_the_singular_for_one_and_the_plural_otherwise(noun: str, plural: str) -> None:
    assert plural_of(noun) == plural
    assert [counted(n, noun) for n in (0, 1, 2, 11)] == [f"0 {plural}", f"1 {noun}", f"2 {plural}", f"11 {plural}"]
    assert counted(3, noun, "others") == "3 others" and counted(1, noun, "others") == f"1 {noun}"


def test_a_comparison_of_one_task_reads_in_the_singular() -> None:
    """``tirl compare`` of two one-task evaluations printed "paired: 1 tasks (1 vs 1 episodes per task)"."""
    change = PairedSamples.of([TaskOutcome("a", True, "submitted", 3)], [TaskOutcome("a", False, "void", 2)])
    text = "\n".join(change.lines())
    assert "paired: 1 task (1 vs 1 episode per task)" in text and "1 tasks" not in text
