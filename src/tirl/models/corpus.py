r"""Tokenizer training text made from tirl's own tasks and expert episodes (``tirl model init --corpus tasks``).

:func:`task_corpus` is deterministic for a seed and needs no sandbox and no
download. It holds, in this order:

* :func:`builtin_corpus` (prose, arithmetic, Python, JSON tool calls);
* for each tir-math difficulty 1-5: the generated prompts and their expert turns
  (:func:`tirl.envs.tasks.math_gen.expert_solution`), fenced and as Hermes tool calls;
* tir-chain expert episodes rendered with tirl's chat template and the python
  tool (:data:`tirl.models.toolcalls.PYTHON_TOOL`): the system prompt, the
  ``# Tools`` section, the prompt, each call as a ``<tool_call>`` block and each
  tool response as the env writes it (the values are the chain's own, computed
  here, not run in a sandbox);
* swe-lite curriculum tasks: prompts, the expert's shell turns and each
  repository's Python source.

The text of special and added tokens (``<|im_start|>``, ``<tool_call>`` …) is
cut out of the lines (:func:`without_markers`): those are added tokens, and
BPE must not spend merges on their pieces.

The task seeds are 300000+ (neither SFT's 100000+/200000+ nor the trainer's
evaluation seeds), so no evaluated prompt is in the tokenizer's text; the
tokenizer would not leak answers anyway (it only sees text, not targets).

Not covered: tool output of swe-lite sessions (it needs the sandbox), natural language beyond the task
prompts and the built-in prose — so the merges stop near 1,700 tokens (the shipped ``qwen2-chain``: 1,727).
"""

from __future__ import annotations

import random
import re
from typing import Any

from tirl.models.template import ADDED_TOKENS, CHAT_TEMPLATE, SPECIAL_TOKENS

CORPORA = ("builtin", "tasks")
CORPUS_SEED = 300_000
_MARKERS = re.compile("|".join(re.escape(t) for t in sorted((*SPECIAL_TOKENS, *ADDED_TOKENS), key=len, reverse=True)))
_FENCE = re.compile(r"```python\n(.*?)\n```", re.DOTALL)


_WORDS = (
    "the model writes code and reads the output before it answers compute sum product value result number "
    "first then check print answer tool call function python run list sort count total each step user "
    "assistant system question solve find how many what is divide multiply add subtract remainder square"
).split()


def builtin_corpus(lines: int = 6000, seed: int = 0) -> list[str]:
    """Deterministic training text for the tokenizer: prose, arithmetic, Python, JSON tool calls."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(lines):
        a, b = rng.randint(0, 9999), rng.randint(1, 999)
        kind = i % 5
        if kind == 0:
            out.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 16))).capitalize() + ".")
        elif kind == 1:
            out.append(f"What is {a} + {b}? The answer is \\boxed{{{a + b}}}.")
        elif kind == 2:
            out.append(f"```python\nx = {a}\ny = {b}\nprint(x * y, x // y, x % y)\n```")
        elif kind == 3:
            out.append(f'<tool_call>\n{{"name": "python", "arguments": {{"code": "print({a} - {b})"}}}}\n</tool_call>')
        else:
            out.append(f"```output\n{a * b}\n```\nSo the result is {a * b}. def f(n):\n    return n + {b}\n")
    return out


def without_markers(text: str) -> list[str]:
    """The pieces of ``text`` between special/added-token markers (blank pieces dropped)."""
    return [p for p in _MARKERS.split(text) if p.strip()]


def as_tool_calls(content: str) -> str:
    r"""``content`` with each closed ```` ```python ```` fence rewritten as a Hermes ``python`` tool call.

    The block is the text tirl's chat template renders for the call (``tojson`` of the name and the
    ``{"code": ...}`` arguments), so parsing it back and rendering gives the same text.

    >>> as_tool_calls("```python\nprint(1)\n```")
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>'
    >>> as_tool_calls("\\boxed{3}")
    '\\boxed{3}'
    """
    from tirl.models.toolcalls import tool_call_text

    return _FENCE.sub(lambda m: tool_call_text("python", {"code": m.group(1)}), content)


def _math_lines(seed: int, per_difficulty: int) -> list[str]:
    from tirl.envs.tasks.math_gen import expert_solution, generate_tasks

    out: list[str] = []
    for difficulty in range(1, 6):
        for task in generate_tasks(per_difficulty, difficulty=difficulty, seed=seed + difficulty):
            out.append(task.prompt)
            for turn in expert_solution(task):
                out.append(turn)
                out.extend(without_markers(as_tool_calls(turn)))
    return out


def _chain_episode(task: Any) -> list[dict[str, Any]]:
    """A tir-chain expert episode as chat messages (tool calls and the tool outputs the sandbox would print)."""
    from tirl.envs.observation import wrap_output
    from tirl.envs.tasks.chain_gen import chain_expert_solution
    from tirl.envs.tir_math import DEFAULT_SYSTEM_PROMPT

    values = iter(task.data["values"])
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": task.prompt},
    ]
    for k, turn in enumerate(chain_expert_solution(task)):
        match = _FENCE.fullmatch(turn)
        if match is None:  # the answer turn
            messages.append({"role": "assistant", "content": turn})
            continue
        code = match.group(1)
        call = {"name": "python", "arguments": {"code": code}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        if code.startswith("prnt("):  # the expert's misspelt call: the next turn repeats it correctly
            printed = "NameError: name 'prnt' is not defined"
        else:
            printed = str(next(values)) if code.startswith("print(") else "[no output]"
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": wrap_output(printed)})
    return messages


def _chain_lines(seed: int, n: int) -> list[str]:
    from tirl.envs.tasks.chain_gen import generate_chain_tasks
    from tirl.models.safe_template import render_chat
    from tirl.models.toolcalls import PYTHON_TOOL

    out: list[str] = []
    for task in generate_chain_tasks(n, seed=seed):
        text = render_chat(CHAT_TEMPLATE, _chain_episode(task), tools=[PYTHON_TOOL], add_generation_prompt=False)
        out.extend(without_markers(text))
    return out


def _swe_lines(seed: int, n: int) -> list[str]:
    """swe-lite curriculum tasks: prompts, expert shell turns and the Python source of each repository."""
    from tirl.envs.tasks.swe_curriculum import generate_curriculum
    from tirl.envs.tasks.swe_experts import curriculum_expert_solution

    out: list[str] = []
    for task in generate_curriculum(n, seed=seed, split="train"):
        out.append(task.prompt)
        out.extend(curriculum_expert_solution(task))
        files = task.data.get("files") or {}
        out.extend(f"{name}\n{text}" for name, text in sorted(files.items()) if isinstance(text, str))
    return out


def task_corpus(seed: int = 0, *, size: int = 6000) -> list[str]:
    """Deterministic tokenizer text from tirl's task generators and expert episodes (see the module docstring)."""
    base = CORPUS_SEED + 10 * seed
    return [
        *builtin_corpus(lines=size // 2, seed=seed),
        *_math_lines(base, per_difficulty=size // 20),
        *_chain_lines(base, n=size // 4),
        *_swe_lines(base, n=size // 50),
    ]


def corpus_lines(name: str, seed: int = 0) -> list[str]:
    """The lines of the named corpus (:data:`CORPORA`)."""
    if name == "tasks":
        return task_corpus(seed)
    return builtin_corpus(seed=seed)
