"""The weight channel between the trainer and vLLM's engine process: a worker extension and a file in shared memory.

vLLM (0.33, the ``vllm`` extra's pin) runs its engine in a separate process and
carries ``LLM.collective_rpc`` calls there with its msgpack serialiser
(``vllm/v1/serial_utils.py``), which refuses functions and, without type
information, decodes tensors as plain lists. So nothing but a method name and
primitive values crosses that boundary here:

* :class:`WeightSyncExtension` is named in the engine arguments
  (``worker_extension_cls=`` :data:`WORKER_EXTENSION`); vLLM mixes it into its
  ``Worker`` class, so its methods are callable by name through
  ``collective_rpc("tirl_load_weights", args=(path,))``.
* The weights themselves go through a safetensors file in ``/dev/shm``
  (:func:`write_weights`), written by the trainer and read by each worker
  straight onto its device (:meth:`WeightSyncExtension.tirl_load_weights`),
  then handed to the model's own ``load_weights`` (Hugging Face names in;
  vLLM stacks ``q/k/v`` and ``gate/up`` itself).
* :class:`SyncCall` is the payload: :func:`is_primitive` is the contract that
  it holds only ``str/int/float/bool/None`` and lists/dicts of those.

Every attribute of the extension starts with ``tirl_``: vLLM refuses an
extension whose names its ``Worker`` already has.

Not covered: tensor-parallel engines larger than one host (each worker reads
the same file: fine on one machine, not across nodes), quantised engine
weights, and the zero-copy transfer (CUDA IPC / NCCL) of vLLM's own
``weight_transfer`` engines — the file costs one device-to-host copy and one
host-to-device copy per sync, which is what a model of a few billion
parameters can afford between steps.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

WORKER_EXTENSION = "tirl.inference.vllm_worker.WeightSyncExtension"
LOAD_METHOD = "tirl_load_weights"
DUMP_METHOD = "tirl_dump_weights"

Primitive = str | int | float | bool | None


def is_primitive(value: Any) -> bool:
    """True for ``str/int/float/bool/None`` and lists, tuples and str-keyed dicts of those (nothing else)."""
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return all(is_primitive(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and is_primitive(v) for k, v in value.items())
    return False


@dataclass(frozen=True, slots=True)
class SyncCall:
    """One ``collective_rpc`` call: a method of :class:`WeightSyncExtension` by name, with primitive arguments."""

    method: str
    args: tuple[Primitive, ...]

    def __post_init__(self) -> None:
        if not self.method.startswith("tirl_") or not is_primitive(self.args):
            raise TypeError(f"a sync call carries a tirl_ method name and primitive arguments, not {self!r}")

    def send(self, llm: Any) -> list[Any]:
        """Run it on every worker of ``llm`` (a ``vllm.LLM``); one result per worker."""
        return list(llm.collective_rpc(self.method, args=self.args))

    def utility_message(self, call_id: int = 0) -> tuple[Any, ...]:
        """What vLLM's client sends its engine process for it: ``(client, call_id, "collective_rpc", args)``."""
        return (0, call_id, "collective_rpc", (self.method, None, self.args, None))


def shm_dir(need_bytes: int = 0) -> Path:
    """``/dev/shm`` (RAM-backed on Linux) when writable with ``need_bytes`` free (+10%), else the temp directory.

    Containers often mount a small ``/dev/shm`` (Docker: 64 MB), too small for a model's weights; the
    file then goes to the temp directory on disk (slower, same result).
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free >= need_bytes * 1.1:
        return shm
    return Path(tempfile.gettempdir())


def host_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s state dict on the CPU, contiguous, with tied tensors as separate copies (safetensors needs it)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict().items():
        t = tensor.detach().to("cpu").contiguous()
        if t.untyped_storage().data_ptr() in seen:  # a tied weight (embeddings = lm_head): its own copy
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out[name] = t
    return out


def write_weights(model: torch.nn.Module, directory: Path | None = None) -> Path:
    """Save ``model``'s weights (Hugging Face names) as one safetensors file; returns its path.

    ``directory`` None: :func:`shm_dir` for the file's size.
    Written to a temporary name and renamed, so a worker never reads half a file. The caller deletes it.
    """
    from safetensors.torch import save_file

    state = host_state(model)
    directory = directory or shm_dir(sum(t.numel() * t.element_size() for t in state.values()))
    fd, tmp = tempfile.mkstemp(prefix=".tirl-weights-", suffix=".safetensors", dir=directory)
    os.close(fd)
    try:
        save_file(state, tmp)
        final = Path(tmp).with_name(Path(tmp).name.lstrip("."))
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def load_call(path: Path) -> SyncCall:
    """The call that makes every worker load the weights file at ``path``."""
    return SyncCall(LOAD_METHOD, (str(path),))


STACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def engine_expected(hf_state: Mapping[str, torch.Tensor], engine_name: str) -> torch.Tensor | None:
    """What the engine's parameter ``engine_name`` must hold after loading ``hf_state`` (None: not derivable).

    vLLM's Llama/Qwen2 models stack ``q/k/v_proj`` into ``qkv_proj`` and ``gate/up_proj`` into
    ``gate_up_proj`` (rows concatenated in that order); other names are the Hugging Face names.
    """
    if engine_name in hf_state:
        return hf_state[engine_name]
    for stacked, parts in STACKED.items():
        if f".{stacked}." in engine_name:
            names = [engine_name.replace(f".{stacked}.", f".{part}.") for part in parts]
            if all(n in hf_state for n in names):
                return torch.cat([hf_state[n] for n in names], dim=0)
    return None


class WeightSyncExtension:
    """Mixed into vLLM's ``Worker`` by ``worker_extension_cls``; runs in the engine process.

    ``self.model_runner.model`` (the engine's model, with vLLM's ``load_weights``) and ``self.device``
    are the worker's own. On CPU, tests stand a plain torch model with a ``load_weights`` method in for
    the model runner (a mock at the GPU edge: vLLM's worker cannot start without a GPU).
    """

    model_runner: Any
    device: Any

    def tirl_load_weights(self, path: str) -> int:
        """Load the safetensors file at ``path`` into this worker's model; returns the tensor count.

        Tensors are read one at a time onto the worker's device as ``load_weights`` consumes them, so the
        GPU holds at most one extra tensor, not a second copy of the model.
        """
        from safetensors import safe_open

        count = 0
        with safe_open(path, framework="pt", device=str(getattr(self, "device", "cpu"))) as f:

            def tensors() -> Iterator[tuple[str, torch.Tensor]]:
                nonlocal count
                for name in f.keys():  # noqa: SIM118 (safe_open has keys(), not iteration)
                    count += 1
                    yield name, f.get_tensor(name)

            self.model_runner.model.load_weights(weights=tensors())
        return count

    def tirl_dump_weights(self, path: str) -> int:
        """Write this worker's model parameters (vLLM's names, e.g. stacked ``qkv_proj``) to ``path``; for checks."""
        from safetensors.torch import save_file

        params = {n: p.detach().to("cpu").contiguous().clone() for n, p in self.model_runner.model.named_parameters()}
        save_file(params, path)
        return len(params)
