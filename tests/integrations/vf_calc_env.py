"""A small local verifiers ToolEnv for the tests: one tool (``add``), a boxed-answer rubric, no network."""

from __future__ import annotations

from typing import Any

import verifiers as vf
from datasets import Dataset

QUESTIONS = [(3, 4), (10, 32), (7, 8), (20, 22), (1, 1), (12, 30), (5, 9), (11, 13)]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum of a and b.
    """
    return a + b


def correct(completion: Any, answer: str, **_: Any) -> float:
    """1.0 when the last assistant message boxes the answer."""
    texts = [m.content for m in completion if getattr(m, "role", None) == "assistant" and m.content]
    return 1.0 if texts and vf.extract_boxed_answer(texts[-1], strict=True) == answer else 0.0


def load_environment(**_: Any) -> Any:
    """The calculator ToolEnv: 'What is a + b?', answer a+b, reward 1 for a boxed correct answer."""
    rows = [{"question": f"What is {a} + {b}? Use the add tool.", "answer": str(a + b)} for a, b in QUESTIONS]
    return vf.ToolEnv(
        tools=[add],
        dataset=Dataset.from_list(rows),
        system_prompt="Use the add tool, then answer as \\boxed{...}.",
        rubric=vf.Rubric(funcs=[correct]),
        max_turns=3,
    )
