"""``env.chain_min``/``env.chain_max``: tir-chain's longer horizons (a stressor of ``tirl ablate --dose``).

Covered: the defaults draw exactly the tasks the fixed 2–4 generator drew (pinned hash of 200 prompts,
computed with the generator before the options existed); 4–8 draws every length in the range through the
registry; an 8-call expert episode is solved through the real sandbox with ``env.max_turns=10`` and is cut
(truncated, not answered) at the default ``max_turns=6``; bad values are one ``error:`` line, exit 2.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from tests.tiny_run import tirl_in_process

from tirl.config import ConfigError, load_config
from tirl.envs.registry import load_tasks
from tirl.envs.tasks.chain_gen import chain_expert_solution
from tirl.envs.tir_math import TirMathEnv
from tirl.sandbox.base import Sandbox
from tirl.testing import play
from tirl.types import TerminationReason

#: sha256 of the 200 prompts of seed 7, newline-joined, from the generator at bf54564 (fixed 2–4 calls)
DEFAULT_SEED7_SHA = "1fda54d212b4401cdb32b4d1af427f54ae49ec0c24043d1b91b9f2768ae8a282"


def test_the_defaults_draw_the_tasks_they_always_drew() -> None:
    prompts = "\n".join(t.prompt for t in load_tasks(load_config(None, []).env, 200, seed=7))
    assert hashlib.sha256(prompts.encode()).hexdigest() == DEFAULT_SEED7_SHA


def test_chain_4_to_8_draws_every_length_in_the_range() -> None:
    env = load_config(None, ["env.chain_min=4", "env.chain_max=8"]).env
    lengths = [len(t.data["values"]) for t in load_tasks(env, 300, seed=1)]
    assert set(lengths) == {4, 5, 6, 7, 8}
    assert load_tasks(env, 20, seed=1) == load_tasks(env, 20, seed=1)  # deterministic


async def test_an_eight_call_chain_needs_ten_turns_through_the_real_sandbox(sandbox: Sandbox) -> None:
    env = load_config(None, ["env.chain_min=8", "env.chain_max=8"]).env
    task = next(t for t in load_tasks(env, 40, seed=2) if len(chain_expert_solution(t)) == 9)  # 8 calls + answer
    script = chain_expert_solution(task)
    solved = await play(TirMathEnv(sandbox=sandbox, max_turns=10), task, script)
    assert solved.reason is TerminationReason.ANSWERED and solved.correct
    cut = await play(TirMathEnv(sandbox=sandbox, max_turns=6), task, script)
    assert cut.reason is TerminationReason.MAX_TURNS and not cut.correct


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["env.chain_min=5", "env.chain_max=3"], ["env.chain_max=3", "env.chain_min"]),
        (["env.chain_max=13"], ["env.chain_max=13", "1..12"]),
        (["env.chain_min=0"], ["env.chain_min=0", "1..12"]),
    ],
)
def test_bad_chain_lengths_are_one_error_line(
    overrides: list[str], words: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert all(w in str(err.value) for w in words), str(err.value)
    monkeypatch.chdir(tmp_path)
    res = tirl_in_process("train", "--steps", "1", "--no-progress", *(a for o in overrides for a in ("--set", o)))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert not (tmp_path / "runs").exists()
