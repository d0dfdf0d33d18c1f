"""The vLLM weight sync on CPU: what crosses vLLM's serialiser, and what the worker extension loads.

vLLM's engine runs in another process and carries ``collective_rpc`` there with msgpack, decoding without
type information. Checked here without a GPU:

* the payload is a method name and primitive values (always), it survives msgpack as vLLM decodes it
  (msgspec, no types), and, where vLLM is importable, vLLM's own ``MsgpackEncoder``/``MsgpackDecoder``;
  the old payload (a function and tensors) does not;
* :class:`WeightSyncExtension`'s load method, dispatched by name, loads exactly the trainer's weights into
  a stand-in for vLLM's model (a mock at the GPU edge: vLLM-style stacked ``qkv_proj``/``gate_up_proj``
  parameters and a ``load_weights`` that takes Hugging Face names, as vLLM's Llama/Qwen2 models do);
* :class:`VLLMGenerator` against a stand-in ``vllm.LLM`` (same mock: the engine cannot start without a
  GPU): full-weight sync, adapter-only LoRA sync, the version stamp, and ``close()`` shutting the engine down.

Not covered here: a real engine (tests/inference/test_vllm.py's GPU test and benchmarks/gpu_check.sh Tier B).
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
import torch

from tirl.inference.base import SamplingParams
from tirl.inference.vllm_worker import (
    LOAD_METHOD,
    STACKED,
    SyncCall,
    WeightSyncExtension,
    engine_expected,
    is_primitive,
    load_call,
    write_weights,
)
from tirl.models.tiny import TinyModelSpec, build_tiny_model

SPEC = TinyModelSpec(hidden_size=32, layers=2, heads=4, kv_heads=2, intermediate_size=64, max_positions=128)


def _engine_name(hf_name: str) -> tuple[str, int]:
    """vLLM's parameter name for a Hugging Face name, and the part index inside a stacked parameter."""
    for stacked, parts in STACKED.items():
        for i, part in enumerate(parts):
            if f".{part}." in hf_name:
                return hf_name.replace(f".{part}.", f".{stacked}."), i
    return hf_name, 0


class EngineStandIn(torch.nn.Module):
    """Stands in for vLLM's model (mock at the GPU edge): stacked parameters, ``load_weights`` of HF names."""

    def __init__(self, hf_state: dict[str, torch.Tensor], tied: bool) -> None:
        super().__init__()
        self.tied = tied
        self.offsets: dict[str, tuple[str, int, int]] = {}  # hf name -> (engine name, first row, rows)
        rows: dict[str, int] = {}
        shapes: dict[str, list[int]] = {}
        for name, t in hf_state.items():
            if tied and name == "lm_head.weight":
                continue  # vLLM's tied models have no lm_head parameter of their own
            engine, _ = _engine_name(name)
            start = rows.get(engine, 0)
            self.offsets[name] = (engine, start, t.shape[0])
            rows[engine] = start + t.shape[0]
            shapes[engine] = [rows[engine], *t.shape[1:]]
        for engine, shape in shapes.items():
            *path, leaf = engine.split(".")
            module: torch.nn.Module = self
            for part in path:
                if not hasattr(module, part):
                    module.add_module(part, torch.nn.Module())
                module = getattr(module, part)
            module.register_parameter(leaf, torch.nn.Parameter(torch.zeros(shape), requires_grad=False))

    def load_weights(self, weights: Any) -> set[str]:
        loaded = set()
        params = dict(self.named_parameters())
        for name, t in weights:
            if self.tied and name == "lm_head.weight":
                continue
            engine, start, n = self.offsets[name]
            params[engine].data[start : start + n].copy_(t)
            loaded.add(engine)
        return loaded


def _trained_model(seed: int = 0) -> torch.nn.Module:
    model, _ = build_tiny_model(SPEC, seed=seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)  # stands in for an update: every weight differs from the checkpoint
    return model


def _worker(model: torch.nn.Module) -> WeightSyncExtension:
    worker = WeightSyncExtension()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    worker.model_runner = SimpleNamespace(model=EngineStandIn(state, tied=model.config.tie_word_embeddings))
    worker.device = "cpu"
    return worker


def _assert_engine_holds(worker: WeightSyncExtension, model: torch.nn.Module) -> None:
    state = model.state_dict()
    params = dict(worker.model_runner.model.named_parameters())
    assert any(".qkv_proj." in n for n in params) and any(".gate_up_proj." in n for n in params)
    for name, p in params.items():
        expected = engine_expected(state, name)
        assert expected is not None, name
        assert torch.equal(p.detach(), expected.detach()), name


def test_the_payload_is_a_method_name_and_primitives() -> None:
    call = load_call(Path("/dev/shm/tirl-weights-1.safetensors"))
    assert call.method == LOAD_METHOD and call.args == ("/dev/shm/tirl-weights-1.safetensors",)
    assert is_primitive(call.args) and is_primitive(call.utility_message(5))
    assert not is_primitive([torch.zeros(2)]) and not is_primitive({"f": len}) and not is_primitive({1: "a"})
    with pytest.raises(TypeError):
        SyncCall(LOAD_METHOD, (torch.zeros(1),))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SyncCall("load_weights", ("x",))  # a name vLLM's own Worker might have: not ours


def test_the_payload_survives_msgpack_without_types_and_the_old_one_does_not() -> None:
    call = load_call(Path("/dev/shm/w.safetensors"))
    client, call_id, utility, (method, timeout, args, kwargs) = msgspec.msgpack.decode(
        msgspec.msgpack.encode(call.utility_message(9))
    )
    assert (client, call_id, utility, method, timeout, args, kwargs) == (
        0, 9, "collective_rpc", LOAD_METHOD, None, ["/dev/shm/w.safetensors"], None,
    )  # fmt: skip

    def old_load(worker: Any, weights: Any) -> int:  # what tirl used to send: a function and tensors
        return len(weights)

    with pytest.raises(TypeError):
        msgspec.msgpack.encode((0, 1, "collective_rpc", (old_load, None, ([("w", torch.zeros(2))],), None)))


def test_the_payload_survives_vllms_own_serialiser() -> None:
    serial = pytest.importorskip("vllm.v1.serial_utils", reason="vLLM is not installed (make install-vllm)")
    call = load_call(Path("/dev/shm/w.safetensors"))
    out = serial.MsgpackDecoder().decode(serial.MsgpackEncoder().encode(call.utility_message(3)))
    assert out[2] == "collective_rpc" and out[3][0] == LOAD_METHOD and list(out[3][2]) == list(call.args)


def test_the_worker_extension_loads_exactly_the_trainers_weights(tmp_path: Path) -> None:
    model = _trained_model()
    worker = _worker(build_tiny_model(SPEC, seed=1)[0])  # the engine starts from other weights
    path = write_weights(model, tmp_path)
    call = load_call(path)
    (wire_method, wire_args) = msgspec.msgpack.decode(msgspec.msgpack.encode((call.method, call.args)))
    count = getattr(worker, wire_method)(*wire_args)  # dispatched by name, as vLLM's worker does
    assert count == len(model.state_dict())
    _assert_engine_holds(worker, model)
    dumped = tmp_path / "dump.safetensors"
    assert worker.tirl_dump_weights(str(dumped)) == len(list(worker.model_runner.model.parameters()))
    from safetensors.torch import load_file

    for name, t in load_file(str(dumped)).items():
        assert torch.equal(t, engine_expected(model.state_dict(), name)), name


# --------------------------------------------------------------- the generator against a stand-in engine
@dataclass
class FakeLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


class FakeLLM:
    """``vllm.LLM`` stand-in (mock at the GPU edge): RPCs cross msgpack without types to a real extension."""

    def __init__(self, worker: WeightSyncExtension) -> None:
        self.worker = worker
        self.prefix_resets = 0
        self.shut_down = False
        self.removed: list[int] = []
        self.requests: list[Any] = []
        core = SimpleNamespace(shutdown=lambda: setattr(self, "shut_down", True))
        self.llm_engine = SimpleNamespace(engine_core=core, remove_lora=self.removed.append)

    def collective_rpc(self, method: Any, timeout: Any = None, args: tuple = (), kwargs: Any = None) -> list[Any]:
        wire = msgspec.msgpack.encode((0, 1, "collective_rpc", (method, timeout, args, kwargs)))
        _, _, _, (name, _, wire_args, wire_kwargs) = msgspec.msgpack.decode(wire)
        result = getattr(self.worker, name)(*wire_args, **(wire_kwargs or {}))
        return msgspec.msgpack.decode(msgspec.msgpack.encode([result]))

    def reset_prefix_cache(self) -> bool:
        self.prefix_resets += 1
        return True

    def generate(self, prompts: Any, params: Any, *, use_tqdm: bool, lora_request: Any) -> list[Any]:
        self.requests.append(lora_request)
        lps = [{7: SimpleNamespace(logprob=-0.5)}, {0: SimpleNamespace(logprob=-0.1)}]
        comp = SimpleNamespace(token_ids=[7, 0], logprobs=lps, finish_reason="stop", stop_reason=None, text="")
        return [SimpleNamespace(outputs=[comp]) for _ in prompts]


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake ``vllm`` modules for the few names the generator imports (vLLM itself cannot be installed here)."""
    root = types.ModuleType("vllm")
    root.SamplingParams = lambda **kw: kw  # type: ignore[attr-defined]
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda **kw: kw  # type: ignore[attr-defined]
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest  # type: ignore[attr-defined]
    for name, mod in {"vllm": root, "vllm.inputs": inputs, "vllm.lora": lora, "vllm.lora.request": request}.items():
        monkeypatch.setitem(sys.modules, name, mod)


def test_generator_syncs_full_weights_by_path_and_close_shuts_the_engine(fake_vllm: None) -> None:
    from tirl.inference.vllm import VLLMGenerator

    model = _trained_model()
    llm = FakeLLM(_worker(build_tiny_model(SPEC, seed=1)[0]))
    gen = VLLMGenerator("/unused", eos_ids=[0], llm=llm)
    seen: list[str] = []
    load = llm.worker.tirl_load_weights
    llm.worker.tirl_load_weights = lambda path: (seen.append(path), load(path))[1]  # type: ignore[method-assign]
    gen.update_weights(model, version=4)
    _assert_engine_holds(llm.worker, model)
    assert gen.policy_version == 4 and llm.prefix_resets == 1
    assert len(seen) == 1 and seen[0].endswith(".safetensors") and not Path(seen[0]).exists()  # removed once loaded
    out = asyncio.run(gen.generate([1, 2], SamplingParams(max_new_tokens=4)))
    assert out.policy_version == 4 and out.finish_reason == "eos" and llm.requests == [None]
    asyncio.run(gen.close())
    assert llm.shut_down and not gen.sync_dir.exists()


def test_generator_syncs_a_lora_adapter_not_the_model(fake_vllm: None) -> None:
    pytest.importorskip("peft")
    from tirl.inference.vllm import VLLMGenerator
    from tirl.models.memory import LoraSpec, apply_lora

    model = apply_lora(build_tiny_model(SPEC, seed=0)[0], LoraSpec(rank=4, alpha=8))
    llm = FakeLLM(_worker(build_tiny_model(SPEC, seed=0)[0]))
    gen = VLLMGenerator("/unused", eos_ids=[0], llm=llm, lora_rank=4)
    gen.sync_adapter(model, 1)
    first = gen.lora_request
    files = {p.name for p in Path(first.lora_path).iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= files and "model.safetensors" not in files
    assert json.loads((Path(first.lora_path) / "adapter_config.json").read_text())["r"] == 4
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.1)
    gen.sync_adapter(model, 2)
    second = gen.lora_request
    assert second.lora_int_id != first.lora_int_id and llm.removed == [first.lora_int_id]
    assert not Path(first.lora_path).exists() and gen.policy_version == 2
    from safetensors.torch import load_file

    saved = load_file(str(Path(second.lora_path) / "adapter_model.safetensors"))
    lora_b = {n: p for n, p in model.named_parameters() if "lora_B" in n}
    assert saved and all(any(torch.equal(t, p) for p in lora_b.values()) for k, t in saved.items() if "lora_B" in k)
    asyncio.run(gen.generate([1, 2], SamplingParams(max_new_tokens=4)))
    assert llm.requests == [second]  # generation asks for the new adapter
    assert llm.worker.model_runner.model is not None and llm.prefix_resets == 2  # the base was not reloaded
    asyncio.run(gen.close())


def test_a_lora_policy_goes_to_sync_adapter_unmerged() -> None:
    pytest.importorskip("peft")
    from tirl.models.memory import LoraSpec, apply_lora
    from tirl.trainer.wiring import RunParts

    class Gen:
        policy_version = 0

        def __init__(self) -> None:
            self.calls: list[tuple[str, Any, int]] = []

        def sync_weights(self, model: Any, tokenizer: Any, version: int) -> None:
            self.calls.append(("weights", model, version))

        def sync_adapter(self, model: Any, version: int) -> None:
            self.calls.append(("adapter", model, version))

        async def generate(self, prompt_ids: list[int], params: Any) -> Any: ...

        async def close(self) -> None: ...

    model = apply_lora(build_tiny_model(SPEC, seed=0)[0], LoraSpec(rank=4, alpha=8))
    gen = Gen()
    parts = RunParts(SimpleNamespace(model=model, tokenizer=None), gen, None, None, None, None, None, None, None)  # type: ignore[arg-type]
    parts.set_policy_version(3)
    assert gen.calls == [("adapter", model, 3)]  # the peft model itself: no deep copy merged on the GPU


def test_weights_go_to_disk_when_dev_shm_is_too_small(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import shutil
    import tempfile

    from tirl.inference import vllm_worker

    real = shutil.disk_usage
    monkeypatch.setattr(vllm_worker.shutil, "disk_usage", lambda p: real(p)._replace(free=64 << 20))  # Docker's 64 MB
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert vllm_worker.shm_dir(1 << 20) in (Path("/dev/shm"), tmp_path)  # 1 MB fits (where /dev/shm is writable)
    assert vllm_worker.shm_dir(256 << 20) == tmp_path  # a 58M-parameter float32 model does not
