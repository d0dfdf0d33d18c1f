"""`tirl train --model DIR` / `tirl eval` with a `tirl model init` model, and a real update on its own rollouts.

The commands run in this process (:func:`tests.tiny_run.tirl_in_process`): one torch import for the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.tiny_run import tirl_in_process

from tirl.config import AlgoConfig
from tirl.envs.base import Task
from tirl.envs.tir_math import TirMathEnv
from tirl.inference.base import SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.models.loading import load_policy
from tirl.models.toolcalls import PYTHON_TOOL
from tirl.rollout.agent_loop import AgentLoop
from tirl.sandbox.base import Sandbox
from tirl.trainer.update import PolicyUpdater
from tirl.types import Trajectory

SMALL = [
    "--set", "trainer.prompts_per_step=2", "--set", "algo.group_size=2", "--set", "env.eval_size=4",
    "--set", "generation.max_new_tokens=16", "--set", "generation.max_total_tokens=600",
]  # fmt: skip


def test_train_and_eval_run_with_the_made_model_and_lora_checkpoints_are_adapters(
    qwen2_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    options = ["--set", "env.tools=true", "--set", "algo.lora_rank=4", "--set", "algo.gradient_checkpointing=true"]
    options += ["--set", "algo.autocast=bf16", "--set", "trainer.checkpoint_every=1"]
    args = ["train", "--model", str(qwen2_dir), "--steps", "1", "--no-progress", "--run-dir", str(run)]
    proc = tirl_in_process(*args, *SMALL, *options)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    model_dir = run / "checkpoints" / "step-1" / "model"
    names = {p.name for p in model_dir.iterdir()}
    assert "adapter_model.safetensors" in names and "model.safetensors" not in names  # adapter-only
    first = json.loads((run / "trajectories.jsonl").read_text().splitlines()[0])
    assert first["messages"][0]["role"] == "system"
    ev = tirl_in_process("eval", "--model", str(run), "--n", "4", "--json", "--set", "env.tools=true", *SMALL[-4:])
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert json.loads(ev.stdout.strip().splitlines()[-1])["n"] == 4
    merged = tmp_path / "merged"
    mg = tirl_in_process("model", "merge", str(model_dir), "--out", str(merged))
    assert mg.returncode == 0 and mg.stderr == "", mg.stderr
    assert (merged / "model.safetensors").is_file() and not (merged / "adapter_config.json").exists()
    assert load_policy(merged).model.config.model_type == "qwen2"  # standalone: no peft layers, no adapter


def test_train_with_tools_refuses_a_template_without_tool_support(tmp_path: Path) -> None:
    from tirl.models.tiny import build_tiny_model, save_policy

    model, tok = build_tiny_model()  # the char tokenizer's template has no tools
    plain = save_policy(model, tok, tmp_path / "plain")
    args = ["train", "--model", str(plain), "--steps", "1", "--run-dir", str(tmp_path / "run")]
    proc = tirl_in_process(*args, "--set", "env.tools=true")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no tool support" in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()


async def test_an_update_on_the_models_own_tool_rollouts(qwen2_dir: Path, model_sandbox: Sandbox) -> None:
    """Sampled with the template (tools in the prompt), scored by the trainer: ratio 1 before the step, weights move."""
    policy = load_policy(qwen2_dir)
    gen = HFGenerator(policy.model, policy.tokenizer, eos_ids=policy.chat.eos_ids, seed=0)
    params = SamplingParams(max_new_tokens=24)
    loop = AgentLoop(gen, policy.chat, params=params, max_turns=2, max_total_tokens=700, tools=(PYTHON_TOOL,))
    trajs = []
    for i in range(4):
        task = Task(id=f"t{i}", prompt=f"Compute {i}+{i}.", answer=str(2 * i))
        env = TirMathEnv(sandbox=model_sandbox, max_turns=2)
        traj = Trajectory(id=task.id, messages=[])
        await loop(env, task, await env.reset(task), traj)
        await env.close()
        assert traj.termination is not None and not traj.failed, traj.error
        assert '"name": "python"' in policy.tokenizer.decode(traj.token_ids[: traj.prompt_len])  # tools rendered
        trajs.append(traj)
    await gen.close()
    before = [p.detach().clone() for p in policy.model.parameters()]
    opt = torch.optim.AdamW(policy.model.parameters(), lr=1e-3)
    algo = AlgoConfig(minibatches=1, warmup_steps=0, tis_cap=None)
    up = PolicyUpdater(policy.model, opt, algo, pad_id=int(policy.tokenizer.pad_token_id))
    stats = up.update(trajs, torch.tensor([1.0, -1.0, 0.5, -0.5]), seed=0)
    m = stats.metrics()
    assert m["train/optimizer_steps"] == 1
    assert m["train/is_ratio_min"] == pytest.approx(1.0) and m["train/is_ratio_max"] == pytest.approx(1.0)
    assert m["train/gen_logprob_gap_max"] < 1e-3  # the sampler's log-probs are the trainer's, id for id
    assert any(not torch.equal(a, p) for a, p in zip(before, policy.model.parameters(), strict=True))
