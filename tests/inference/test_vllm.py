"""VLLMGenerator: the conversion logic on CPU; generation and weight updates only with vLLM and a GPU."""

from __future__ import annotations

import asyncio
import importlib.util
from types import SimpleNamespace

import pytest
import torch

from tirl.errors import SetupError
from tirl.inference.base import SamplingParams
from tirl.inference.vllm import result_from_output, vllm_sampling_params

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_GPU = torch.cuda.is_available()


def _output(ids, lps, finish, text=""):
    logprobs = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(ids, lps, strict=True)]
    return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, logprobs=logprobs, finish_reason=finish, text=text)])


def test_result_from_output_maps_ids_logprobs_and_finish():
    eos = frozenset({2})
    r = result_from_output(_output([5, 6, 2], [-0.1, -0.2, -0.3], "stop"), eos, 4)
    assert (r.token_ids, r.logprobs, r.finish_reason, r.policy_version) == ([5, 6, 2], [-0.1, -0.2, -0.3], "eos", 4)
    assert result_from_output(_output([5, 6], [-1.0, -2.0], "stop"), eos, 0).finish_reason == "stop"
    assert result_from_output(_output([5], [-1.0], "length"), eos, 0).finish_reason == "length"
    bad = _output([5, 6], [-1.0, -2.0], "length")
    bad.outputs[0].logprobs = None
    with pytest.raises(RuntimeError, match="log-prob"):
        result_from_output(bad, eos, 0)


def test_sampling_params_are_translated():
    fake = SimpleNamespace(SamplingParams=lambda **kw: kw)
    kw = vllm_sampling_params(
        fake, SamplingParams(max_new_tokens=7, temperature=0.5, top_p=0.9, stop=("```",), seed=3), {9, 2}
    )
    assert kw["max_tokens"] == 7 and kw["temperature"] == 0.5 and kw["top_p"] == 0.9 and kw["seed"] == 3
    assert kw["stop"] == ["```"] and kw["include_stop_str_in_output"] is True
    assert kw["stop_token_ids"] == [2, 9] and kw["logprobs"] == 0


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed")
def test_missing_vllm_is_a_setup_error():
    from tirl.inference.vllm import VLLMGenerator

    with pytest.raises(SetupError, match="tirl\\[vllm\\]"):
        VLLMGenerator("/nonexistent", eos_ids=[2])


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_VLLM and HAS_GPU), reason="needs vLLM and a CUDA GPU")
def test_vllm_generation_logprobs_and_weight_update(tmp_path):
    from tirl.inference.vllm import VLLMGenerator
    from tirl.models.loading import load_policy
    from tirl.models.tiny import build_tiny_model, save_policy

    model, tok = build_tiny_model(seed=0)
    path = save_policy(model, tok, tmp_path / "tiny")
    policy = load_policy(path)
    gen = VLLMGenerator(str(path), eos_ids=policy.chat.eos_ids, gpu_memory_utilization=0.2, enforce_eager=True)
    prompt = list(tok.encode("<|user|>7*8<|end|><|assistant|>", add_special_tokens=False))

    async def run(params):
        return await asyncio.gather(*(gen.generate(prompt, params) for _ in range(4)))

    out = asyncio.run(run(SamplingParams(max_new_tokens=16, temperature=1.0, seed=1)))
    for r in out:
        ids = torch.tensor([prompt + r.token_ids])
        with torch.no_grad():
            lp = torch.log_softmax(policy.model(ids).logits[0].float(), -1)
        ref = [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(r.token_ids)]
        assert r.logprobs == pytest.approx(ref, abs=2e-2)  # fp kernels differ; TIS covers the rest
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    before = asyncio.run(run(greedy))[0].token_ids
    with torch.no_grad():
        for p in policy.model.parameters():
            p.mul_(-1.0)
    gen.update_weights(policy.model, version=1)
    after = asyncio.run(run(greedy))[0]
    assert after.policy_version == 1
    assert after.token_ids != before
    asyncio.run(gen.close())
