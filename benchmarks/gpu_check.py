"""The GPU check: every step asserts numbers and a failure exits 1 (``benchmarks/gpu_check.sh`` runs it).

Tier A (a bare GPU image with torch, tirl on ``PYTHONPATH``, no network, no ``.venv``):

* per memory option (fp32, bf16 autocast, checkpointing, both, LoRA, LoRA+bf16+checkpointing): three
  real ``PolicyUpdater`` steps (AdamW, lr 1e-5) on a ``tirl model init`` Qwen2 model (~58M parameters at
  the default size); step-0 loss within 2e-2 of fp32's, finite losses, every option moves its trainable
  weights, peak GPU memory lower with checkpointing, LoRA leaves the base weights bit-identical and its
  adapter gradient is non-zero; tokens/s printed;
* a two-step ``tirl train`` run (the built-in model, ``TrainingRun`` in this process so that the parameters'
  device can be checked): finite loss, at least one optimiser step, parameters on the GPU;
* ``tirl train --nproc N`` with N above the devices this machine has (one GPU visible): exit 2 within
  seconds, one ``error:`` line that names ``--nproc``.

Tier B (vLLM installed: ``make install-vllm``): greedy/sampled log-prob parity engine vs trainer in float32,
a sync checked against the trained weights (the engine's own parameters read back by
``tirl_dump_weights`` equal the trained ones), a LoRA adapter sync (engine log-probs follow the adapter), and a
two-step ``tirl train --generator vllm``.

A tier that is asked for and cannot run (no GPU, vLLM missing) is a failure, never a skip. ``--device cpu``
dry-runs Tier A on a CPU with the same assertions, except the GPU-memory ones (no CUDA allocator to read).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPTIONS: dict[str, dict[str, Any]] = {
    "fp32": {},
    "bf16": {"precision": "bf16"},
    "checkpointing": {"ckpt": True},
    "bf16+checkpointing": {"precision": "bf16", "ckpt": True},
    "lora": {"lora": True},
    "lora+bf16+checkpointing": {"lora": True, "precision": "bf16", "ckpt": True},
}
LOSS_TOL = 2e-2
LOGPROB_TOL = 2e-2  # engine vs trainer, float32 on both sides: kernel differences only


class CheckFailed(AssertionError):
    """A check's numbers are not what they must be."""


def require(cond: bool, what: str) -> None:
    """Fail the current check with ``what`` unless ``cond``."""
    if not cond:
        raise CheckFailed(what)


@dataclass
class Args:
    """The command line."""

    device: str
    tiers: str
    model: Path | None
    layers: int
    hidden: int
    vocab: int
    batch: int
    seq: int
    work: Path
    results: list[tuple[str, bool, str]] = field(default_factory=list)


def parse(argv: list[str] | None) -> Args:
    """Parse the command line (see ``benchmarks/gpu_check.sh``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiers", default="AB", help="A, B or AB (a tier asked for that cannot run fails)")
    p.add_argument("--model", type=Path, default=None, help="a model directory (default: tirl model init)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--work", type=Path, default=None)
    a = p.parse_args(argv)
    tiers = a.tiers.upper()
    if not tiers or set(tiers) - {"A", "B"}:
        p.error(f"--tiers {a.tiers!r}: use A, B or AB")
    work = a.work or Path(tempfile.mkdtemp(prefix="tirl-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    return Args(a.device, tiers, a.model, a.layers, a.hidden, a.vocab, a.batch, a.seq, work)


def run_check(args: Args, name: str, fn: Callable[[], str]) -> None:
    """Run one check; record and print PASS/FAIL with its figures or the reason."""
    t0 = time.perf_counter()
    try:
        detail = fn()
        ok = True
    except Exception as exc:  # every failure is the check's, reported, and the run goes on to the next check
        detail, ok = f"{type(exc).__name__}: {exc}", False
    args.results.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'} {name} ({time.perf_counter() - t0:.1f}s): {detail}", flush=True)


# ------------------------------------------------------------------------------------------------ Tier A
def machine(args: Args) -> str:
    """Versions and the device; the imports a bare image must carry."""
    import torch

    missing = [m for m in ("transformers", "safetensors", "peft", "tirl.cli") if not _importable(m)]
    require(not missing, f"cannot import {missing}: carry the project's wheels (pip install --no-index ...)")
    import transformers

    if args.device == "cuda":
        require(torch.cuda.is_available(), "no CUDA device visible (DEVICE=cpu dry-runs Tier A on a CPU)")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    return f"torch {torch.__version__} cuda {torch.version.cuda} transformers {transformers.__version__}; {gpu}"


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def model_dir(args: Args) -> Path:
    """The model the checks train: ``--model``, or one made now by ``tirl model init``'s code."""
    if args.model is not None:
        return args.model
    from tirl.models.init import ModelSpec, init_model

    path = args.work / "model"
    if not (path / "config.json").is_file():
        init_model(ModelSpec(arch="qwen2", layers=args.layers, hidden=args.hidden, vocab=args.vocab), path)
    return path


def _batch(vocab: int, batch: int, seq: int) -> tuple[list[Any], Any]:
    import torch

    from tirl.types import Message, Role, Trajectory

    g = torch.Generator().manual_seed(0)
    prompt = min(64, seq // 4)
    trajs = [
        Trajectory(id=str(i), messages=[Message(role=Role.USER, content="")],
                   token_ids=torch.randint(3, vocab, (seq,), generator=g).tolist(),
                   loss_mask=[0] * prompt + [1] * (seq - prompt),
                   logprobs=[0.0] * prompt + [-9.0] * (seq - prompt), prompt_len=prompt)
        for i in range(batch)
    ]  # fmt: skip
    return trajs, torch.linspace(-1.0, 1.5, batch)


def _embedding(name: str) -> bool:
    """Embedding rows of tokens absent from the batch get no gradient: left out of the "weights moved" share."""
    return "embed" in name or "lm_head" in name


@dataclass
class OptionResult:
    """What three update steps under one memory option measured."""

    step0_loss: float  # the language-model loss of the batch before any step (under the option's precision)
    losses: list[float]  # the policy loss of each step
    peak_mib: float
    tokens_s: float
    moved: float  # share of trainable (non-embedding) weights that changed
    base_unchanged: bool
    adapter_grad: float


def train_option(path: Path, device: str, opt: dict[str, Any], batch: int, seq: int) -> OptionResult:
    """Three real update steps on a fresh copy of the model under ``opt``."""
    import torch
    from transformers import AutoModelForCausalLM

    from tirl.config import AlgoConfig
    from tirl.models.memory import LoraSpec, apply_lora, autocast, enable_checkpointing, trainable_parameters
    from tirl.trainer.update import PolicyUpdater

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path).to(dev)
    if opt.get("lora"):
        model = apply_lora(model, LoraSpec(rank=8, alpha=16))
    if opt.get("ckpt"):
        enable_checkpointing(model)
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    params = trainable_parameters(model)
    watched = [
        (n, p) for n, p in model.named_parameters() if p.requires_grad and "embed" not in n and "lm_head" not in n
    ]
    before = [p.detach().clone() for _, p in watched]
    optim = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0)
    up = PolicyUpdater(model, optim, AlgoConfig(minibatches=1, micro_batch_tokens=0, warmup_steps=0), pad_id=0,
                       precision=opt.get("precision", "off"))  # fmt: skip
    trajs, adv = _batch(model.config.vocab_size, batch, seq)
    ids = torch.tensor([t.token_ids for t in trajs[:2]], device=dev)
    with torch.no_grad(), autocast(dev, opt.get("precision", "off")):  # the language-model loss before training
        step0 = float(model(input_ids=ids, labels=ids, use_cache=False).loss.float())
    if dev.type == "cuda":
        torch.cuda.synchronize()
        start_mem = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    losses, times, grad = [], [], 0.0
    for step in range(3):  # the first allocates Adam state and warms the kernels
        t0 = time.perf_counter()
        stats = up.update(trajs, adv, seed=step)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        require(stats.steps == 1, f"step {step}: the update was skipped")
        losses.append(float(stats.losses[0]))
        grad = max(grad, float(stats.metrics()["train/grad_norm"] or 0.0))
    peak = (torch.cuda.max_memory_allocated() - start_mem) / 2**20 if dev.type == "cuda" else float("nan")
    moved = sum(int((p.detach() != b).sum()) for (_, p), b in zip(watched, before, strict=True))
    unchanged = all(torch.equal(p, base[n]) for n, p in model.named_parameters() if n in base)
    return OptionResult(step0, losses, peak, batch * seq / min(times[1:]),
                        moved / max(1, sum(b.numel() for b in before)), unchanged, grad)  # fmt: skip


def memory_options(args: Args, path: Path) -> str:
    """The six memory options: loss agreement, weights moved, LoRA base frozen, peak memory ordering."""
    res = {name: train_option(path, args.device, opt, args.batch, args.seq) for name, opt in OPTIONS.items()}
    lines = []
    for name, r in res.items():
        lines.append(f"{name}: step-0 loss {r.step0_loss:+.4f}, {r.tokens_s:,.0f} train tokens/s, "
                     f"peak {r.peak_mib:,.0f} MiB above the model, {r.moved:.3f} of weights moved")  # fmt: skip
    print("\n".join("    " + line for line in lines), flush=True)
    ref = res["fp32"].step0_loss
    for name, r in res.items():
        require(all(math.isfinite(x) for x in r.losses), f"{name}: non-finite loss {r.losses}")
        require(abs(r.step0_loss - ref) <= LOSS_TOL, f"{name}: step-0 loss {r.step0_loss} vs fp32 {ref}")
        require(r.moved > 0.9, f"{name}: only {r.moved:.3f} of the trainable weights moved in 3 steps")
        require(r.adapter_grad > 0, f"{name}: zero gradient norm")
        if OPTIONS[name].get("lora"):
            require(r.base_unchanged, f"{name}: a frozen base weight changed")
    if args.device == "cuda":
        for plain, ckpt in (("fp32", "checkpointing"), ("bf16", "bf16+checkpointing")):
            lo, hi = res[ckpt].peak_mib, res[plain].peak_mib
            require(lo < hi, f"peak memory {ckpt} {lo:.0f} MiB not below {plain} {hi:.0f} MiB")
    return f"6 options; fp32 step-0 loss {ref:+.4f}; all within {LOSS_TOL}"


def train_two_steps(args: Args, *, generator: str = "hf") -> str:
    """A two-step ``tirl train`` (the built-in model) in this process; finite loss, parameters on the device."""
    from tirl.config import load_config
    from tirl.trainer.logging import read_metrics
    from tirl.trainer.run import TrainingRun

    sets = [f"model.device={args.device}", f"model.generator={generator}", "trainer.steps=2",
            "trainer.prompts_per_step=2", "algo.group_size=4", "trainer.eval_before_after=false",
            "trainer.checkpoint_every=2", "trainer.threads=1", "sandbox.warm_pool=false",
            "algo.kl_coef=0.01",  # a KL term: every step updates, even one whose groups all tie on reward
            "model.vllm_gpu_memory_utilization=0.3"]  # fmt: skip
    cfg = load_config(None, sets)
    run_dir = args.work / f"run-{generator}"
    run = TrainingRun(cfg, run_dir, progress=False)

    async def go() -> tuple[set[str], int]:
        await run.setup()
        try:
            await run.train()
            assert run.parts is not None
            devices = {str(p.device) for p in run.parts.policy.model.parameters()}
            return devices, int(getattr(run.parts.generator, "policy_version", -1))
        finally:
            await run.cleanup()

    devices, version = asyncio.run(go())
    rows = read_metrics(run_dir)
    require(len(rows) == 2, f"{len(rows)} metric rows, expected 2")
    losses = [r["train/loss"] for r in rows if r.get("train/optimizer_steps")]
    require(bool(losses), "no optimiser step in two steps (no reward signal): cannot check the loss")
    require(all(math.isfinite(x) for x in losses), f"non-finite loss {losses}")
    want = "cuda" if args.device == "cuda" else "cpu"
    require(all(d.startswith(want) for d in devices), f"parameters on {devices}, expected {want}")
    if generator == "vllm":
        require(version == sum(1 for r in rows if r.get("train/optimizer_steps")), f"engine at version {version}")
    return f"losses {[round(x, 4) for x in losses]}, parameters on {sorted(devices)}, generator version {version}"


def nproc_refused(args: Args) -> str:
    """``tirl train --nproc N`` beyond this machine's devices: exit 2 at once with one ``error:`` line."""
    n = 2 if args.device == "cuda" else (os.cpu_count() or 1) + 1
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"} if args.device == "cuda" else dict(os.environ)
    cmd = [sys.executable, "-m", "tirl.cli", "train", "--nproc", str(n), "--run-dir", str(args.work / "nproc"),
           "--set", f"model.device={args.device}"]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    took = time.perf_counter() - t0
    lines = proc.stderr.strip().splitlines()
    require(proc.returncode == 2, f"exit {proc.returncode}, expected 2: {proc.stderr[-300:]}")
    require(len(lines) == 1 and lines[0].startswith("error:") and "--nproc" in lines[0], f"stderr {lines}")
    require(took < 60, f"took {took:.0f}s: the refusal must come before any model loads")
    return f"{lines[0]} ({took:.1f}s)"


# ------------------------------------------------------------------------------------------------ Tier B
def _need_vllm() -> None:
    require(_importable("vllm"), "vLLM is not installed (make install-vllm; Tier B was asked for)")


def _prompts(policy: Any, n: int) -> list[list[int]]:
    from tirl.types import Message, Role

    return [policy.chat.prompt_ids([Message(role=Role.USER, content=f"What is {i} + {2 * i}?")]) for i in range(n)]


def _gap(gen: Any, model: Any, prompts: list[list[int]], params: Any) -> tuple[float, list[Any], float]:
    """Largest |engine - trainer| log-prob over the sampled tokens, the results, and generated tokens/s."""
    import torch

    async def sample() -> list[Any]:
        return list(await asyncio.gather(*(gen.generate(p, params) for p in prompts)))

    t0 = time.perf_counter()
    results = asyncio.run(sample())
    tps = sum(len(r.token_ids) for r in results) / (time.perf_counter() - t0)
    dev = next(model.parameters()).device
    gap = 0.0
    with torch.no_grad():
        for prompt, r in zip(prompts, results, strict=True):
            if not r.token_ids:
                continue
            ids = torch.tensor([prompt + r.token_ids], device=dev)
            lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
            ref = lp[len(prompt) - 1 : -1].gather(1, ids[0, len(prompt) :, None])[:, 0]
            gap = max(gap, float((ref.cpu() - torch.tensor(r.logprobs)).abs().max()))
    return gap, results, tps


def _update(model: Any, steps: int = 3) -> None:
    """Real update steps (AdamW, lr 1e-4) so that the synced weights differ from the checkpoint's."""
    import torch

    from tirl.config import AlgoConfig
    from tirl.models.memory import trainable_parameters
    from tirl.trainer.update import PolicyUpdater

    optim = torch.optim.AdamW(trainable_parameters(model), lr=1e-4, weight_decay=0.0)
    up = PolicyUpdater(model, optim, AlgoConfig(minibatches=1, warmup_steps=0), pad_id=0)
    trajs, adv = _batch(model.config.vocab_size, 4, 128)
    for step in range(steps):
        require(up.update(trajs, adv, seed=step).steps == 1, "a trainer step was skipped")


def vllm_parity_and_sync(args: Args, path: Path) -> str:
    """Engine vs trainer log-probs in float32, then a sync of trained weights read back from the engine."""
    _need_vllm()
    import torch
    from safetensors.torch import load_file

    from tirl.inference.base import SamplingParams
    from tirl.inference.vllm import VLLMGenerator
    from tirl.inference.vllm_worker import DUMP_METHOD, SyncCall, engine_expected
    from tirl.models.loading import load_policy

    policy = load_policy(path, device="cuda")
    gen = VLLMGenerator(path, eos_ids=policy.chat.eos_ids, dtype="float32", gpu_memory_utilization=0.3,
                        max_model_len=1024, enforce_eager=True)  # fmt: skip
    try:
        prompts = _prompts(policy, 64)
        gap0, _, tps = _gap(gen, policy.model, prompts, SamplingParams(max_new_tokens=64, temperature=1.0, seed=1))
        require(gap0 <= LOGPROB_TOL, f"engine vs trainer log-prob gap {gap0:.4f} > {LOGPROB_TOL} before any sync")
        _update(policy.model)
        t0 = time.perf_counter()
        gen.update_weights(policy.model, 1)
        sync_s = time.perf_counter() - t0
        dump = args.work / "engine-weights.safetensors"
        SyncCall(DUMP_METHOD, (str(dump),)).send(gen.llm)
        state = {k: v.detach().float().cpu() for k, v in policy.model.state_dict().items()}
        worst = 0.0
        for name, t in load_file(str(dump)).items():
            want = engine_expected(state, name)
            require(want is not None, f"engine parameter {name} has no trainer counterpart")
            assert want is not None
            if t.shape[0] > want.shape[0] and t.shape[1:] == want.shape[1:]:
                t = t[: want.shape[0]]  # vLLM pads the vocabulary rows of its embedding (to a multiple of 64)
            require(t.shape == want.shape, f"{name}: engine shape {tuple(t.shape)} vs trainer {tuple(want.shape)}")
            worst = max(worst, float((t.float() - want).abs().max()))
        require(worst <= 1e-6, f"engine weights differ from the trained ones by up to {worst}")
        gap1, after, _ = _gap(gen, policy.model, prompts, SamplingParams(max_new_tokens=64, temperature=0.0))
        require(all(r.policy_version == 1 for r in after), "results after the sync not stamped version 1")
        require(gap1 <= LOGPROB_TOL, f"engine vs trained-trainer log-prob gap {gap1:.4f} > {LOGPROB_TOL}")
    finally:
        asyncio.run(gen.close())
        del policy
        torch.cuda.empty_cache()
    return (f"gap before {gap0:.2e}, after sync {gap1:.2e} (tolerance {LOGPROB_TOL}); engine weights = trained "
            f"(max diff {worst:.1e}); sync {sync_s:.2f}s; {tps:,.0f} generated tokens/s")  # fmt: skip


def vllm_lora_sync(args: Args, path: Path) -> str:
    """An adapter sync: the engine's log-probs follow the trained adapter, not the base."""
    _need_vllm()
    import torch

    from tirl.inference.base import SamplingParams
    from tirl.inference.vllm import VLLMGenerator
    from tirl.models.loading import load_policy
    from tirl.models.memory import LoraSpec, apply_lora

    policy = load_policy(path, device="cuda")
    base = load_policy(path, device="cuda").model
    model = apply_lora(policy.model, LoraSpec(rank=8, alpha=16))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.05)  # stands in for a trained adapter
    gen = VLLMGenerator(path, eos_ids=policy.chat.eos_ids, dtype="float32", gpu_memory_utilization=0.3,
                        max_model_len=1024, lora_rank=8, enforce_eager=True)  # fmt: skip
    try:
        gen.sync_adapter(model, 1)
        prompts = _prompts(policy, 32)
        greedy = SamplingParams(max_new_tokens=32, temperature=0.0)
        gap, results, _ = _gap(gen, model, prompts, greedy)
        base_gap, _, _ = _gap(gen, base, prompts, greedy)
        require(all(r.policy_version == 1 for r in results), "results not stamped with the adapter's version")
        require(gap <= LOGPROB_TOL, f"engine vs adapter log-prob gap {gap:.4f} > {LOGPROB_TOL}")
        require(base_gap > 5 * max(gap, 1e-3), f"the adapter changes nothing visible (base gap {base_gap:.4f})")
    finally:
        asyncio.run(gen.close())
        torch.cuda.empty_cache()
    return f"engine vs adapter gap {gap:.2e}; vs base {base_gap:.2e}"


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    """Run the tiers asked for; exit 1 when any check failed."""
    args = parse(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if args.device == "cpu":  # a dry run: one intra-op thread (the machine may be shared), fewer surprises
        import torch

        torch.set_num_threads(1)
    print(f"== gpu_check: device {args.device}, tiers {args.tiers}, work {args.work}", flush=True)
    paths: list[Path] = []

    def need_model() -> Path:
        require(bool(paths), "no model (the model check failed)")
        return paths[0]

    run_check(args, "machine", lambda: machine(args))
    run_check(args, "model", lambda: f"{_params(_remember(paths, model_dir(args)))} parameters at {paths[0]}")
    if "A" in args.tiers:
        run_check(args, "A1 memory options", lambda: memory_options(args, need_model()))
        run_check(args, "A2 tirl train (2 steps)", lambda: train_two_steps(args))
        run_check(args, "A3 --nproc beyond the devices refused", lambda: nproc_refused(args))
    if "B" in args.tiers:
        if args.device != "cuda":
            run_check(args, "B vLLM", lambda: require(False, "Tier B needs --device cuda") or "")
        else:
            run_check(args, "B1 vLLM parity + sync", lambda: vllm_parity_and_sync(args, need_model()))
            run_check(args, "B2 vLLM LoRA sync", lambda: vllm_lora_sync(args, need_model()))
            run_check(
                args,
                "B3 tirl train --generator vllm",
                lambda: (_need_vllm(), train_two_steps(args, generator="vllm"))[1],
            )
    failed = [name for name, ok, _ in args.results if not ok]
    print(
        f"== {len(args.results) - len(failed)}/{len(args.results)} checks passed"
        + (f"; FAILED: {failed}" if failed else "")
    )
    return 1 if failed else 0


def _remember(paths: list[Path], path: Path) -> Path:
    paths.append(path)
    return path


def _params(path: Path) -> str:
    from safetensors import safe_open

    total = 0
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            total += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())  # noqa: SIM118
    return f"{total / 1e6:.1f}M"


if __name__ == "__main__":
    sys.exit(main())
