"""One rank of the data-parallel equivalence test (run as a script by test_distributed.py)."""

from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from tirl.config import AlgoConfig
from tirl.distributed.ddp import DDPSync, receive_step, send_stop, sync_state
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.trainer.update import GradSync, LocalSync, PolicyUpdater
from tirl.types import Trajectory

SPEC = TinyModelSpec(hidden_size=32, layers=1, heads=2, kv_heads=2, intermediate_size=64, max_positions=128)
ALGO = AlgoConfig(minibatches=2, epochs=2, micro_batch_tokens=64)


def batch(n: int = 12, seed: int = 3) -> tuple[list[Trajectory], torch.Tensor]:
    """``n`` trajectories of uneven lengths with sampled tokens and generator log-probs; their advantages."""
    g = torch.Generator().manual_seed(seed)
    trajs = []
    for i in range(n):
        length = int(torch.randint(8, 40, (1,), generator=g))
        ids = torch.randint(3, 60, (length,), generator=g).tolist()
        prompt = 4
        mask = [0] * prompt + [1] * (length - prompt)
        lps = [0.0] * prompt + (-torch.rand(length - prompt, generator=g) * 4).tolist()
        trajs.append(
            Trajectory(id=f"t{i}", messages=[], token_ids=ids, loss_mask=mask, logprobs=lps, prompt_len=prompt)
        )
    return trajs, torch.randn(n, generator=g)


def run(rank: int, world: int, port: int, out: str, n: int = 12) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, _ = build_tiny_model(SPEC, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    sync: GradSync = LocalSync() if world == 1 else DDPSync(rank=rank, world_size=world)
    upd = PolicyUpdater(model=model, optimizer=opt, algo=ALGO, pad_id=0, sync=sync)
    trajs, adv = batch(n)  # n=3: mini-batches of 2 rows and 1 row, so rank 1 of 2 has an empty share
    if world == 1:
        stats = [upd.update(trajs, adv, seed=11), upd.update(trajs, adv, seed=12)]
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=120))  # fmt: skip
        cpu = torch.device("cpu")
        sync_state(model, opt, rank, cpu)
        if rank == 0:
            stats = [upd.update(trajs, adv, seed=11), upd.update(trajs, adv, seed=12)]
            send_stop(cpu)
        else:
            while (step := receive_step(cpu)) is not None:
                upd.update(step.trajs, step.advantages, seed=step.seed)
            stats = []
        assert isinstance(sync, DDPSync)
        sync.release()
        dist.destroy_process_group()
    rows = [(s.losses, s.grad_norms, s.metrics()) for s in stats]
    torch.save({"params": dict(model.named_parameters()), "stats": rows}, out)


if __name__ == "__main__":
    run(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], *(int(a) for a in sys.argv[5:6]))
