"""The checkpoint's training state without pickle: RNG states in rng.json, the optimiser in safetensors + JSON.

Round trips are exact (the same draws after a restore, the same optimiser tensors and group values, tuples
kept), and every damaged file is a :class:`DamagedState` naming it, never a crash later in training.
"""

from __future__ import annotations

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
