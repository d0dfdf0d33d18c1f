r"""A verifiers ``ToolEnv`` trained by tirl: one local tool (``add``), a boxed-answer rubric, no network.

    PYTHONPATH=examples tirl train --set env.name=verifiers:verifiers_calc:load_environment \
        --set env.offer_tools=false               # the built-in model's chat format cannot list tools

The env's own dataset (the ``PAIRS`` below) is the task set; ``--set env.tasks_file=FILE`` trains on a task
file's rows instead.

verifiers' own rollout loop runs with tirl's sampler in place of the model; its rubric scores each episode;
its stop conditions become tirl's termination reasons. A model whose chat template cannot describe tools
(tirl's built-in tiny model) needs ``--set env.offer_tools=false``: the tools still run when called, they are
only not listed in the prompt. Install: verifiers 0.3.x (tirl's ``integrations`` extra).
"""

from __future__ import annotations

from typing import Any

import verifiers as vf
from datasets import Dataset

PAIRS = [(3, 4), (10, 32), (7, 8), (20, 22), (1, 1), (12, 30), (5, 9), (11, 13)]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum of a and b.
    """
    return a + b


def boxed_sum(completion: Any, answer: str, **_: Any) -> float:
    """1.0 when the last assistant message boxes the right sum."""
    texts = [m.content for m in completion if getattr(m, "role", None) == "assistant" and m.content]
    return 1.0 if texts and vf.extract_boxed_answer(texts[-1], strict=True) == answer else 0.0


def load_environment(**_: Any) -> Any:
    """The calculator ToolEnv: 'What is a + b?' with the add tool; reward 1 for a boxed correct sum."""
    rows = [{"question": f"What is {a} + {b}? Use the add tool.", "answer": str(a + b)} for a, b in PAIRS]
    return vf.ToolEnv(
        tools=[add], dataset=Dataset.from_list(rows), system_prompt="Use the add tool, then answer as \\boxed{...}.",
        rubric=vf.Rubric(funcs=[boxed_sum]), max_turns=3,
    )  # fmt: skip
