"""The trainer's log-probs are of the sampler's distribution at ``generation.temperature`` (issue 16, item 5).

A real :class:`HFGenerator` samples from the tiny model at temperature 0.7; the
trainer scores the same ids. Without the division by the temperature the PPO
ratio and the TIS weight would compare two different distributions.
"""

from __future__ import annotations

import pytest
import torch
from trainer_fakes import SMALL

from tirl.config import load_config
from tirl.inference.base import SamplingParams
from tirl.inference.hf import HFGenerator
from tirl.models.tiny import build_tiny_model
from tirl.trainer.update import PolicyUpdater, score_logprobs
from tirl.types import Message, Role, Trajectory


def _sampled_trajectory(temperature: float) -> tuple[torch.nn.Module, Trajectory, list[float]]:
    model, tok = build_tiny_model(SMALL, seed=0)
    model.eval()
    gen = HFGenerator(model, tok, eos_ids=[tok.eos_token_id], seed=0, threads=None)
    prompt = tok.encode("Compute 2+2.")
    (res,) = gen.generate_batch([prompt], [SamplingParams(max_new_tokens=24, temperature=temperature, seed=5)])
    assert len(res.token_ids) >= 8
    ids = [*prompt, *res.token_ids]
    traj = Trajectory(
        id="t",
        messages=[Message(role=Role.USER, content="Compute 2+2.")],
        token_ids=ids,
        loss_mask=[0] * len(prompt) + [1] * len(res.token_ids),
        logprobs=[0.0] * len(prompt) + list(res.logprobs),
        prompt_len=len(prompt),
        reward=1.0,
    )
    return model, traj, list(res.logprobs)


def test_trainer_logprobs_of_sampled_ids_equal_the_samplers_at_temperature_0_7() -> None:
    model, traj, sampler = _sampled_trajectory(0.7)
    n = len(sampler)
    (scored,) = score_logprobs(model, [traj], 0, 0, temperature=0.7)
    assert scored[-n:].tolist() == pytest.approx(sampler, abs=1e-4)
    (untempered,) = score_logprobs(model, [traj], 0, 0)
    assert max(abs(a - b) for a, b in zip(untempered[-n:].tolist(), sampler, strict=True)) > 1e-2


@pytest.mark.parametrize(("trainer_t", "gap_small"), [(0.7, True), (1.0, False)])
def test_update_measures_no_gap_only_with_the_samplers_temperature(trainer_t: float, gap_small: bool) -> None:
    """The update's own generator-vs-trainer gap (the TIS input) vanishes when it uses the sampling temperature."""
    model, traj, _ = _sampled_trajectory(0.7)
    algo = load_config(None, ["algo.minibatches=1", "algo.warmup_steps=0"]).algo
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    up = PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0, temperature=trainer_t)
    stats = up.update([traj], torch.tensor([1.0]), seed=0)
    assert stats.tokens > 0
    assert (stats.gap_max < 1e-4) is gap_small, stats.gap_max


def test_trainer_passes_generation_temperature_to_the_update(make_trainer) -> None:
    trainer = make_trainer("generation.temperature=0.7")
    assert trainer.updater.temperature == 0.7
