r"""tir-chain tasks: chained computations whose next input is only known from the last tool output.

A task is ``x=781. Repeat x=x*4%787 until x<100.`` (781 → 763 → 691 → 403 → 38). The model cannot do the
arithmetic itself, so every step is one tool call whose input is the number
the sandbox printed on the previous turn; the episode ends when the printed
value is below 100 and the model answers ``\boxed{<that value>}``. The
generator only keeps tasks that stop after exactly 2, 3 or 4 calls (``env.chain_min``/``env.chain_max``,
default 2 and 4), so a solved episode takes 3–5 assistant turns, and from the second turn on the
model acts on tool output it wrote no part of (the out-of-distribution text
SimpleTIR blames for void turns).

The family runs in the **tir-math** environment unchanged (python blocks in
the real sandbox, ``\boxed{}`` answers, exact number match); only the task
generator and the expert scripts are new. It is registered as ``tir-chain``.

Expert scripts (:func:`chain_expert_solution`) are the chain itself, and
for one task in three (chosen by a hash of the id) one call first fails with
a *real* error that the next turn reads and fixes: a misspelt ``prnt``
(``NameError`` from the sandbox) or a missing ``print`` (``[no output]``).
A solved expert episode therefore has 3–6 assistant turns; use
``max_turns >= 6``.

Splits: training tasks per step and the trainer's held-out evaluation set
(disjoint by prompt, see :mod:`tirl.trainer.wiring`), and SFT's own tasks
(seeds 100000+). The **validation** split for choosing settings is a draw
disjoint from all of these (``env.eval_split=validation``, ``tirl ablate
--split validation``, ``tirl eval --split validation``); the held-out set is
only read for the reported figures.

Longer horizons (a stressor of ``tirl ablate --dose``): ``env.chain_min=4 env.chain_max=8`` draws chains of
4–8 calls; a solved episode then takes up to 10 assistant turns, so give ``env.max_turns=10`` and about
1024 ``generation.max_total_tokens``: an 8-call expert episode is 527–635 tokens of the built-in model, so
the default 512 truncates the long chains (a stress of its own). The defaults draw exactly the tasks they
always drew (same seed, same tasks).

Not covered: ``env.difficulty`` (the chain length is ``env.chain_min``..``env.chain_max``, nothing else)
and JSONL task files (use tir-math's loader for your own questions).
"""

from __future__ import annotations

import hashlib
import random

from tirl.config import EnvConfig
from tirl.envs.base import Task

KIND = "tir-chain"
MIN_CALLS = 2
MAX_CALLS = 4
STOP_BELOW = 100


def chain_values(x0: int, a: int, m: int, *, limit: int = 16) -> list[int]:
    """The values after each call of ``x = x*a % m`` from ``x0`` until one is below ``STOP_BELOW``.

    Stops after ``limit`` calls (a cycle that never gets below the bound); then
    the last value is still ``>= STOP_BELOW``.

    >>> chain_values(347, 7, 601)
    [25]
    """
    out: list[int] = []
    x = x0
    while len(out) < limit:
        x = x * a % m
        out.append(x)
        if x < STOP_BELOW:
            break
    return out


def step_code(x: int, a: int, m: int) -> str:
    """The one-line program of one call (numbers copied verbatim from the prompt and the last output)."""
    return f"print({x}*{a}%{m})"


def _draw(rng: random.Random, calls: int) -> tuple[int, int, int, list[int]]:
    """Rejection-sample ``(x0, a, m, values)`` whose chain stops after exactly ``calls`` calls."""
    while True:
        m = rng.randint(150, 999)
        a = rng.randint(2, 9)
        x0 = rng.randint(STOP_BELOW, m - 1)
        values = chain_values(x0, a, m, limit=calls)
        if len(values) == calls and values[-1] < STOP_BELOW:
            return x0, a, m, values


def generate_chain_tasks(
    n: int, *, seed: int = 0, min_calls: int = MIN_CALLS, max_calls: int = MAX_CALLS
) -> list[Task]:
    """``n`` chain tasks; the same arguments always give the same tasks.

    Chain lengths ``min_calls``..``max_calls`` (default 2–4) are equally likely.

    >>> [t.answer for t in generate_chain_tasks(3, seed=0)] == [t.answer for t in generate_chain_tasks(3, seed=0)]
    True
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 1 <= min_calls <= max_calls:
        raise ValueError(f"chain lengths {min_calls}..{max_calls}: want 1 <= min_calls <= max_calls")
    rng = random.Random(f"tir-chain/{seed}")
    tasks = []
    for i in range(n):
        calls = rng.randint(min_calls, max_calls)
        x0, a, m, values = _draw(rng, calls)
        tasks.append(
            Task(
                id=f"chain-s{seed}-{i}",
                prompt=f"x={x0}. Repeat x=x*{a}%{m} until x<{STOP_BELOW}.",
                answer=str(values[-1]),
                kind=KIND,
                data={"x0": x0, "a": a, "m": m, "values": values, "code": step_code(x0, a, m)},
            )
        )
    return tasks


def _fence(code: str) -> str:
    return f"```python\n{code}\n```"


def chain_expert_solution(task: Task) -> list[str]:
    r"""The scripted assistant turns that solve a generated chain task through the tir-math env.

    One code turn per call, each with the previous call's *real* output as
    its input, then ``\boxed{<last value>}``. For a third of the tasks one
    call (chosen by a hash of the id) is first written wrong — ``prnt(...)``,
    which the sandbox answers with ``NameError``, or without ``print``, which
    it answers with ``[no output]`` — and repeated correctly on the next turn.
    Tasks not made by :func:`generate_chain_tasks` raise ``ValueError``.
    """
    data = task.data
    try:
        x0, a, m, values = int(data["x0"]), int(data["a"]), int(data["m"]), [int(v) for v in data["values"]]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"task {task.id!r} is not a generated tir-chain task (no x0/a/m/values)") from None
    inputs = [x0, *values[:-1]]
    turns = [_fence(step_code(x, a, m)) for x in inputs]
    digest = int(hashlib.sha256(task.id.encode()).hexdigest(), 16)
    variant, where = digest % 6, (digest // 6) % len(inputs)
    if variant == 0:
        wrong = "prnt(" + step_code(inputs[where], a, m)[len("print(") :]
        turns.insert(where, _fence(wrong))
    elif variant == 1:
        turns.insert(where, _fence(f"{inputs[where]}*{a}%{m}"))
    return [*turns, f"\\boxed{{{values[-1]}}}"]


def task_source(config: EnvConfig, n: int, seed: int) -> list[Task]:
    """Registry task source of ``tir-chain``: ``n`` generated tasks of ``env.chain_min``..``env.chain_max`` calls.

    ``tasks_file`` uses tir-math's loader instead.
    """
    if config.tasks_file:
        from tirl.envs.tir_math import task_source as math_source

        return math_source(config, n, seed)
    return generate_chain_tasks(n, seed=seed, min_calls=config.chain_min, max_calls=config.chain_max)


__all__ = [
    "KIND",
    "chain_expert_solution",
    "chain_values",
    "generate_chain_tasks",
    "task_source",
]
