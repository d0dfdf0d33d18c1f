"""A model directory is hostile input (issue 22): every broken one is one ``error:`` line and exit 2.

Covered, each on a copy of real ``tirl model init`` output, through ``tirl model check`` in process (the same
``load_policy`` as ``serve/train/eval --model``): chat templates that build a 100 MB string, loop for
minutes, raise, or are not Jinja; ``config.json`` with negative, huge, fractional, textual or inconsistent
sizes, and a well-formed config of a model larger than the machine's memory; a ``tokenizer.json`` that is
truncated, not JSON, of the wrong shape or over its size cap, or replaced by a FIFO, a link to ``/dev/zero`` or a
dangling link; safetensors files whose header length, JSON,
offsets, dtype or shapes lie. Then a seeded fuzz of byte and value mutations of the same files. The old
code gave exit 0 (the string bomb; the kv-head count), a traceback or a MemoryError for these.
``serve``, ``eval`` and ``train --model`` refuse such a directory with the same one line (train leaves no run
directory). Not covered: weights whose values are NaN (they load).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tirl.cli import main

Mutation = Callable[[Path], None]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "base"
    assert main(["model", "init", "--out", str(out)]) == 0
    return out


def _copy(base: Path, tmp_path: Path, mutate: Mutation) -> Path:
    target = tmp_path / "m"
    shutil.copytree(base, target)
    mutate(target)
    return target


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["model", "check", str(path)])
    return code, capsys.readouterr().err.strip().splitlines()


def _refused(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Mutation, needle: str) -> None:
    code, err = _check(_copy(base, tmp_path, mutate), capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert needle in err[0], err[0]


def _template(text: str) -> Mutation:
    return lambda d: (d / "chat_template.jinja").write_text(text)


def _config(**changes: object) -> Mutation:
    def mutate(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(changes)
        (d / "config.json").write_text(json.dumps(cfg))

    return mutate


def test_the_base_directory_passes(base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _check(base, capsys)
    assert code == 0 and err == []


def test_a_template_building_100_mb_is_refused_at_once(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = time.monotonic()
    _refused(base, tmp_path, capsys, _template("{{ 'x' * 10**8 }}{{ messages }}"), "builds a value of 100,000,000")
    assert time.monotonic() - start < 30


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "took longer than"),
        ("{% set ns = namespace(s='ab') %}{% for i in range(30) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "items"),
        ("{{ 7 ** 100000 }}", "power over 4096 bits"),
        ("{{ raise_exception('nope') }}", "raised TemplateError: nope"),
        ("{% for m in messages %}", "not valid Jinja"),
        ("{% if 1 %}" * 3000 + "{% endif %}" * 3000, "cannot be compiled (RecursionError)"),
        ("{{ messages.__class__.__mro__ }}", "raised SecurityError"),
    ],
)
def test_hostile_templates(
    base: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    needle: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tirl.models.safe_template as safe

    monkeypatch.setattr(safe, "TIME_LIMIT_S", 1.0)  # the shipped 5 s, shortened for the test
    _refused(base, tmp_path, capsys, _template(text), needle)


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"hidden_size": -64}, "hidden_size=-64, not an integer in 1..65,536"),
        ({"num_hidden_layers": 10**9}, "num_hidden_layers=1000000000"),
        ({"vocab_size": 1024.5}, "vocab_size=1024.5"),
        ({"num_attention_heads": "4"}, "num_attention_heads=4, not an integer"),
        ({"num_key_value_heads": 3}, "do not divide the 4 attention heads"),
        ({"num_attention_heads": 3, "num_key_value_heads": 1}, "not a multiple of its 3 attention heads"),
        ({"hidden_size": 65536, "intermediate_size": 1_048_576, "num_hidden_layers": 1024}, "GiB of memory"),
        ({"vocab_size": 4_000_000, "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8}, "GiB"),
        ({"vocab_size": 2048}, "config.json makes it a float tensor of shape [2048, 64]"),
        ({"model_type": "no-such-arch"}, "describes no model transformers can build"),
    ],
)
def test_odd_config_sizes(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, object], needle: str
) -> None:
    _refused(base, tmp_path, capsys, _config(**changes), needle)


def _truncate(name: str, keep: float) -> Mutation:
    def mutate(d: Path) -> None:
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: int(len(data) * keep)])

    return mutate


def _sparse(name: str, size: int) -> Mutation:
    def mutate(d: Path) -> None:
        with (d / name).open("r+b") as fh:
            fh.truncate(size)  # a sparse file: no disk used

    return mutate


def _replace_with_link(name: str, target: str) -> Mutation:
    def mutate(d: Path) -> None:
        (d / name).unlink()
        (d / name).symlink_to(target)

    return mutate


def _replace_with_fifo(name: str) -> Mutation:
    def mutate(d: Path) -> None:
        (d / name).unlink()
        os.mkfifo(d / name)  # a read would block for ever

    return mutate


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (_truncate("tokenizer.json", 0.5), "tokenizer.json: cannot be read as strict JSON: not valid JSON"),
        (lambda d: (d / "tokenizer.json").write_bytes(b"\xff\xfe garbage"), "tokenizer.json: cannot be read"),
        (lambda d: (d / "tokenizer.json").write_text('{"model": 5}'), "the tokenizer could not be loaded"),
        (_sparse("tokenizer.json", 200 * 2**20), "over the 134,217,728"),
        (lambda d: (d / "tokenizer_config.json").write_text("[" * 100 + "]" * 100), "nested deeper"),
        (lambda d: (d / "config.json").write_text('{"vocab_size": NaN}'), "config.json: cannot be read as strict JSON"),
        (_replace_with_link("tokenizer.json", "/dev/zero"), "tokenizer.json: is not a regular file"),
        (_replace_with_fifo("tokenizer_config.json"), "tokenizer_config.json: is not a regular file"),
        (_replace_with_link("generation_config.json", "/nonexistent/x"), "generation_config.json: cannot be read"),
    ],
)
def test_bad_tokenizer_and_json_files(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Mutation, needle: str
) -> None:
    _refused(base, tmp_path, capsys, mutate, needle)


def _header(d: Path) -> tuple[dict[str, dict[str, object]], bytes]:
    raw = (d / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _rewrite(edit: Callable[[dict[str, dict[str, object]]], None]) -> Mutation:
    def mutate(d: Path) -> None:
        header, data = _header(d)
        edit(header)
        text = json.dumps(header).encode()
        (d / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + data)

    return mutate


def _first(header: dict[str, dict[str, object]]) -> dict[str, object]:
    return header[next(k for k in header if k != "__metadata__")]


def _overlap(header: dict[str, dict[str, object]]) -> None:
    entries = sorted((v for k, v in header.items() if k != "__metadata__"), key=lambda v: v["data_offsets"])  # type: ignore[arg-type, return-value]
    a, b = entries[0]["data_offsets"], entries[1]["data_offsets"]  # type: ignore[index]
    entries[1]["data_offsets"] = [a[0], a[0] + (b[1] - b[0])]  # type: ignore[index]


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 2**62) + b"{}"), "declares a header"),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x01\x02"), "too short"),
        (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 5) + b"{]xx}"), "not valid JSON"),
        (_rewrite(_overlap), "overlaps the one before"),
        (_rewrite(lambda h: _first(h).update(dtype="Q9")), "bad dtype"),
        (_rewrite(lambda h: _first(h).update(shape=[3, 3])), "bytes for shape [3, 3]"),
        (_rewrite(lambda h: h.pop(next(k for k in h if "layers.1.mlp" in k))), "leaves a gap of 49,152 bytes"),
        (_truncate("model.safetensors", 0.9), "data_offsets"),
    ],
)
def test_lying_safetensors_headers(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Mutation, needle: str
) -> None:
    _refused(base, tmp_path, capsys, mutate, needle)


def test_a_weight_of_the_wrong_dtype_or_shape(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def swap(d: Path) -> None:  # two same-sized tensors of different shapes trade names
        header, data = _header(d)
        names = [k for k in header if k.endswith("q_proj.weight") or k.endswith("embed_tokens.weight")]
        norms = [k for k in header if k.endswith("input_layernorm.weight")]
        header[norms[0]]["dtype"] = "I32"
        text = json.dumps(header).encode()
        (d / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + data)
        assert names

    _refused(base, tmp_path, capsys, swap, "as I32 [64], but config.json makes it a float tensor")


def _fuzz_mutations(rng: random.Random) -> list[tuple[str, Mutation]]:
    files = ["config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "model.safetensors",
             "generation_config.json"]  # fmt: skip
    keys = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
            "intermediate_size", "max_position_embeddings", "head_dim", "tie_word_embeddings",
            "rms_norm_eps"]  # fmt: skip
    values: list[object] = [0, -1, 1, 3, 7, 2**31, 2**70, 1e308, -0.5, "x", None, [], {}, True]
    out: list[tuple[str, Mutation]] = []
    for i in range(60):
        kind = i % 4
        if kind == 0:
            key, value = rng.choice(keys), rng.choice(values)
            out.append((f"config {key}={value!r}", _config(**{key: value})))
        elif kind == 1:
            name, cut = rng.choice(files), rng.random()
            out.append((f"truncate {name} at {cut:.2f}", _truncate(name, cut)))
        elif kind == 2:
            name, at, byte = rng.choice(files), rng.random(), rng.randrange(256)

            def flip(d: Path, name: str = name, at: float = at, byte: int = byte) -> None:
                data = bytearray((d / name).read_bytes())
                if data:
                    data[int(at * (len(data) - 1))] = byte
                (d / name).write_bytes(bytes(data))

            out.append((f"byte {byte} in {name} at {at:.2f}", flip))
        else:
            name = rng.choice(files)
            out.append((f"delete {name}", lambda d, name=name: (d / name).unlink()))
    return out


def test_fuzzed_directories_are_one_error_line_or_a_success(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """60 seeded mutations, each a full `tirl model check` in process (most stop at the file checks)."""
    outcomes = {0: 0, 2: 0}
    for n, (label, mutate) in enumerate(_fuzz_mutations(random.Random(22))):
        code, err = _check(_copy(base, tmp_path / str(n), mutate), capsys)
        assert code in (0, 2), (label, code, err)
        assert (code == 0 and err == []) or (len(err) == 1 and err[0].startswith("error: ")), (label, err)
        outcomes[code] += 1
    assert outcomes[2] >= 30, outcomes  # most mutations break the directory, and each says so in one line


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--port", "0", "--model"],
        ["eval", "--n", "1", "--set", "trainer.threads=1", "--model"],
        ["train", "--steps", "1", "--set", "trainer.threads=1", "--no-progress", "--model"],
    ],
    ids=["serve", "eval", "train"],
)
def test_every_command_that_takes_a_model_refuses_it_in_one_line(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    bad = _copy(base, tmp_path, _template("{{ 'x' * 10**8 }}"))
    extra = ["--run-dir", str(tmp_path / "run")] if command[0] == "train" else []
    capsys.readouterr()
    assert main([*command, str(bad), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "builds a value of 100,000,000" in err[0], err
    assert not (tmp_path / "run").exists()  # train: no run directory left behind


@pytest.fixture(scope="module")
def adapter(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tirl.models.loading import load_policy
    from tirl.models.memory import LoraSpec, apply_lora

    out = tmp_path_factory.mktemp("adapter") / "adapter"
    apply_lora(load_policy(base).model, LoraSpec(rank=4, alpha=8)).save_pretrained(out)
    return out


def _adapter_config(**changes: object) -> Mutation:
    def mutate(d: Path) -> None:
        cfg = json.loads((d / "adapter_config.json").read_text())
        cfg.update(changes)
        (d / "adapter_config.json").write_text(json.dumps(cfg))

    return mutate


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: None, ""),
        (_truncate("adapter_model.safetensors", 0.5), "adapter_model.safetensors"),
        (_adapter_config(r=8), "the LoRA adapter could not be loaded"),
        (lambda d: (d / "adapter_config.json").write_text("{"), "adapter_config.json: cannot be read"),
        # peft then looked for the weights on the Hugging Face Hub: "ConnectError: Name or service not known"
        (lambda d: (d / "adapter_model.safetensors").unlink(), "no adapter_model.safetensors — copy the whole"),
    ],
    ids=["intact", "truncated-weights", "rank-mismatch", "bad-json", "no-weights"],
)
def test_hostile_adapter_directories(
    adapter: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Mutation, needle: str
) -> None:
    code, err = _check(_copy(adapter, tmp_path, mutate), capsys)
    if not needle:
        assert code == 0 and err == []
        return
    assert code == 2 and len(err) == 1 and needle in err[0], err


def test_the_exact_size_on_the_meta_device_is_held_against_memory(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 MiB available: a 2-layer, 2048-wide model (about 480 MB in float32) passes the rough estimate and is
    refused on its exact meta-device size; the base model (0.7 MB) still loads."""
    import tirl.models.vet as vet

    monkeypatch.setattr(vet, "available_bytes", lambda device: 200 * 2**20)
    assert _check(base, capsys)[0] == 0
    sizes = _config(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, intermediate_size=8192)
    _refused(base, tmp_path, capsys, sizes, "more than the 0.2 GiB of memory available")
