"""Config keys that no other test set, each set through ``load_config`` and checked on what it changes (issue 21).

Real parts throughout: the sandbox ``create_sandbox`` builds from the config (bubblewrap's warm pool where it
works, else the process fallback), the void filter and its rules from the config, the policy and the rollout
parts ``tirl train`` wires (a tiny random model saved to disk, the HF generator). What a key does inside a
component is tested with that component; here only that the config key reaches it.
"""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tests.tiny_run import save_tiny_model

from tirl.config import load_config
from tirl.filters import VoidTurnFilter
from tirl.sandbox import create_sandbox
from tirl.types import Group, Message, Role, Trajectory


def test_sandbox_memory_output_cap_and_pool_size_come_from_the_config() -> None:
    cfg = load_config(None, ["sandbox.memory_mb=96", "sandbox.max_output_chars=300", "sandbox.pool_size=2"])

    async def go() -> tuple[object, object, object, int]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the process fallback says what it does not cover
            sb = create_sandbox(cfg.sandbox)
        try:
            loud = await sb.run("print('x' * 5000)")
            big = await sb.run("b = bytearray(400 * 1024 * 1024); print('allocated')")
            small = await sb.run("b = bytearray(8 * 1024 * 1024); print('allocated')")
            return loud, big, small, int(getattr(sb, "size", 0))
        finally:
            await sb.close()

    loud, big, small, size = asyncio.run(go())
    assert loud.truncated and 250 <= len(loud.stdout) <= 400  # head + marker + tail of about 300 characters
    assert "allocated" not in big.stdout and big.exit_code != 0  # 400 MB over a 96 MB cap
    assert small.stdout.strip() == "allocated"
    if size:  # the warm pool (the default): two fork servers
        assert size == 2


def _traj(text: str) -> Trajectory:
    msgs = [Message(role=Role.USER, content="2+2?"), Message(role=Role.ASSISTANT, content=text)]
    return Trajectory(id=text[:8], group="g", messages=msgs, token_ids=[1, 2], loss_mask=[0, 1], reward=1.0)


@pytest.mark.parametrize(
    ("switch_off", "answer"),
    [("filter.boxed=false", "So the answer is \\boxed{4}."), ("filter.answer_tags=false", "So: <answer>4</answer>")],
)
def test_each_answer_form_can_be_switched_off(switch_off: str, answer: str) -> None:
    """With the form off, a turn whose only act is that answer is a void turn."""
    for overrides, void in (([], 0), ([switch_off], 1)):
        cfg = load_config(None, ["env.name=tir-math", "filter.mode=drop", *overrides])
        result = VoidTurnFilter.from_config(cfg.filter, cfg.env).apply([Group(id="g", trajectories=[_traj(answer)])])
        assert (result.stats.void, result.stats.valid) == (void, 1 - void), overrides


def test_policy_dtype_and_top_p_reach_the_wired_run(tmp_path: Path) -> None:
    """``model.dtype``/``model.device`` load the policy; ``generation.top_p`` reaches the sampler: a top-p near 0
    keeps only the most likely token, so sampling at temperature 5 gives the greedy tokens."""
    from tirl.inference.base import SamplingParams
    from tirl.trainer.wiring import build_parts

    model_dir = save_tiny_model(tmp_path / "tiny")
    base = [f"model.path={model_dir}", "sandbox.backend=process", "trainer.threads=1", "generation.temperature=5"]

    async def sample(cfg_overrides: list[str]) -> tuple[torch.dtype, str, list[int], list[int], float]:
        cfg = load_config(None, [*base, *cfg_overrides])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            parts = build_parts(cfg, model_path=None, trace_path=None)
        try:
            prompt = parts.policy.tokenizer.encode("7*8=", add_special_tokens=False)
            params = parts.runner.params
            sampled = await parts.generator.generate(prompt, replace(params, seed=3))
            argmax = SamplingParams(max_new_tokens=params.max_new_tokens, temperature=0.0)
            greedy = await parts.generator.generate(prompt, argmax)
            p = next(parts.policy.model.parameters())
            return p.dtype, p.device.type, list(sampled.token_ids), list(greedy.token_ids), params.top_p
        finally:
            await parts.close()

    dtype, device, nucleus, greedy, top_p = asyncio.run(
        sample(["model.dtype=bfloat16", "model.device=cpu", "generation.top_p=0.000001"])
    )
    assert (dtype, device, top_p) == (torch.bfloat16, "cpu", 0.000001)
    assert nucleus == greedy
    _, _, full, greedy32, _ = asyncio.run(sample(["generation.top_p=1.0"]))
    assert full != greedy32  # the control: at temperature 5 without the cut, sampling leaves the greedy path
