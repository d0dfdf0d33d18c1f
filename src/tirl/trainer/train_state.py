"""The optimiser and RNG state of a checkpoint, in formats that cannot run code: safetensors and JSON.

A checkpoint is a file a user hands tirl (``tirl train --resume RUN_DIR``), so
nothing in it is unpickled. The training state is three files:

    optimizer.safetensors   every tensor of ``optimizer.state_dict()["state"]`` (key ``state.<param>.<name>``)
    optimizer.json          the structure: {"param_groups": [...], "state": {"<param>": {"<name>": {"tensor": key}
                            | number | bool | null}}}
    rng.json                {"python": {"version", "state", "gauss_next"}, "numpy": {"bit_generator", "key",
                            "pos", "has_gauss", "cached_gaussian"}, "torch": base64 of the CPU generator state,
                            "cuda": [base64 of each CUDA device's generator state], "mps": base64 or null}

:func:`read_training_state` parses and checks all three (types, ranges,
lengths, every tensor a key names) and raises :class:`DamagedState` naming
the file and the problem, so a damaged checkpoint is skipped or refused before
anything is restored; :meth:`TrainingState.load_into` checks each saved
tensor against its parameter's shape before the optimiser gets it.

The CUDA generators (every visible device, ``torch.cuda.get_rng_state_all``) are saved when CUDA is
available, and MPS's when torch has it; a resume restores those of the devices it has. A checkpoint written
on CPU (``"cuda": []``) or before these were saved (no ``cuda`` key) resumes on a GPU with the CUDA
generators as the run's start seeded them; one written on a GPU resumes on CPU with its CUDA states unused;
with fewer devices than were saved, the first ones are restored, with more, the extra ones keep their seed.

Not covered: optimisers whose state holds
values other than tensors and JSON scalars, and param-group values other
than JSON scalars and flat lists (tuples come back as tuples where the live
optimiser has a tuple).
"""

from __future__ import annotations

import base64
import binascii
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from tirl.errors import InputError
from tirl.jsonl import JSONProblem, parse_json

OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_JSON = "optimizer.json"
RNG_JSON = "rng.json"
FILES = (OPTIMIZER_TENSORS, OPTIMIZER_JSON, RNG_JSON)
LEGACY_FILES = ("optimizer.pt", "rng.pt")  # tirl before issue 22: pickles, never loaded again

_MT_WORDS = 624  # Mersenne Twister state words (Python's random and NumPy's legacy generator)
_U32 = 2**32


class DamagedState(ValueError):
    """A training-state file that cannot be restored; ``str()`` names the file and the problem."""


@dataclass(frozen=True, slots=True)
class RngState:
    """The global generators of Python, NumPy and torch (CPU) at one moment."""

    python: tuple[Any, ...]  # random.getstate(): (version, 625 words, gauss_next)
    numpy: tuple[Any, ...]  # np.random.get_state(): ("MT19937", uint32[624], pos, has_gauss, cached_gaussian)
    torch: torch.Tensor  # torch.get_rng_state(): uint8[N]
    cuda: tuple[Tensor, ...] = ()  # torch.cuda.get_rng_state_all(): uint8[M] per device; () without CUDA
    mps: Tensor | None = None  # torch.mps.get_rng_state() where MPS is available

    @classmethod
    def capture(cls) -> RngState:
        """The current states (the accelerators' where they are available)."""
        numpy_state = np.random.get_state(legacy=True)  # the tuple form (a dict only for non-legacy generators)
        cuda = tuple(t.clone() for t in torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else ()
        mps = torch.mps.get_rng_state() if _mps_available() else None
        return cls(python=random.getstate(), numpy=tuple(numpy_state), torch=torch.get_rng_state(), cuda=cuda, mps=mps)

    def restore(self) -> None:
        """Set every global generator to this state (the accelerators' that this process has: module docstring)."""
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch)
        if self.cuda and torch.cuda.is_available():
            for device, state in enumerate(self.cuda[: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(state, device)
        if self.mps is not None and _mps_available():
            torch.mps.set_rng_state(self.mps)

    def to_json(self) -> dict[str, Any]:
        """The ``rng.json`` object."""
        version, words, gauss = self.python
        name, key, pos, has_gauss, cached = self.numpy
        return {
            "python": {"version": int(version), "state": [int(w) for w in words], "gauss_next": gauss},
            "numpy": {
                "bit_generator": str(name),
                "key": [int(w) for w in np.asarray(key, dtype=np.uint32)],
                "pos": int(pos),
                "has_gauss": int(has_gauss),
                "cached_gaussian": float(cached),
            },
            "torch": _b64(self.torch),
            "cuda": [_b64(t) for t in self.cuda],
            "mps": None if self.mps is None else _b64(self.mps),
        }

    @classmethod
    def from_json(cls, obj: Any) -> RngState:
        """Check and convert an ``rng.json`` object; :class:`DamagedState` names what is wrong."""
        py = _section(obj, "python", RNG_JSON)
        words = _words(py.get("state"), _MT_WORDS + 1, "python.state")
        if not 0 <= words[-1] <= _MT_WORDS:
            raise DamagedState(f"{RNG_JSON}: python.state's position {words[-1]} is not in 0..{_MT_WORDS}")
        if py.get("version") != 3:
            raise DamagedState(f"{RNG_JSON}: python.version is {py.get('version')!r}, not 3")
        gauss = py.get("gauss_next")
        if gauss is not None and not _is_float(gauss):
            raise DamagedState(f"{RNG_JSON}: python.gauss_next is {gauss!r}, not a number or null")
        nps = _section(obj, "numpy", RNG_JSON)
        if nps.get("bit_generator") != "MT19937":
            raise DamagedState(f"{RNG_JSON}: numpy.bit_generator is {nps.get('bit_generator')!r}, not 'MT19937'")
        key = _words(nps.get("key"), _MT_WORDS, "numpy.key")
        pos: Any = nps.get("pos")
        has_gauss: Any = nps.get("has_gauss")
        cached: Any = nps.get("cached_gaussian")
        if not (_is_int(pos) and 0 <= pos <= _MT_WORDS) or has_gauss not in (0, 1) or not _is_float(cached):
            raise DamagedState(f"{RNG_JSON}: numpy.pos, has_gauss or cached_gaussian is out of range")
        cuda = obj.get("cuda")
        cuda = [] if cuda is None else cuda  # absent: written before the CUDA states were saved
        if not isinstance(cuda, list):
            raise DamagedState(f"{RNG_JSON}: cuda is not a list (one base64 state per CUDA device)")
        cuda_size = torch.cuda.get_rng_state(0).numel() if cuda and torch.cuda.is_available() else None
        mps = obj.get("mps")
        return cls(
            python=(3, tuple(words), None if gauss is None else float(gauss)),
            numpy=("MT19937", np.array(key, dtype=np.uint32), pos, has_gauss, float(cached)),
            torch=_generator_state(obj.get("torch"), "torch", torch.get_rng_state().numel()),
            cuda=tuple(_generator_state(raw, f"cuda[{i}]", cuda_size) for i, raw in enumerate(cuda)),
            mps=None if mps is None else _generator_state(mps, "mps", _mps_size()),
        )


def _mps_available() -> bool:
    """Whether this torch has MPS (Apple GPUs) and it can be used here."""
    backend = getattr(torch.backends, "mps", None)
    return hasattr(torch, "mps") and backend is not None and backend.is_available()


def _mps_size() -> int | None:
    return torch.mps.get_rng_state().numel() if _mps_available() else None


def _b64(state: torch.Tensor) -> str:
    return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")


def _generator_state(raw: Any, name: str, size: int | None) -> torch.Tensor:
    """A generator state from its base64 text in ``rng.json``; DamagedState names ``name`` when it is not one.

    ``size``: the bytes this process's generator has (``None``: the device is not here, so any length is kept:
    the state is not restored).
    """
    try:
        data = base64.b64decode(raw if isinstance(raw, str) else "!", validate=True)
    except (binascii.Error, ValueError):
        raise DamagedState(f"{RNG_JSON}: {name} is not base64 text") from None
    if size is not None and len(data) != size:
        raise DamagedState(f"{RNG_JSON}: {name} holds {len(data)} bytes, the generator has {size}")
    if not data:
        raise DamagedState(f"{RNG_JSON}: {name} is empty")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_float(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _section(obj: Any, name: str, file: str) -> dict[str, Any]:
    value = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(value, dict):
        raise DamagedState(f"{file}: {name} is missing or not an object")
    return value


def _words(value: Any, n: int, name: str) -> list[int]:
    if not (isinstance(value, list) and len(value) == n and all(_is_int(w) and 0 <= w < _U32 for w in value)):
        raise DamagedState(f"{RNG_JSON}: {name} is not a list of {n} unsigned 32-bit integers")
    return value


# ------------------------------------------------------------------ optimizer
_SCALARS = (bool, int, float, str, type(None))


def _plain(value: Any, where: str) -> Any:
    """A param-group value as JSON (a scalar or a flat list of scalars)."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, _SCALARS) for v in value):
        return list(value)
    raise TypeError(f"optimizer {where} holds a {type(value).__name__}, which a checkpoint cannot store")


def write_optimizer_state(optimizer: torch.optim.Optimizer, out: Path) -> None:
    """Write ``optimizer.safetensors`` and ``optimizer.json`` into the directory ``out``."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    state: dict[str, dict[str, Any]] = {}
    for pid, entry in sd["state"].items():
        row: dict[str, Any] = {}
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                key = f"state.{pid}.{name}"
                tensors[key] = value.detach().to("cpu").contiguous()
                row[name] = {"tensor": key}
            else:
                row[name] = _plain(value, f"state {pid}.{name}")
        state[str(pid)] = row
    groups = [{k: _plain(v, f"param group {k}") for k, v in g.items()} for g in sd["param_groups"]]
    save_file(tensors, str(out / OPTIMIZER_TENSORS))
    (out / OPTIMIZER_JSON).write_text(json.dumps({"param_groups": groups, "state": state}), encoding="utf-8")


def write_training_state(optimizer: torch.optim.Optimizer, rng: RngState, out: Path) -> None:
    """Write every file of :data:`FILES` into the directory ``out``."""
    write_optimizer_state(optimizer, out)
    (out / RNG_JSON).write_text(json.dumps(rng.to_json()), encoding="utf-8")


@dataclass(frozen=True, slots=True)
class TrainingState:
    """What a checkpoint holds besides the model: the optimiser's state dict and the RNG states."""

    optimizer: dict[str, Any]  # torch.optim.Optimizer.state_dict() shape, tensors on CPU
    rng: RngState
    where: Path  # the checkpoint directory, for error messages

    def load_into(self, optimizer: torch.optim.Optimizer) -> None:
        """Restore the optimiser; :class:`~tirl.errors.InputError` when the saved state does not fit it."""
        live = optimizer.param_groups
        saved = self.optimizer["param_groups"]
        groups = []
        for i, group in enumerate(saved):
            ref = live[i] if i < len(live) else {}
            groups.append({k: tuple(v) if isinstance(ref.get(k), tuple) and isinstance(v, list) else v
                           for k, v in group.items()})  # fmt: skip
        problem = _shape_problem(self.optimizer["state"], saved, live)
        if problem is None:
            try:
                optimizer.load_state_dict({"state": self.optimizer["state"], "param_groups": groups})
            except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as exc:
                problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if problem is not None:
            raise InputError(str(self.where / OPTIMIZER_JSON), None, f"does not fit this model's optimiser: {problem}",
                             "resume with the model and settings this checkpoint was written with")  # fmt: skip


def _shape_problem(
    state: dict[int, dict[str, Any]], saved: list[dict[str, Any]], live: list[dict[str, Any]]
) -> str | None:
    """Why a saved tensor does not fit its parameter (a shape the first optimiser step would crash on)."""
    params = {}
    for sg, lg in zip(saved, live, strict=False):
        params.update(dict(zip(sg.get("params", []), lg["params"], strict=False)))
    for pid, entry in state.items():
        param = params.get(pid)
        if param is None:
            return f"state for parameter {pid}, which no param group names"
        for name, value in entry.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                return f"state {pid}.{name} has shape {tuple(value.shape)}, the parameter {tuple(param.shape)}"
    return None


_MAX_JSON_BYTES = {RNG_JSON: 2**20, OPTIMIZER_JSON: 256 * 2**20}  # rng.json is ~15 KB; optimizer.json ~100 B/param


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > _MAX_JSON_BYTES[path.name]:
            raise DamagedState(f"{path.name} is larger than {_MAX_JSON_BYTES[path.name]} bytes")
        return parse_json(path.read_bytes())
    except FileNotFoundError:
        raise DamagedState(f"{path.name} is missing") from None
    except (JSONProblem, OSError) as exc:
        raise DamagedState(f"{path.name}: {exc}") from None


def _group(value: Any, i: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DamagedState(f"{OPTIMIZER_JSON}: param group {i} is not an object")
    params = value.get("params")
    if not (isinstance(params, list) and all(_is_int(p) and p >= 0 for p in params)):
        raise DamagedState(f"{OPTIMIZER_JSON}: param group {i} has no list of parameter indices")
    for key, v in value.items():
        if not (isinstance(v, _SCALARS) or (isinstance(v, list) and all(isinstance(x, _SCALARS) for x in v))):
            raise DamagedState(f"{OPTIMIZER_JSON}: param group {i} value {key!r} is not a scalar or a list")
    return value


def _optimizer_state(ckpt: Path) -> dict[str, Any]:
    doc = _read_json(ckpt / OPTIMIZER_JSON)
    if not (isinstance(doc, dict) and isinstance(doc.get("param_groups"), list) and isinstance(doc.get("state"), dict)):
        raise DamagedState(f"{OPTIMIZER_JSON}: not an object with param_groups and state")
    try:
        tensors = load_file(str(ckpt / OPTIMIZER_TENSORS))
    except FileNotFoundError:
        raise DamagedState(f"{OPTIMIZER_TENSORS} is missing") from None
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise DamagedState(f"{OPTIMIZER_TENSORS} cannot be read: {str(exc)[:200]}") from None
    state: dict[int, dict[str, Any]] = {}
    for pid, entry in doc["state"].items():
        if not (pid.isdigit() and len(pid) < 10 and isinstance(entry, dict)):
            raise DamagedState(f"{OPTIMIZER_JSON}: state key {pid[:40]!r} is not a parameter index with an object")
        row: dict[str, Any] = {}
        for name, value in entry.items():
            if isinstance(value, dict):
                key = value.get("tensor")
                if not isinstance(key, str) or key not in tensors:
                    raise DamagedState(f"{OPTIMIZER_JSON}: state {pid}.{name} names no tensor of {OPTIMIZER_TENSORS}")
                row[name] = tensors[key]
            elif isinstance(value, _SCALARS):
                row[name] = value
            else:
                raise DamagedState(f"{OPTIMIZER_JSON}: state {pid}.{name} is not a tensor reference or a scalar")
        state[int(pid)] = row
    return {"state": state, "param_groups": [_group(g, i) for i, g in enumerate(doc["param_groups"])]}


def read_training_state(ckpt: Path) -> TrainingState:
    """Parse and check the training-state files of the checkpoint directory ``ckpt`` (nothing is restored yet)."""
    if not (ckpt / RNG_JSON).exists() and any((ckpt / name).exists() for name in LEGACY_FILES):
        raise DamagedState(
            "it was written by an older tirl in pickle format (optimizer.pt, rng.pt), which tirl no longer "
            "loads because a pickle can run code"
        )
    rng = RngState.from_json(_read_json(ckpt / RNG_JSON))
    return TrainingState(optimizer=_optimizer_state(ckpt), rng=rng, where=ckpt)
