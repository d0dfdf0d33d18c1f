"""nccl ranks on their own GPUs, checked on the CPU with a fake device map.

No GPU here: ``torch.cuda.set_device``/``current_device`` are replaced by a fake that records the current
device, and the process-group calls (``init_process_group``, ``broadcast``, ``broadcast_object_list``) by
recorders — the real ones need CUDA and a second process. What runs for real: the follower's start-up
(:func:`tirl.distributed.follower.run`), rank 0's :class:`~tirl.distributed.launch.LocalRanks` and
:class:`~tirl.distributed.ray_ranks.RayTrainRanks`, :func:`~tirl.distributed.ddp.sync_state` and the learner
factory. Each rank must (1) make ``cuda:LOCAL_RANK`` current before it joins the group, (2) load its policy
and reference model there, and (3) stage every object collective on that device (nccl puts the pickled
bytes on the device it is given, else on the current one; a rank that never set its device used cuda:0 and
hung or failed against the others). Not covered: real nccl collectives (a GPU test).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from tirl.config import load_config
from tirl.distributed import follower, launch, ray_ranks
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.trainer.learner import build_learner

SPEC = TinyModelSpec(hidden_size=16, layers=1, heads=2, kv_heads=2, intermediate_size=32, max_positions=64)


class FakeCuda:
    """The current CUDA device of this process, and a log of what happened on which device, in order."""

    def __init__(self) -> None:
        self.current: int | None = None
        self.log: list[tuple[str, Any]] = []

    def set_device(self, device: Any) -> None:
        self.current = torch.device(device).index if not isinstance(device, int) else device
        self.log.append(("set_device", f"cuda:{self.current}"))

    def current_device(self) -> int:
        assert self.current is not None, "a collective ran before any torch.cuda.set_device"
        return self.current


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    monkeypatch.setattr(torch.cuda, "set_device", fake.set_device)
    monkeypatch.setattr(torch.cuda, "current_device", fake.current_device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    return fake


class Policy:
    def __init__(self) -> None:
        self.model, self.tokenizer = build_tiny_model(SPEC, seed=0)


def cfg_on_cuda() -> Any:
    return load_config(None, ["model.device=cuda", "algo.kl_coef=0.1", "trainer.threads=1"])


def record_collectives(monkeypatch: pytest.MonkeyPatch, fake: FakeCuda, replies: list[Any]) -> None:
    """``dist`` calls recorded with the device they name; a receiving object collective gets ``replies``."""

    def join(backend: str, addr: str, port: int, rank: int, world_size: int) -> None:
        fake.log.append(("join", (backend, rank, f"cuda:{fake.current}")))

    def broadcast(t: torch.Tensor, src: int) -> None:
        fake.log.append(("broadcast", f"cuda:{fake.current_device()}"))  # a tensor collective: the current device

    def broadcast_object_list(objs: list[Any], src: int = 0, group: Any = None, device: Any = None) -> None:
        fake.log.append(("broadcast_object_list", str(device) if device is not None else None))
        if objs[0] is None and replies:
            objs[0] = replies.pop(0)

    monkeypatch.setattr(follower, "join_group", join)
    monkeypatch.setattr(launch, "join_group", join)
    monkeypatch.setattr(dist, "broadcast", broadcast)
    monkeypatch.setattr(dist, "broadcast_object_list", broadcast_object_list)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: None)


@pytest.mark.parametrize(("rank", "local"), [(1, 1), (3, 3), (6, 2)], ids=["r1", "r3", "r6-on-node-2"])
def test_a_follower_binds_cuda_local_rank_before_joining_and_stages_objects_there(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, rank: int, local: int
) -> None:
    """Global rank 6 with LOCAL_RANK=2 (second node of 4 GPUs) uses cuda:2: there is no cuda:6 on its node."""
    cfg = cfg_on_cuda()
    monkeypatch.setenv("LOCAL_RANK", str(local))
    loads: list[str] = []

    def load_policy(c: Any, path: Any, device: str) -> Policy:
        loads.append(f"policy {device}")
        return Policy()

    def load_reference(c: Any, device: str) -> Any:
        loads.append(f"reference {device}")
        return build_tiny_model(SPEC, seed=0)[0].requires_grad_(False)

    monkeypatch.setattr(follower, "load_training_policy", load_policy)
    monkeypatch.setattr(follower, "load_reference", load_reference)
    p = Policy()
    rank0_state = build_learner(cfg, p.model, p.tokenizer).optimizer.state_dict()
    record_collectives(monkeypatch, cuda, [rank0_state, None])  # sync_state's optimiser state, then "stop"
    assert follower.run(cfg, rank, 8, "127.0.0.1", 1, None) == 0
    me = f"cuda:{local}"
    kinds = [k for k, _ in cuda.log]
    assert cuda.log[0] == ("set_device", me)  # first of all, before the group exists
    assert cuda.log[kinds.index("join")] == ("join", ("nccl", rank, me))
    assert loads == [f"policy {me}", f"reference {me}"]
    objects = [d for k, d in cuda.log if k == "broadcast_object_list"]
    assert objects == [me, me]  # the optimiser state and the stop message
    assert {d for k, d in cuda.log if k == "broadcast"} == {me}


def test_rank_0_binds_cuda_0_before_joining_and_shares_state_from_there(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    cfg = cfg_on_cuda()
    record_collectives(monkeypatch, cuda, [])
    ranks = launch.LocalRanks(nproc=2, port=1, backend="nccl", run_dir=tmp_path)
    sync = ranks.start("cuda")
    assert cuda.log[:2] == [("set_device", "cuda:0"), ("join", ("nccl", 0, "cuda:0"))]
    assert (sync.rank, sync.world_size) == (0, 2)
    p = Policy()
    ranks.share_state(build_learner(cfg, p.model, p.tokenizer, sync=sync))
    assert [d for k, d in cuda.log if k == "broadcast_object_list"] == ["cuda:0"]
    ranks.sync = None  # nothing to close: the group is fake


def test_rank_0_in_a_ray_train_worker_binds_its_local_rank(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "0")  # Ray Train sets it; the group is Ray Train's (formed before)
    record_collectives(monkeypatch, cuda, [])
    ranks = ray_ranks.RayTrainRanks(world_size=4, backend="nccl")
    ranks.start("cuda")
    ranks.shared = True  # as after share_state: the followers wait for steps, so close sends "stop"
    ranks.close()
    assert cuda.log == [("set_device", "cuda:0"), ("broadcast_object_list", "cuda:0")]  # bind, then "stop"


def test_gloo_ranks_never_touch_cuda(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    record_collectives(monkeypatch, cuda, [])
    ranks = launch.LocalRanks(nproc=2, port=1, backend="gloo", run_dir=tmp_path)
    ranks.start("cpu")
    assert cuda.log == [("join", ("gloo", 0, "cuda:None"))]
    ranks.sync = None
