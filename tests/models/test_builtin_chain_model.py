"""The shipped tir-chain checkpoint (``tiny-chain``): chosen by env name, small, loadable, and it can chain."""

from __future__ import annotations

import asyncio

from tirl.config import SandboxConfig
from tirl.envs.registry import env_factory
from tirl.envs.tasks.chain_gen import generate_chain_tasks
from tirl.inference.base import SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.models.loading import BUILTIN_MODELS, builtin_model_path, load_policy
from tirl.rollout.agent_loop import AgentLoop
from tirl.rollout.evaluation import evaluate_accuracy
from tirl.sandbox import create_sandbox


def test_builtin_path_is_chosen_by_env_name() -> None:
    assert builtin_model_path("tir-chain").name == "tiny-chain"
    assert builtin_model_path("tir-math") == builtin_model_path() == builtin_model_path("swe-lite", tools=True)
    assert builtin_model_path().name == "tiny-tir"
    assert builtin_model_path("swe-lite").name == builtin_model_path("skyrl-gym:swe-lite").name == "tiny-swe"
    assert "--env tir-chain" in BUILTIN_MODELS["tir-chain"][1]


def test_tiny_chain_is_shipped_and_solves_chains_greedily_through_the_real_sandbox() -> None:
    path = builtin_model_path("tir-chain")
    assert (path / "model.safetensors").is_file(), "the built-in checkpoint tiny-chain is missing"
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert total <= 10 * 1024 * 1024
    policy = load_policy(env="tir-chain", threads=1)
    assert policy.path == path
    tasks = generate_chain_tasks(20, seed=424242)  # neither an SFT nor an evaluation seed

    async def run() -> tuple[float, float]:
        sandbox = create_sandbox(SandboxConfig(warm_pool=False), warn=False)
        gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, seed=0)
        loop = AgentLoop(gen, policy.chat, params=SamplingParams(max_new_tokens=96, temperature=0.0), max_turns=6)
        try:
            report = await evaluate_accuracy(loop, env_factory("tir-chain", sandbox=sandbox, max_turns=6), tasks)
            return report.accuracy, report.mean_turns
        finally:
            await gen.close()
            await sandbox.close()

    accuracy, turns = asyncio.run(run())
    assert 0.1 <= accuracy < 0.9  # warm-started: it chains calls on out-of-distribution outputs, with room to learn
    assert turns >= 3
