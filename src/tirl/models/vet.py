"""A model directory is hostile input: its files are checked before transformers reads them.

:func:`vet_model_dir` runs in :func:`tirl.models.loading.load_policy` (so ``tirl model check``, ``serve
--model``, ``train --model``, ``eval --model`` and resumed checkpoints alike) and raises one
:class:`~tirl.errors.InputError` naming the file, what is wrong and the fix:

* **Entries.** Every entry is a regular file or a directory (a FIFO or a link to ``/dev/zero`` would block
  or never end a read); at most 10,000 of them.
* **Sizes of small files.** ``config.json``, ``tokenizer_config.json``, ``generation_config.json``,
  ``special_tokens_map.json`` and ``added_tokens.json`` at most 16 MB and strict JSON objects
  (:func:`tirl.jsonl.parse_json`: no ``NaN``, no 5000-digit integers, no deep nesting); tokenizer files at
  most :data:`FILE_CAPS` (``tokenizer.json`` 128 MB); the chat template at most 1 MB.
* **No code of its own.** An ``auto_map`` in any of those files (custom model, config or tokenizer classes
  in the directory's ``.py`` files) is refused (:func:`refuse_custom_code`), and every ``from_pretrained``
  of tirl passes ``trust_remote_code=False``, so transformers never asks whether to run it.
* **config.json sizes.** Layers, width, heads, vocabulary and positions (under their Hugging Face and GPT-2
  names) must be integers in :data:`SIZE_BOUNDS`; key/value heads must divide the heads, and heads the width
  when no ``head_dim`` is given. The model is then built on PyTorch's ``meta`` device (no memory), and its
  parameters and buffers, at the requested dtype, must fit in the memory available now
  (``MemAvailable``, or the free memory of the CUDA device).
* **safetensors headers.** The header length fits the file and 100 MB; the header is a JSON object whose
  tensors have a known dtype, a shape of non-negative integers and ``data_offsets`` that match the shape,
  lie inside the file, do not overlap and leave no gap; a tensor that the model has must have its shape and
  a floating dtype, and every parameter of the model must be present (a tied ``lm_head`` excepted).

Not covered: the numbers inside the weights (NaN weights load), architectures whose size keys have other
names (their meta build is still measured), ``.bin`` weights (transformers loads those with
``weights_only=True``) and the tokenizer's own content beyond its size and parse (the tokenizers library
reads it; its errors become :class:`InputError` in ``load_policy``).
"""

from __future__ import annotations

import math
import os
import stat
import struct
from pathlib import Path
from typing import Any

from tirl.errors import InputError
from tirl.jsonl import JSONProblem, parse_json

MB = 2**20
JSON_CAP = 16 * MB
FILE_CAPS: dict[str, int] = {
    "tokenizer.json": 128 * MB,
    "vocab.json": 64 * MB,
    "merges.txt": 64 * MB,
    "tokenizer.model": 64 * MB,
    "chat_template.jinja": MB,
}
SMALL_JSON = (
    "config.json",
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "model.safetensors.index.json",
)
# config key (any of its names) -> (lowest, highest); a missing key is left to transformers' default
SIZE_BOUNDS: dict[tuple[str, ...], tuple[int, int]] = {
    ("num_hidden_layers", "n_layer", "num_layers"): (1, 1024),
    ("hidden_size", "n_embd", "d_model"): (1, 65_536),
    ("intermediate_size", "n_inner", "ffn_dim"): (1, 1_048_576),
    ("num_attention_heads", "n_head"): (1, 1024),
    ("num_key_value_heads",): (1, 1024),
    ("head_dim",): (1, 4096),
    ("vocab_size",): (1, 4_194_304),
    ("max_position_embeddings", "n_positions", "n_ctx"): (1, 4_194_304),
}
HEADER_CAP = 100 * MB  # what the safetensors library itself accepts
_ITEM = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
}
_FLOAT = frozenset({"F64", "F32", "F16", "BF16"})
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _fail(path: Path, problem: str, fix: str) -> InputError:
    return InputError(str(path), None, problem, fix)


def _capped(path: Path, cap: int) -> None:
    size = path.stat().st_size
    if size > cap:
        raise _fail(path, f"is {size:,} bytes, over the {cap:,} a model directory's file may hold", "remove it")


def check_entries(path: Path, limit: int = 10_000) -> None:
    """Every entry of the directory is a regular file or a directory (a FIFO or ``/dev/zero`` link is not)."""
    for n, entry in enumerate(path.iterdir()):
        if n >= limit:
            raise _fail(path, f"holds more than {limit:,} entries", "point --model at the model's own directory")
        try:
            mode = entry.stat().st_mode
        except OSError as exc:  # a dangling link, a loop
            raise _fail(entry, f"cannot be read ({exc.strerror})", "remove it or restore its target") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise _fail(entry, "is not a regular file (a device, FIFO or socket)", "replace it with the real file")


def read_json_file(path: Path) -> dict[str, Any]:
    """A small JSON file of the directory, capped and parsed strictly; must be an object."""
    _capped(path, JSON_CAP)
    try:
        with path.open("rb") as fh:
            raw = fh.read(JSON_CAP + 1)  # never more than the cap, whatever stat said
        value = parse_json(raw, allow_nan=False)
    except JSONProblem as exc:
        raise _fail(path, f"cannot be read as strict JSON: {exc}", "re-save the model with save_pretrained") from None
    if not isinstance(value, dict):
        raise _fail(path, f"holds a JSON {type(value).__name__}, not an object", "re-save it with save_pretrained")
    return value


def check_sizes(path: Path, config: dict[str, Any]) -> dict[str, int]:
    """The size keys of ``config`` (one name per key), each an integer in its bound; raises otherwise."""
    sizes: dict[str, int] = {}
    for names, (low, high) in SIZE_BOUNDS.items():
        for name in names:
            value = config.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise _fail(
                    path,
                    f"has {name}={str(value)[:40]}, not an integer in {low}..{high:,}",
                    "fix the value (it sizes the model)",
                )
            sizes[names[0]] = value
            break
    heads, kv = sizes.get("num_attention_heads"), sizes.get("num_key_value_heads")
    if heads and kv and heads % kv:
        raise _fail(path, f"has {kv} key/value heads, which do not divide the {heads} attention heads", "fix them")
    hidden = sizes.get("hidden_size")
    if heads and hidden and "head_dim" not in sizes and hidden % heads:
        raise _fail(path, f"has hidden_size {hidden}, not a multiple of its {heads} attention heads", "fix them")
    return sizes


def available_bytes(device: str) -> int:
    """Memory a model can take now: the CUDA device's free memory, else ``MemAvailable`` (else physical)."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def refuse_custom_code(path: Path, data: dict[str, Any]) -> None:
    """Refuse a JSON file of the directory that names Python code of its own to run (``auto_map``).

    transformers runs such code only with ``trust_remote_code=True``, which tirl never passes; without it
    transformers *asks* on a terminal ("Do you wish to run the custom code? [y/N]"), and one ``y`` ran the
    code of a tampered checkpoint during ``tirl train --resume``. tirl reads no code from a model directory.
    """
    if "auto_map" in data:
        names = data["auto_map"]
        shown = ", ".join(map(str, names)) if isinstance(names, dict) else type(names).__name__
        raise _fail(
            path,
            f"names custom code to run (auto_map: {shown[:200]}), which tirl never runs",
            "use a model whose architecture transformers ships, saved with save_pretrained without auto_map",
        )


def _rough_params(sizes: dict[str, int]) -> int:
    h, layers = sizes.get("hidden_size", 1), sizes.get("num_hidden_layers", 1)
    inter, vocab = sizes.get("intermediate_size", 4 * h), sizes.get("vocab_size", 1)
    return layers * (4 * h * h + 3 * h * inter) + 2 * vocab * h


def meta_model(path: Path, dtype: str, device: str, sizes: dict[str, int]) -> Any:
    """The model config.json describes, built on the meta device, after a memory check; raises InputError."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    need, have = _rough_params(sizes) * _DTYPE_BYTES.get(dtype, 4), available_bytes(device)
    if need > 4 * have:  # far too large: refused before even the meta build spends time on it
        raise _too_big(path, need, have)
    try:
        config = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # a config transformers cannot read or build: the file's fault
        raise _fail(
            path / "config.json",
            f"describes no model transformers can build ({type(exc).__name__}: {str(exc)[:200]})",
            "re-save the model with save_pretrained",
        ) from None
    per = _DTYPE_BYTES.get(dtype, 4)
    need = sum(p.numel() * per for p in model.parameters()) + sum(b.numel() * b.element_size() for b in model.buffers())
    if need > have:
        raise _too_big(path, need, have)
    return model


def _too_big(path: Path, need: int, have: int) -> InputError:
    return _fail(
        path / "config.json",
        f"describes a model of {need / 2**30:.1f} GiB, more than the {have / 2**30:.1f} GiB of memory available",
        "use a smaller model, dtype or another device",
    )


def safetensors_header(path: Path) -> dict[str, tuple[str, list[int]]]:
    """``name -> (dtype, shape)`` of one safetensors file, after checking its header; raises InputError."""
    size = path.stat().st_size
    fix = "the file is damaged or was not written by safetensors: re-save the model"
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise _fail(path, f"is {size} bytes, too short for a safetensors header", fix)
        (n,) = struct.unpack("<Q", head)
        if n > min(HEADER_CAP, size - 8):
            raise _fail(path, f"declares a header of {n:,} bytes in a file of {size:,}", fix)
        raw = fh.read(n)
    try:
        header = parse_json(raw, allow_nan=False)
    except JSONProblem as exc:
        raise _fail(path, f"has a header that is {exc}", fix) from None
    if not isinstance(header, dict):
        raise _fail(path, "has a header that is not a JSON object", fix)
    header.pop("__metadata__", None)
    return _tensor_table(path, header, size - 8 - n, fix)


def _tensor_table(path: Path, header: dict[str, Any], data: int, fix: str) -> dict[str, tuple[str, list[int]]]:
    spans: list[tuple[int, int, str]] = []
    out: dict[str, tuple[str, list[int]]] = {}
    for name, info in header.items():
        fields: dict[str, Any] = info if isinstance(info, dict) else {}
        dtype, shape, offs = fields.get("dtype"), fields.get("shape"), fields.get("data_offsets")
        ok_shape = (
            isinstance(shape, list)
            and len(shape) <= 8
            and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape)
        )
        ok_offs = (
            isinstance(offs, list)
            and len(offs) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) and 0 <= o <= data for o in offs)
        )
        if dtype not in _ITEM or not ok_shape or not ok_offs:
            raise _fail(
                path, f"describes tensor {name[:80]!r} with a bad dtype, shape or data_offsets ({str(info)[:120]})", fix
            )
        begin, end = offs  # type: ignore[misc]  # checked above: two ints
        if end - begin != math.prod(shape) * _ITEM[dtype]:  # type: ignore[arg-type]
            raise _fail(path, f"gives tensor {name[:80]!r} {end - begin:,} bytes for shape {shape} {dtype}", fix)
        spans.append((begin, end, name))
        out[name] = (str(dtype), list(shape))  # type: ignore[arg-type]
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            what = "overlaps the one before" if begin < at else f"leaves a gap of {begin - at:,} bytes before it"
            raise _fail(path, f"has tensor {name[:80]!r} whose data {what}", fix)
        at = end
    if at != data:
        raise _fail(path, f"has {data - at:,} bytes of data that no tensor describes", fix)
    return out


def check_weights(path: Path, model: Any) -> None:
    """Every ``*.safetensors`` header agrees with ``model`` (the meta build): shapes, float dtypes, coverage."""
    files = sorted(path.glob("*.safetensors"))
    if not files:
        return  # no safetensors weights: transformers reports what is missing (and loads .bin weights safely)
    want = {k: list(v.shape) for k, v in model.state_dict().items()}
    prefix = f"{getattr(model, 'base_model_prefix', '')}."
    seen: set[str] = set()
    for f in files:
        for name, (dtype, shape) in safetensors_header(f).items():
            key = next((k for k in (name, prefix + name, name.removeprefix(prefix)) if k in want), None)
            if key is None:
                continue
            if shape != want[key] or dtype not in _FLOAT:
                raise _fail(
                    f,
                    f"holds {name[:80]!r} as {dtype} {shape}, but config.json makes it a float "
                    f"tensor of shape {want[key]}",
                    "use the config.json these weights were saved with",
                )
            seen.add(key)
    params = {n for n, _ in model.named_parameters()}
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    missing = sorted(n for n in params - seen if not (tied and n.endswith("lm_head.weight")))
    if missing:
        raise _fail(
            path,
            f"has no weights for {len(missing)} of the model's {len(params)} parameters (first: {missing[0][:80]})",
            "copy every *.safetensors file of the checkpoint",
        )


def vet_model_dir(path: Path, *, dtype: str = "float32", device: str = "cpu") -> None:
    """Check the files of the model directory ``path`` (module doc); raises :class:`InputError`."""
    check_entries(path)
    for name in SMALL_JSON:
        if (path / name).is_file():
            refuse_custom_code(path / name, read_json_file(path / name))
    for name, cap in FILE_CAPS.items():
        if (path / name).is_file():
            _capped(path / name, cap)
    if (path / "tokenizer.json").is_file() and (path / "tokenizer.json").stat().st_size <= JSON_CAP:
        read_json_file(path / "tokenizer.json")  # a small one is parsed here too, for a precise error
    sizes = check_sizes(path / "config.json", read_json_file(path / "config.json"))
    check_weights(path, meta_model(path, dtype, device, sizes))
