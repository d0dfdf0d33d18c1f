"""Memory options on a `tirl model init` model: checkpointing, bf16 autocast, LoRA (real peft), in the real update."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tirl.config import AlgoConfig, load_config
from tirl.models.loading import load_policy
from tirl.models.memory import (
    LoraSpec,
    apply_lora,
    apply_memory_options,
    autocast,
    checkpointed_layers,
    enable_checkpointing,
    export_merged,
    trainable_parameters,
    update_mode,
)
from tirl.trainer.update import PolicyUpdater
from tirl.types import Message, Role, Trajectory

pytest.importorskip("peft")


def _model(path: Path) -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path)


def _ids(n: int = 48, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 1000, (2, n), generator=g)


def _grads(model: torch.nn.Module, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_checkpointing_recomputes_and_gives_the_same_gradients(qwen2_dir: Path) -> None:
    plain, ckpt = _model(qwen2_dir), _model(qwen2_dir)
    enable_checkpointing(ckpt)
    update_mode(plain)
    update_mode(ckpt)
    layers = checkpointed_layers(ckpt)
    assert len(layers) == ckpt.config.num_hidden_layers and not checkpointed_layers(plain)
    assert not ckpt.training and all(layer.training for layer in layers)
    assert not any(m.training for layer in layers for m in layer.children())  # dropout etc. stay in eval mode
    calls = {"plain": 0, "ckpt": 0}
    # a pre-hook: the recomputation stops early once the saved tensors it needs are back (non-reentrant)
    plain.model.layers[0].self_attn.register_forward_pre_hook(lambda *_: calls.update(plain=calls["plain"] + 1))
    ckpt.model.layers[0].self_attn.register_forward_pre_hook(lambda *_: calls.update(ckpt=calls["ckpt"] + 1))
    ids = _ids()
    ga, gb = _grads(plain, ids), _grads(ckpt, ids)
    assert calls == {"plain": 1, "ckpt": 2}  # the checkpointed layer ran again in the backward pass
    assert ga.keys() == gb.keys()
    for name in ga:
        torch.testing.assert_close(ga[name], gb[name], rtol=1e-4, atol=1e-6, msg=name)


def test_bf16_autocast_runs_matmuls_in_bf16_and_stays_close(qwen2_dir: Path) -> None:
    model = _model(qwen2_dir)
    model.eval()
    ids = _ids()
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        with autocast("cpu", "bf16"):
            low = model(input_ids=ids).logits
        with autocast("cpu", "off"):
            same = model(input_ids=ids).logits
    assert ref.dtype == torch.float32 and low.dtype == torch.bfloat16 and torch.equal(ref, same)
    assert model.model.embed_tokens.weight.dtype == torch.float32  # master weights stay float32
    torch.testing.assert_close(low.float(), ref, rtol=0.05, atol=0.05)


def test_lora_trains_the_adapter_only_saves_it_alone_and_merges_on_export(qwen2_dir: Path, tmp_path: Path) -> None:
    base = _model(qwen2_dir)
    ids = _ids()
    with torch.no_grad():
        before = base(input_ids=ids).logits.clone()
    frozen = {n: p.detach().clone() for n, p in base.named_parameters()}
    model = apply_lora(base, LoraSpec(rank=4, alpha=8))
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, before)  # B = 0 at init: same function
    params = trainable_parameters(model)
    assert params and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    opt = torch.optim.AdamW(params, lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    for n, p in model.get_base_model().named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, frozen[n.replace(".base_layer", "")]), n  # the base is untouched
    model.eval()
    with torch.no_grad():
        trained = model(input_ids=ids).logits.clone()
    assert not torch.allclose(trained, before)

    adapter = tmp_path / "adapter"
    model.save_pretrained(adapter)
    policy = load_policy(qwen2_dir)
    policy.tokenizer.save_pretrained(adapter)
    names = {p.name for p in adapter.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= names and "model.safetensors" not in names
    assert (adapter / "adapter_model.safetensors").stat().st_size < (qwen2_dir / "model.safetensors").stat().st_size
    loaded = load_policy(adapter)  # an adapter directory loads over its base (merged for inference)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(input_ids=ids).logits, trained, rtol=1e-4, atol=1e-5)

    merged_dir = export_merged(model, policy.tokenizer, tmp_path / "merged")
    plain = AutoModelForCausalLM.from_pretrained(merged_dir)  # no peft needed
    assert not any("lora" in n for n, _ in plain.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, trained, rtol=1e-4, atol=1e-5)
    assert any("lora_" in n for n, _ in model.named_parameters())  # export left the training model as it was


def _trajs(n: int = 4, length: int = 40) -> list[Trajectory]:
    out = []
    for i in range(n):
        ids = _ids(length, seed=i)[0].tolist()
        mask = [0] * 10 + [1] * (length - 10)
        lps = [0.0] * 10 + [-6.9] * (length - 10)
        msgs = [Message(role=Role.USER, content="q")]
        out.append(Trajectory(id=str(i), messages=msgs, token_ids=ids, loss_mask=mask, logprobs=lps, prompt_len=10))
    return out


@pytest.mark.parametrize("option", ["none", "checkpointing", "bf16", "lora", "all"])
def test_the_policy_update_runs_with_each_option(qwen2_dir: Path, option: str) -> None:
    model = _model(qwen2_dir)
    if option in ("lora", "all"):
        model = apply_lora(model, LoraSpec(rank=4, alpha=8))
    if option in ("checkpointing", "all"):
        enable_checkpointing(model)
    precision = "bf16" if option in ("bf16", "all") else "off"
    params = trainable_parameters(model)
    before = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=1e-3)
    algo = AlgoConfig(warmup_steps=0, minibatches=2)
    up = PolicyUpdater(model=model, optimizer=opt, algo=algo, pad_id=0, precision=precision)
    stats = up.update(_trajs(), torch.tensor([1.0, -1.0, 0.5, -0.5]), seed=0)
    metrics = stats.metrics()
    assert metrics["train/optimizer_steps"] == 2 and metrics["train/skipped_updates"] == 0
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.losses)
    assert any(not torch.equal(a, p) for a, p in zip(before, params, strict=True))
    assert metrics["train/is_ratio_min"] is not None and metrics["train/is_ratio_min"] > 0


def test_a_lora_checkpoint_resumes_with_its_adapter_and_optimizer_state(qwen2_dir: Path, tmp_path: Path) -> None:
    from tirl.models.memory import apply_memory_options, is_lora

    algo = AlgoConfig(lora_rank=4, lora_alpha=8)
    model = apply_memory_options(_model(qwen2_dir), algo)
    opt = torch.optim.AdamW(trainable_parameters(model), lr=1e-2)
    ids = _ids()
    opt.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    model.save_pretrained(tmp_path / "ckpt")
    load_policy(qwen2_dir).tokenizer.save_pretrained(tmp_path / "ckpt")
    state = opt.state_dict()

    resumed = load_policy(tmp_path / "ckpt", train_adapter=True)  # what `tirl train --resume` loads
    again = apply_memory_options(resumed.model, algo)
    assert is_lora(again) and again is resumed.model  # the saved adapter, not a fresh one on top
    params = trainable_parameters(again)
    assert [p.shape for p in params] == [p.shape for p in trainable_parameters(model)]
    opt2 = torch.optim.AdamW(params, lr=1e-2)
    opt2.load_state_dict(state)
    for p, q in zip(params, trainable_parameters(model), strict=True):
        torch.testing.assert_close(p, q)  # the trained adapter weights, in the optimizer's order
        assert opt2.state[p]["exp_avg"].shape == p.shape


def test_lora_targets_from_the_config_choose_the_wrapped_projections(qwen2_dir: Path) -> None:
    cfg = load_config(None, ["algo.lora_rank=2", 'algo.lora_targets=["q_proj", "v_proj"]'])
    model = apply_memory_options(_model(qwen2_dir), cfg.algo)
    wrapped = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in model.named_parameters() if p.requires_grad}
    assert wrapped == {"q_proj", "v_proj"}  # the default list also wraps k, o and the MLP projections
