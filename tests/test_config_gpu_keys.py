"""The GPU keys of ``[model]``: ``device=auto`` and the vLLM engine's dtype, memory share and context length.

``device=auto`` is checked with ``torch.cuda.is_available`` monkeypatched (no GPU here): that one call is
what ``auto`` asks.
"""

from __future__ import annotations

import pytest
import torch

from tirl.config import load_config
from tirl.errors import ConfigError


@pytest.mark.parametrize(("gpu", "expected"), [(True, "cuda"), (False, "cpu")])
def test_device_auto_picks_cuda_when_torch_sees_a_gpu(monkeypatch: pytest.MonkeyPatch, gpu: bool, expected: str):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert load_config(None, ["model.device=auto"]).model.device == expected
    assert load_config(None, ["model.device=CUDA:1"]).model.device == "cuda:1"  # named devices stay as given


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("model.device=gpu", "model.device"),
        ("model.device=cuda:x", "model.device"),
        ("model.vllm_gpu_memory_utilization=0", "model.vllm_gpu_memory_utilization"),
        ("model.vllm_gpu_memory_utilization=1.5", "model.vllm_gpu_memory_utilization"),
        ("model.vllm_max_model_len=8", "model.vllm_max_model_len"),
        ("model.vllm_dtype=int8", "model.vllm_dtype"),
    ],
)
def test_bad_gpu_keys_name_the_key_and_the_fix(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"config {key}=.* is invalid: (use|choose)"):
        load_config(None, [override])


def test_the_engine_computes_in_the_trainers_dtype_unless_told_and_tis_stays_on() -> None:
    cfg = load_config(None, ["model.generator=vllm"])
    assert cfg.model.generator_dtype == "float32"  # auto: the same dtype on both sides (vLLM's own auto is bf16)
    cfg = load_config(None, ["model.generator=vllm", "model.vllm_dtype=bfloat16", "model.vllm_max_model_len=4096"])
    assert (cfg.model.generator_dtype, cfg.model.vllm_max_model_len) == ("bfloat16", 4096)
    assert cfg.algo.tis_cap is not None and cfg.algo.tis_cap >= 1  # TIS corrects the bf16-vs-fp32 gap by default
