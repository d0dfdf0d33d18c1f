"""VLLMGenerator: the conversion logic on CPU; generation and weight updates only with vLLM and a GPU."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from types import SimpleNamespace

import pytest
import torch

from tirl.errors import ConfigError, SetupError
from tirl.inference.base import SamplingParams
from tirl.inference.vllm import (
    check_engine_process,
    engine_kwargs,
    engine_model_dir,
    result_from_output,
    vllm_sampling_params,
)
from tirl.inference.vllm_worker import WORKER_EXTENSION

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_GPU = torch.cuda.is_available()


def _output(ids, lps, finish, text="", stop_reason=None):
    logprobs = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(ids, lps, strict=True)]
    comp = SimpleNamespace(token_ids=ids, logprobs=logprobs, finish_reason=finish, text=text, stop_reason=stop_reason)
    return SimpleNamespace(outputs=[comp])


def test_result_from_output_maps_ids_logprobs_and_finish():
    eos = frozenset({2})
    r = result_from_output(_output([5, 6, 2], [-0.1, -0.2, -0.3], "stop", stop_reason=2), eos, 4)
    assert (r.token_ids, r.logprobs, r.finish_reason, r.policy_version) == ([5, 6, 2], [-0.1, -0.2, -0.3], "eos", 4)
    stop = _output([5, 6], [-1.0, -2.0], "stop", text="x```", stop_reason="```")  # a stop string
    assert result_from_output(stop, eos, 0).finish_reason == "stop"
    # vLLM's own end-of-sequence token (the model's eos, not one of the chat format's ids): stop_reason None
    assert result_from_output(_output([5, 151643], [-1.0, -2.0], "stop"), eos, 0).finish_reason == "eos"
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

    with pytest.raises(SetupError, match="make install-vllm"):
        VLLMGenerator("/nonexistent", eos_ids=[2])


def test_engine_arguments_name_the_worker_extension_and_the_configured_settings(tmp_path):
    kw = engine_kwargs(
        tmp_path, dtype="float32", seed=3, gpu_memory_utilization=0.3, max_model_len=2048,
        extra={"enforce_eager": True, "worker_extension_cls": "other.Cls"},
    )  # fmt: skip
    assert kw["worker_extension_cls"] == WORKER_EXTENSION and kw["enforce_eager"] is True
    assert (kw["dtype"], kw["seed"], kw["gpu_memory_utilization"], kw["max_model_len"]) == ("float32", 3, 0.3, 2048)
    assert kw["logprobs_mode"] == "processed_logprobs" and "enable_lora" not in kw
    lora = engine_kwargs(tmp_path, dtype="bfloat16", seed=0, gpu_memory_utilization=0.5, max_model_len=None,
                         lora_rank=12)  # fmt: skip
    assert (lora["enable_lora"], lora["max_lora_rank"], lora["max_loras"]) == (True, 16, 1)
    assert "max_model_len" not in lora
    with pytest.raises(ConfigError, match=r"algo\.lora_rank"):
        engine_kwargs(tmp_path, dtype="auto", seed=0, gpu_memory_utilization=0.5, max_model_len=None, lora_rank=999)


def test_a_resumed_lora_run_points_the_engine_at_the_base_model(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    adapter = tmp_path / "checkpoints" / "step-5" / "model"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    assert engine_model_dir(adapter) == base
    assert engine_kwargs(adapter, dtype="float32", seed=0, gpu_memory_utilization=0.5, max_model_len=None)[
        "model"
    ] == str(base)
    assert engine_model_dir(base) == base


def test_an_in_process_engine_is_refused():
    with pytest.raises(SetupError, match=r"VLLM_ENABLE_V1_MULTIPROCESSING=0 .* default process group"):
        check_engine_process({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    check_engine_process({})
    check_engine_process({"VLLM_ENABLE_V1_MULTIPROCESSING": "1"})


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

    def assert_trainer_parity(results):  # float32 on both sides (dtype=float32): kernels differ, not precision
        for r in results:
            ids = torch.tensor([prompt + r.token_ids])
            with torch.no_grad():
                lp = torch.log_softmax(policy.model(ids).logits[0].float(), -1)
            ref = [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(r.token_ids)]
            assert r.logprobs == pytest.approx(ref, abs=2e-2)

    assert_trainer_parity(asyncio.run(run(SamplingParams(max_new_tokens=16, temperature=1.0, seed=1))))
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    gen.update_weights(policy.model, version=1)
    after = asyncio.run(run(greedy))
    assert all(r.policy_version == 1 for r in after)
    assert_trainer_parity(after)  # the engine now computes the trained weights' log-probs
    asyncio.run(gen.close())
