"""benchmarks/bench_sampling.py: the FLOP count, like-for-like work on both sides, bad input, one real tiny run.

The FLOP count is checked against the model's shapes written out by hand; the real run (the built-in
tiny-chain model, 8 new tokens, one round) checks that the ``fixed`` regime makes both sides generate exactly
batch x max-new tokens, that the episodes' CPU split and the bound are read from the same run, and that
``generate`` got the same prompts. About 30 s on an idle 2-core machine (two model loads, both sides warmed
up). Not covered: the figures (they need a quiet machine: ``run_all.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tests.benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_sampling.py"


def bench() -> ModuleType:
    return load_benchmark("bench_sampling")


def test_flops_per_token_counts_every_linear_weight_twice_and_the_attention_over_ctx() -> None:
    from tirl.models.loading import load_policy

    model = load_policy(None, env="tir-chain").model
    c = model.config
    h, i, v, n = c.hidden_size, c.intermediate_size, c.vocab_size, c.num_hidden_layers
    kv = c.num_key_value_heads * c.head_dim
    per_layer = h * c.num_attention_heads * c.head_dim * 2 + 2 * h * kv + 3 * h * i  # q, o; k, v; gate, up, down
    f = bench().flops_per_token(model, ctx=100)
    assert f["linear"] == 2 * (n * per_layer + v * h)  # the tied LM head runs as a linear layer too
    assert f["attention"] == 4 * n * c.num_attention_heads * c.head_dim * 100
    assert f["total"] == f["linear"] + f["attention"]


@pytest.mark.parametrize(("args", "needle"), [(["--repeats", "0"], "--repeats 0"), (["--tool-ms", "-1"], "--tool-ms")])
def test_bad_input_is_one_error_line_exit_2(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    """In this process (the script's argument check is its ``main``; a subprocess would only re-import torch)."""
    with pytest.raises(SystemExit) as exit_:
        bench().main(args)
    got = capsys.readouterr()
    lines = got.err.strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]
    assert got.out == ""


def test_a_real_tiny_run_gives_both_sides_the_same_work() -> None:
    args = ["--json", "--repeats", "1", "--turn1", "4", "--later", "3", "--max-new", "8", "--episodes", "3",
            "--workers", "2", "--turns", "2"]  # fmt: skip
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, rows in (("turn1", 4), ("later", 3)):
        sc = res["scenarios"][name]
        assert sc["batch"] == rows
        assert sc["fixed"]["tokens"] == {"tirl": rows * 8, "generate": rows * 8}  # like for like: the same work
        assert 0 < sc["eos"]["tokens"]["tirl"] <= rows * 8 and 0 < sc["eos"]["tokens"]["generate"] <= rows * 8
        ratio = sc["fixed"]["tirl_over_generate"]
        assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
        assert sc["bound"]["tokens_per_s"] > 0 and sc["bound"]["mean_ctx"] == sc["prompt_tokens"][1] + 4
    assert res["scenarios"]["later"]["prompt_tokens"][0] < res["scenarios"]["later"]["prompt_tokens"][1]  # padding
    ep = res["episodes"]
    assert ep["episodes"] == 3 and 0 < ep["cpu_share"]["prefill"] < 1 and 0 < ep["cpu_share"]["decode"] < 1
    assert 1.0 <= ep["rows_per_decode_pass"] <= 2.0  # at most --workers rows
