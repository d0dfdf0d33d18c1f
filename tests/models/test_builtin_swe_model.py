"""The shipped swe-lite warm start (``tiny-swe``): chosen by env name, rebuilt by shipped commands, and it fixes bugs.

Real parts: ``tirl eval --env swe-lite`` in this process with no ``--model`` (so the built-in model is the one
the env picks), the swe-lite curriculum's validation split, real workspaces, the bubblewrap sandbox and the
pytest judge, greedy decoding at the env preset's caps (10 turns of 384 tokens). About 40 s on the 2-core
machine. Not covered here: rebuilding the five stages (about 1 h 45 min; tests/models/test_sft_swe_rebuild.py
checks that one stage of the recipe is byte-identical at a quick size) and the held-out figure (200 tasks,
about 10 min: the asset's README and docs/training.md give it with its command).
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import pytest
from tests.tiny_run import tirl_in_process

from tirl.config import load_config
from tirl.models.builtin import BUILTIN_MODELS, SWE_SFT_COMMAND, builtin_model_path

ROOT = Path(__file__).resolve().parents[2]


def _stages() -> list[list[str]]:
    return [shlex.split(stage) for stage in SWE_SFT_COMMAND.split(" && ")]


def test_tiny_swe_ships_with_a_chain_of_tirl_sft_commands_that_rebuilds_it() -> None:
    from tirl.commands.sft import _config, add_arguments

    path = builtin_model_path("swe-lite")
    assert path.name == "tiny-swe" and BUILTIN_MODELS["swe-lite"] == ("tiny-swe", SWE_SFT_COMMAND)
    assert (path / "model.safetensors").is_file(), "the built-in checkpoint tiny-swe is missing"
    assert sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) <= 10 * 1024 * 1024
    positions = json.loads((path / "config.json").read_text())["max_position_embeddings"]
    assert positions >= load_config(None, ["env.name=swe-lite"]).generation.max_total_tokens
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    stages = _stages()
    assert len(stages) == 5
    previous = "src/tirl/assets/tiny-tir"
    card = (path / "README.md").read_text()
    for argv in stages:
        assert argv[:2] == ["tirl", "sft"]
        args = parser.parse_args(argv[2:])  # every flag is one `tirl sft` has (a typo fails here)
        cfg = _config(args)
        assert cfg.env == "swe-lite" and args.init == previous  # each stage starts from the one before
        previous = args.out
        assert shlex.join(argv) in card  # the card shows the exact commands
    assert previous == "src/tirl/assets/tiny-swe"
    assert _config(parser.parse_args(stages[0][2:])).copy_short_share == 1.0  # the short drill first


@pytest.mark.slow
def test_tiny_swe_fixes_validation_bugs_greedily_through_the_real_judge() -> None:
    done = tirl_in_process("eval", "--env", "swe-lite", "--split", "validation", "--n", "20", "--json",
                           "--set", "trainer.threads=1")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "warning:" not in done.stderr  # 6,144 positions: the preset's cap fits
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["model"] == "built-in" and out["n"] == 20
    solved = [t for t in out["tasks"] if t["correct"]]
    # a warm start with room to learn: some bugs fixed, most not (measured 3 of these 20)
    assert 1 <= len(solved) <= 10, out["terminations"]
    assert all(t["termination"] == "submitted" and t["turns"] >= 3 for t in solved)  # read, edit, submit
    infra = {"error", "timeout", "init_failed", "eval_failed", "cancelled", "overlong"}
    assert not infra & set(out["terminations"]), out["terminations"]  # every episode judged, none failed
