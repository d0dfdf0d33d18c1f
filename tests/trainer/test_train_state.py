"""The checkpoint's training state without pickle: RNG states in rng.json, the optimiser in safetensors + JSON.

Round trips are exact (the same draws after a restore, the same optimiser tensors and group values, tuples
kept), and every damaged file is a :class:`DamagedState` naming it, never a crash later in training.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from tirl.errors import InputError
from tirl.trainer.train_state import (
    OPTIMIZER_JSON,
    OPTIMIZER_TENSORS,
    RNG_JSON,
    DamagedState,
    RngState,
    read_training_state,
    write_training_state,
)


def _draws() -> tuple[float, float, float, float]:
    return random.random(), random.gauss(0, 1), float(np.random.rand()), float(torch.rand(1))


def _trained_optimizer(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.95))
    for _ in range(2):
        model(torch.randn(5, 4)).square().sum().backward()
        opt.step()
    return model, opt


def _saved(tmp_path: Path) -> Path:
    _, opt = _trained_optimizer()
    write_training_state(opt, RngState.capture(), tmp_path)
    return tmp_path


def test_rng_round_trip_through_json_gives_the_same_draws(tmp_path: Path) -> None:
    random.seed(1)
    random.gauss(0, 1)  # leaves a cached gaussian in Python's state
    np.random.seed(2)
    np.random.randn()  # and in NumPy's
    torch.manual_seed(3)
    state = RngState.capture()
    expected = _draws()
    (tmp_path / RNG_JSON).write_text(json.dumps(state.to_json()))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    RngState.from_json(json.loads((tmp_path / RNG_JSON).read_text())).restore()
    assert _draws() == expected


def test_optimizer_round_trip_is_exact_and_keeps_tuples(tmp_path: Path) -> None:
    model, opt = _trained_optimizer()
    write_training_state(opt, RngState.capture(), tmp_path)
    fresh = torch.optim.AdamW(model.parameters(), lr=0.5)
    read_training_state(tmp_path).load_into(fresh)
    a, b = opt.state_dict(), fresh.state_dict()
    assert a["param_groups"] == b["param_groups"] and b["param_groups"][0]["betas"] == (0.8, 0.95)
    for pid, entry in a["state"].items():
        for name, value in entry.items():
            assert torch.equal(value, b["state"][pid][name]), (pid, name)


def test_no_pickle_file_is_written(tmp_path: Path) -> None:
    _saved(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([OPTIMIZER_JSON, OPTIMIZER_TENSORS, RNG_JSON])


def _edit_rng(path: Path, section: str, key: str | None, value: object) -> None:
    doc = json.loads((path / RNG_JSON).read_text())
    if key is None:
        doc[section] = value
    else:
        doc[section][key] = value
    (path / RNG_JSON).write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("section", "key", "value", "needle"),
    [
        ("python", "state", [1, 2, 3], "python.state"),
        ("python", "state", [2**32] * 625, "python.state"),
        ("python", "version", 2, "python.version"),
        ("python", "gauss_next", "x", "gauss_next"),
        ("numpy", "key", [-1] * 624, "numpy.key"),
        ("numpy", "pos", 10**6, "numpy.pos"),
        ("numpy", "bit_generator", "PCG64", "bit_generator"),
        ("torch", None, "not base64!", "base64"),
        ("torch", None, "AAAA", "bytes"),
        ("python", None, [1], "python is missing"),
    ],
)
def test_a_damaged_rng_json_is_named(tmp_path: Path, section: str, key: str | None, value: object, needle: str) -> None:
    _edit_rng(_saved(tmp_path), section, key, value)
    with pytest.raises(DamagedState, match=needle):
        read_training_state(tmp_path)


@pytest.mark.parametrize("damage", ["truncate-tensors", "missing-tensor", "not-json", "bad-group", "bad-state-key"])
def test_a_damaged_optimizer_state_is_named(tmp_path: Path, damage: str) -> None:
    _saved(tmp_path)
    doc = json.loads((tmp_path / OPTIMIZER_JSON).read_text())
    if damage == "truncate-tensors":
        data = (tmp_path / OPTIMIZER_TENSORS).read_bytes()
        (tmp_path / OPTIMIZER_TENSORS).write_bytes(data[: len(data) // 2])
    elif damage == "missing-tensor":
        doc["state"]["0"]["exp_avg"] = {"tensor": "no.such.key"}
    elif damage == "bad-group":
        doc["param_groups"][0]["params"] = "all"
    elif damage == "bad-state-key":
        doc["state"]["../x"] = {}
    if damage == "not-json":
        (tmp_path / OPTIMIZER_JSON).write_text("{")
    elif damage != "truncate-tensors":
        (tmp_path / OPTIMIZER_JSON).write_text(json.dumps(doc))
    with pytest.raises(DamagedState, match="optimizer"):
        read_training_state(tmp_path)


def test_optimizer_state_of_another_model_is_one_input_error(tmp_path: Path) -> None:
    _saved(tmp_path)
    other = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Linear(5, 2))  # same count, other shapes
    with pytest.raises(InputError, match="shape"):
        read_training_state(tmp_path).load_into(torch.optim.AdamW(other.parameters()))


def test_a_legacy_pickle_checkpoint_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "rng.pt").write_bytes(b"\x80\x04not read")
    (tmp_path / "optimizer.pt").write_bytes(b"\x80\x04not read")
    with pytest.raises(DamagedState, match="pickle"):
        read_training_state(tmp_path)


def test_an_oversized_rng_json_is_refused_unread(tmp_path: Path) -> None:
    _saved(tmp_path)
    with (tmp_path / RNG_JSON).open("a") as fh:
        fh.write(" " * 2**20)
    with pytest.raises(DamagedState, match="larger than"):
        read_training_state(tmp_path)


class FakeCuda:
    """The GPU edge of ``torch.cuda`` for a machine without one: ``devices`` generators of 16 bytes each (the size
    of a CUDA Philox state). A mock, because no GPU is here: it stands in for the driver calls only; what tirl does
    with the states (capture, JSON, checks, restore per device) is the real code."""

    def __init__(self, devices: int) -> None:
        self.devices = devices
        self.states = {d: torch.full((16,), d + 1, dtype=torch.uint8) for d in range(devices)}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: self.devices)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [self.states[d] for d in range(self.devices)])
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=0: self.states[int(device)])
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.set_rng_state)

    def set_rng_state(self, state: torch.Tensor, device: int = 0) -> None:
        assert 0 <= device < self.devices and state.dtype == torch.uint8
        self.states[device] = state.clone()


def test_cuda_generators_of_every_device_are_saved_and_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--resume`` on a GPU was not exact: rng.json held no CUDA state. Mock at the GPU edge (:class:`FakeCuda`)."""
    gpu = FakeCuda(2)
    gpu.install(monkeypatch)
    saved = {d: s.clone() for d, s in gpu.states.items()}
    doc = json.loads(json.dumps(RngState.capture().to_json()))
    assert len(doc["cuda"]) == 2 and doc["mps"] is None
    gpu.states = {0: torch.zeros(16, dtype=torch.uint8), 1: torch.zeros(16, dtype=torch.uint8)}  # training drew
    RngState.from_json(doc).restore()
    assert all(torch.equal(gpu.states[d], saved[d]) for d in (0, 1))

    one = FakeCuda(1)  # resumed with fewer devices: the ones it has are restored
    one.install(monkeypatch)
    one.states[0] = torch.zeros(16, dtype=torch.uint8)
    RngState.from_json(doc).restore()
    assert torch.equal(one.states[0], saved[0])

    doc["cuda"][1] = doc["cuda"][1][:8]  # 6 bytes: not this device's generator
    with pytest.raises(DamagedState, match=r"cuda\[1\] holds 6 bytes, the generator has 16"):
        RngState.from_json(doc)
    for bad in ("AAAA", 5):
        with pytest.raises(DamagedState, match="cuda"):
            RngState.from_json({**doc, "cuda": bad})


def test_checkpoints_move_between_cpu_and_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU-written rng.json resumes on this CPU (its CUDA states unused, the CPU draws exact); a CPU-written one
    (``"cuda": []``) and one from before the field resume on a (mocked: :class:`FakeCuda`) GPU without touching
    its generators."""
    torch.manual_seed(3)
    cpu_doc = RngState.capture().to_json()
    assert cpu_doc["cuda"] == [] and cpu_doc["mps"] is None  # this machine has no accelerator
    expected = _draws()
    gpu_doc = {**cpu_doc, "cuda": [base64.b64encode(bytes(range(16))).decode()] * 2}
    torch.manual_seed(9)
    state = RngState.from_json(gpu_doc)
    state.restore()
    assert _draws() == expected and len(state.cuda) == 2

    gpu = FakeCuda(2)
    gpu.install(monkeypatch)
    before = {d: s.clone() for d, s in gpu.states.items()}
    old_doc = {k: v for k, v in cpu_doc.items() if k not in ("cuda", "mps")}
    for doc in (cpu_doc, old_doc):
        RngState.from_json(doc).restore()
        assert all(torch.equal(gpu.states[d], before[d]) for d in (0, 1))
