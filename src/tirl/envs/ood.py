r"""``env.ood_rate``: out-of-distribution tool output on a fraction of tool calls, for every environment.

SimpleTIR's chain starts with tool output the model has not seen in training: it is fed back, sampling
drifts, and the next turn holds the low-probability tokens that spike the importance ratio. This wrapper
provokes that on purpose. :func:`tirl.envs.registry.make_env` wraps every env it builds in
:class:`OodToolOutput` when ``env.ood_rate > 0`` (``0``, the default, returns the env unwrapped), so it works
with every registered env, import-string env and adapter family, on the local and the Ray path alike.

On each observation message of a ``step`` (role ``tool``, or ``user`` for envs that answer as the user —
one message per tool call), with probability ``rate``, the text is changed by one of :data:`KINDS`:

* ``traceback`` — a multi-line Python traceback from a library the task never imported is appended;
* ``warning`` — a ``DeprecationWarning``/``RuntimeWarning`` line is put before the output;
* ``noise`` — the output is replaced by binary-looking noise (control pictures, Latin-1 bytes, ANSI colour
  escapes, replacement characters);
* ``format`` — the output is re-rendered in an unusual layout (a JSON object, CRLF line ends with tabs, or a
  box-drawing table).

The draw is seeded: a generator per episode from (``env.seed``, the task id, the reset seed), so the same
config, task and episode seed give the same changes, and paired ablation seeds see identical noise across
modes. Messages of ``reset`` (the prompt) are never changed; neither is ``evaluate`` (the reward is the
env's own).

Evaluation (``tirl eval``, a run's before/after and sampled evaluations) measures the policy on the clean env:
its envs are wrapped at ``env.eval_ood_rate`` (default 0) instead (:func:`ood_factory`, over clean envs), so a stress
evaluation is asked for explicitly (``--set env.eval_ood_rate=0.3``), and ``tirl ablate``'s ``ood`` levels
ask for it. Until 2026-12-04 the evaluation went through the training factory and saw ``env.ood_rate``.

Not covered: noise inside function-call arguments or the system prompt, and observation content that is
not a string (left as it is).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Callable
from typing import Any

from tirl.envs.base import Env, EvalResult, StepResult, Task
from tirl.types import Message, Role

KINDS: tuple[str, ...] = ("traceback", "warning", "noise", "format")
_MODULES = (
    "numpy/core/_methods.py",
    "pandas/io/parsers.py",
    "site-packages/urllib3/connection.py",
    "<frozen importlib._bootstrap>",
)
_ERRORS = (
    "MemoryError",
    "OSError: [Errno 28] No space left on device",
    "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
    "RecursionError: maximum recursion depth exceeded",
)
_FUNCS = ("_call", "__init__", "read", "<module>")
_WARNINGS = (
    "DeprecationWarning: the 'fractions.gcd' function is deprecated since Python 3.5",
    "RuntimeWarning: overflow encountered in long_scalars",
    "ResourceWarning: unclosed file <_io.TextIOWrapper name=3 mode='r' encoding='UTF-8'>",
)
_NOISE_CHARS = "\ufffd\u2400\u2401\u241b\u00ff\u00fe\u00b6\u00a7\u00e9\u00f8\u2592\u2591\x7f" + "0123456789abcdef"


def _traceback(rng: random.Random) -> str:
    frames = [
        f'  File "/usr/lib/python3/{rng.choice(_MODULES)}", line {rng.randint(10, 3000)}, in {rng.choice(_FUNCS)}'
        for _ in range(rng.randint(2, 4))
    ]
    return "\n".join(["Traceback (most recent call last):", *frames, rng.choice(_ERRORS)])


def _noise(rng: random.Random) -> str:
    body = "".join(rng.choice(_NOISE_CHARS) for _ in range(rng.randint(24, 96)))
    return f"\x1b[3{rng.randint(1, 7)}m{body}\x1b[0m"


def _reformat(text: str, rng: random.Random) -> str:
    style = rng.randrange(3)
    if style == 0:
        return json.dumps({"stdout": text, "stderr": None, "exit_code": 0, "elapsed_ms": rng.randint(1, 999)})
    if style == 1:
        return "\r\n".join("\t" + line.upper() for line in text.splitlines())
    rows = text.splitlines() or [""]
    width = max(len(r) for r in rows)
    rule = "─" * (width + 2)
    return "\n".join([f"┌{rule}┐", *(f"│ {r.ljust(width)} │" for r in rows), f"└{rule}┘"])


def perturb(text: str, kind: str, rng: random.Random) -> str:
    """``text`` changed by one of :data:`KINDS` (always different from ``text``)."""
    if kind == "traceback":
        return f"{text}\n{_traceback(rng)}"
    if kind == "warning":
        return f"/usr/lib/python3/warnings.py:{rng.randint(100, 999)}: {rng.choice(_WARNINGS)}\n{text}"
    if kind == "noise":
        return _noise(rng)
    if kind == "format":
        out = _reformat(text, rng)
        return out if out != text else f"{out}\n\x1b[0m"
    raise ValueError(f"unknown kind {kind!r}: use one of {', '.join(KINDS)}")


class OodToolOutput:
    """An :class:`~tirl.envs.base.Env` whose tool observations are changed on a ``rate`` fraction of calls.

    Every other attribute (``tools``, ``max_turns``, ``answer``…) is the wrapped env's.
    """

    def __init__(self, env: Env, *, rate: float, seed: int) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"ood rate {rate} is not in [0, 1]")
        self.env = env
        self.name: str = env.name
        self.rate = rate
        self.seed = seed
        self.changed = 0  # observation messages changed so far (tests, diagnostics)
        self._rng = random.Random(seed)

    def __getattr__(self, attr: str) -> Any:
        if attr == "env":  # not set yet (during unpickling): no recursion
            raise AttributeError(attr)
        return getattr(self.env, attr)

    async def reset(self, task: Task, *, seed: int | None = None) -> list[Message]:
        """The wrapped reset; starts this episode's seeded draw."""
        digest = hashlib.sha256(f"{self.seed}\0{task.id}\0{seed}".encode()).digest()
        self._rng = random.Random(int.from_bytes(digest[:8], "big"))
        return await self.env.reset(task, seed=seed)

    async def step(self, action: Message) -> StepResult:
        """The wrapped step, its tool observations changed with probability ``rate`` each."""
        result = await self.env.step(action)
        result.observation = [self._maybe(m) for m in result.observation]
        return result

    def _maybe(self, message: Message) -> Message:
        if message.role not in (Role.TOOL, Role.USER) or not isinstance(message.content, str):
            return message
        if self._rng.random() >= self.rate:
            return message
        self.changed += 1
        return dataclasses.replace(message, content=perturb(message.content, self._rng.choice(KINDS), self._rng))

    async def evaluate(self) -> EvalResult:
        """The wrapped env's reward, unchanged."""
        return await self.env.evaluate()

    async def close(self) -> None:
        """Close the wrapped env."""
        await self.env.close()


def wrap_ood(env: Env, *, rate: float, seed: int) -> Env:
    """``env`` itself when ``rate`` is 0, else :class:`OodToolOutput` around it."""
    return env if rate <= 0 else OodToolOutput(env, rate=rate, seed=seed)


def ood_factory(make: Callable[[Task], Env], *, rate: float, seed: int) -> Callable[[Task], Env]:
    """``make``'s envs through :func:`wrap_ood` (``make`` itself at rate 0).

    A run builds its envs clean (locally, or on Ray env hosts that do not know the purpose) and adds the noise
    here, at the rate of the purpose: ``env.ood_rate`` for training, ``env.eval_ood_rate`` for evaluation.
    """
    if rate <= 0:
        return make
    return lambda task: wrap_ood(make(task), rate=rate, seed=seed)


__all__ = ["KINDS", "OodToolOutput", "ood_factory", "perturb", "wrap_ood"]
