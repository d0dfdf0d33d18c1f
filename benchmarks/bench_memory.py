"""Peak memory of one policy update under each memory option (bf16 autocast, gradient checkpointing, LoRA).

Each option runs in its own fresh Python process (interpreter: this one): load the model, build the
trajectories, read the resident set (the baseline), reset the kernel's peak counter
(``/proc/self/clear_refs``), run ``--steps`` real :class:`~tirl.trainer.update.PolicyUpdater` updates
(one mini-batch, one micro-batch: the whole batch in one forward/backward, Adam state included), and
read the peak resident set (``VmHWM``). Reported: peak minus that process's own baseline, in MiB, and the
seconds per update; every option has the same model, batch and steps. The table prints the range over
``--repeats`` runs and the ratio of each option's median to the fp32 median. CPU only (resident memory);
on a GPU use benchmarks/gpu_check.sh.

Model (~58M parameters):
    tirl model init --arch qwen2 --layers 8 --hidden 768 --vocab 8192 --out /tmp/tirl-m58
    python benchmarks/bench_memory.py --model /tmp/tirl-m58
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling peak_rss module

from peak_rss import PeakRss

OPTIONS = {
    "fp32": {},
    "bf16": {"precision": "bf16"},
    "checkpointing": {"checkpointing": True},
    "bf16+checkpointing": {"precision": "bf16", "checkpointing": True},
    "lora": {"lora": True},
    "lora+bf16+checkpointing": {"lora": True, "precision": "bf16", "checkpointing": True},
}


def worker(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from tirl.config import AlgoConfig
    from tirl.models.memory import LoraSpec, apply_lora, enable_checkpointing, trainable_parameters
    from tirl.trainer.update import PolicyUpdater
    from tirl.types import Message, Role, Trajectory

    torch.set_num_threads(args.threads)
    opt = OPTIONS[args.worker]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    if opt.get("lora"):
        model = apply_lora(model, LoraSpec(rank=16, alpha=32))
    if opt.get("checkpointing"):
        enable_checkpointing(model)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    trajs = []
    for i in range(args.batch):
        ids = torch.randint(3, vocab, (args.seq,), generator=g).tolist()
        mask = [0] * 32 + [1] * (args.seq - 32)
        lps = [0.0] * 32 + [-9.0] * (args.seq - 32)
        trajs.append(
            Trajectory(
                id=str(i), messages=[Message(role=Role.USER, content="")], token_ids=ids, loss_mask=mask, logprobs=lps
            )
        )
    advantages = torch.tensor([1.0 if i % 2 else -1.0 for i in range(args.batch)])
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=1e-5)
    algo = AlgoConfig(minibatches=1, micro_batch_tokens=0, warmup_steps=0)
    updater = PolicyUpdater(model, optimizer, algo, pad_id=0, precision=opt.get("precision", "off"))
    memory = PeakRss()
    baseline = memory.start()  # resets VmHWM to the current resident set
    if baseline is None:
        raise SystemExit("error: bench_memory needs Linux /proc/self/{clear_refs,status}")
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        stats = updater.update(trajs, advantages, seed=step)
        times.append(time.perf_counter() - t0)
        assert stats.steps == 1, "the update was skipped"
    params = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in trainable_parameters(model))
    print(
        json.dumps(
            {
                "option": args.worker,
                "baseline_mib": baseline,
                "peak_above_mib": memory.above_mb(),
                "step_s": min(times),
                "params": params,
                "trained": trained,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a model directory (see the docstring for the command)")
    ap.add_argument("--batch", type=int, default=4, help="trajectories per update")
    ap.add_argument("--seq", type=int, default=512, help="tokens per trajectory")
    ap.add_argument("--steps", type=int, default=2, help="updates per run (the first allocates Adam state)")
    ap.add_argument("--repeats", type=int, default=2, help="fresh processes per option")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--options", default=",".join(OPTIONS), help="comma-separated subset of " + ", ".join(OPTIONS))
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    names = [o for o in args.options.split(",") if o]
    runs: dict[str, list[dict[str, float]]] = {o: [] for o in names}
    print(f"interpreter: {sys.executable}; load before: {Path('/proc/loadavg').read_text().strip()}")
    for _ in range(args.repeats):
        for name in names:  # interleaved, so that load changes hit every option alike
            cmd = [sys.executable, __file__, "--model", args.model, "--worker", name]
            cmd += ["--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps)]
            cmd += ["--threads", str(args.threads)]
            env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = runs[names[0]][0]
    print(
        f"model {args.model}: {first['params'] / 1e6:.1f}M parameters; batch {args.batch} x {args.seq} tokens; "
        f"{args.steps} updates per run; {args.repeats} runs per option; {args.threads} thread(s)"
    )
    base = statistics.median(r["peak_above_mib"] for r in runs[names[0]])
    print(f"{'option':<26} {'trained':>10} {'peak above baseline MiB':>24} {'vs ' + names[0]:>8} {'s/update':>14}")
    for name in names:
        mem = [r["peak_above_mib"] for r in runs[name]]
        sec = [r["step_s"] for r in runs[name]]
        print(
            f"{name:<26} {runs[name][0]['trained'] / 1e6:>9.2f}M {min(mem):>11.0f} - {max(mem):<10.0f} "
            f"{statistics.median(mem) / base:>8.2f} {min(sec):>6.1f} - {max(sec):<6.1f}"
        )
    print(f"load after: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
