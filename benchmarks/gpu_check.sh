#!/usr/bin/env bash
# GPU check for a machine with a CUDA GPU (nothing here is downloaded: the model is made by `tirl model init`).
#
#   bash benchmarks/gpu_check.sh [MODEL_DIR]
#
# 1. makes a ~58M-parameter Qwen2 model (or uses MODEL_DIR),
# 2. one real PolicyUpdater training step on CUDA under each memory option (fp32, bf16 autocast,
#    gradient checkpointing, LoRA), printing tokens/s and torch.cuda.max_memory_allocated above the
#    loaded model,
# 3. `tirl train --model DIR --set model.device=cuda` for one step (the whole loop: rollout, filter, update),
# 4. where vLLM is installed: VLLMGenerator generation (tokens/s), a weight sync from a trained copy
#    (update_weights -> policy_version + changed greedy output), generation again.
#
# Environment: PYTHON (default .venv/bin/python), DEVICE (default cuda; DEVICE=cpu dry-runs steps 1-3 on a CPU),
# BATCH x SEQ tokens per training step (default 8 x 1024).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DEVICE=${DEVICE:-cuda}
BATCH=${BATCH:-8}
SEQ=${SEQ:-1024}
WORK=$(mktemp -d /tmp/tirl-gpu-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MODEL=${1:-$WORK/qwen2-58m}

echo "== machine"
"$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__); print('device:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')"
if [ "$DEVICE" = cuda ]; then
  "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible: this script is for a GPU machine (DEVICE=cpu dry-runs it)')"
fi

if [ ! -f "$MODEL/config.json" ]; then
  echo "== tirl model init"
  "$PYTHON" -m tirl.cli model init --arch qwen2 --layers 8 --hidden 768 --vocab 8192 --out "$MODEL"
fi

echo "== one training step on $DEVICE per memory option (batch $BATCH x $SEQ tokens)"
DEVICE=$DEVICE BATCH=$BATCH SEQ=$SEQ MODEL=$MODEL "$PYTHON" - <<'EOF'
import os, time, torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging
from tirl.config import AlgoConfig
from tirl.models.memory import LoraSpec, apply_lora, enable_checkpointing, trainable_parameters
from tirl.trainer.update import PolicyUpdater
from tirl.types import Message, Role, Trajectory

hf_logging.disable_progress_bar()
dev = torch.device(os.environ["DEVICE"])
batch, seq = int(os.environ["BATCH"]), int(os.environ["SEQ"])
options = {"fp32": {}, "bf16": {"p": "bf16"}, "checkpointing": {"c": 1}, "bf16+checkpointing": {"p": "bf16", "c": 1},
           "lora": {"l": 1}, "lora+bf16+checkpointing": {"l": 1, "p": "bf16", "c": 1}}
for name, o in options.items():
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    model = AutoModelForCausalLM.from_pretrained(os.environ["MODEL"]).to(dev)
    if o.get("l"):
        model = apply_lora(model, LoraSpec())
    if o.get("c"):
        enable_checkpointing(model)
    g = torch.Generator().manual_seed(0)
    trajs = [Trajectory(id=str(i), messages=[Message(role=Role.USER, content="")],
                        token_ids=torch.randint(3, model.config.vocab_size, (seq,), generator=g).tolist(),
                        loss_mask=[0] * 64 + [1] * (seq - 64), logprobs=[0.0] * 64 + [-9.0] * (seq - 64))
             for i in range(batch)]
    adv = torch.linspace(-1.0, 1.5, batch)
    opt = torch.optim.AdamW(trainable_parameters(model), lr=1e-5)
    up = PolicyUpdater(model, opt, AlgoConfig(minibatches=1, micro_batch_tokens=0, warmup_steps=0), pad_id=0,
                       precision=o.get("p", "off"))
    if dev.type == "cuda":
        torch.cuda.synchronize(); base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(3):  # the first allocates Adam state and warms the kernels
        t0 = time.perf_counter()
        stats = up.update(trajs, adv, seed=step)  # batches are collated on the CPU and moved to the model
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        assert stats.steps == 1, f"{name}: the update was skipped"
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if dev.type == "cuda" else float("nan")
    best = min(times[1:])
    print(f"{name:<26} {batch * seq / best:>10.0f} train tokens/s   peak above the loaded model {peak:>8.0f} MiB   "
          f"loss {stats.losses[-1]:+.4f}")
    del model, opt, up
EOF

echo "== tirl train --model DIR on $DEVICE (one step, HF generator)"
"$PYTHON" -m tirl.cli train --model "$MODEL" --steps 1 --no-progress --run-dir "$WORK/run" \
  --set model.device="$DEVICE" --set trainer.prompts_per_step=4 --set algo.group_size=4 \
  --set env.eval_size=8 --set generation.max_new_tokens=64 --set generation.max_total_tokens=1024 | tail -5

if [ "$DEVICE" != cuda ] || ! "$PYTHON" -c "import vllm" 2>/dev/null; then
  echo "== vLLM: not installed (or DEVICE=cpu); skipped"
  exit 0
fi

echo "== vLLM generation with weight sync"
MODEL=$MODEL "$PYTHON" - <<'EOF'
import asyncio, os, time, torch
from transformers import AutoModelForCausalLM
from tirl.inference.base import SamplingParams
from tirl.inference.vllm import VLLMGenerator
from tirl.models.loading import load_policy
from tirl.types import Message, Role

path = os.environ["MODEL"]
policy = load_policy(path)
gen = VLLMGenerator(path, eos_ids=policy.chat.eos_ids, seed=0, max_model_len=2048, gpu_memory_utilization=0.3)
prompts = [policy.chat.prompt_ids([Message(role=Role.USER, content=f"What is {i} + {i}?")]) for i in range(256)]

async def run(params):
    t0 = time.perf_counter()
    res = await asyncio.gather(*(gen.generate(p, params) for p in prompts))
    dt = time.perf_counter() - t0
    n = sum(len(r.token_ids) for r in res)
    return res, n / dt

async def main():
    params = SamplingParams(max_new_tokens=128, temperature=1.0)
    _, tps = await run(params)
    print(f"vLLM sampling: {len(prompts)} prompts x <=128 tokens: {tps:,.0f} generated tokens/s")
    greedy = SamplingParams(max_new_tokens=32, temperature=0.0)
    before, _ = await run(greedy)
    trained = AutoModelForCausalLM.from_pretrained(path).to("cuda")
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.02)  # stands in for an update: any change must reach the engine
    t0 = time.perf_counter()
    gen.update_weights(trained, 1)
    print(f"weight sync: {time.perf_counter() - t0:.2f} s; policy_version {before[0].policy_version} -> 1")
    after, tps2 = await run(greedy)
    changed = sum(a.token_ids != b.token_ids for a, b in zip(after, before))
    print(f"after sync: {changed}/{len(prompts)} greedy outputs changed; versions {sorted({r.policy_version for r in after})}; {tps2:,.0f} tokens/s")
    assert changed > 0 and all(r.policy_version == 1 for r in after), "the weight sync did not reach vLLM"
    await gen.close()

asyncio.run(main())
EOF
echo "== done"
