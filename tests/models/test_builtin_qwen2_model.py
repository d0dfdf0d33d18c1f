"""The shipped Qwen2 checkpoint with a BPE vocabulary and Hermes tool calls (``src/tirl/assets/qwen2-chain``).

Covered: it loads through tirl's own loading path as a ``Qwen2ForCausalLM`` with a tool template; its
template renders the tool definitions and tool calls in the Hermes convention and the parser reads the calls
back (same text, same ids); text round-trips through its tokenizer with one token per digit; a one-step
``tirl train --model ... --set env.tools=true`` runs and its rollouts call the python tool; the rebuild
command (:data:`tirl.models.loading.QWEN2_CHAIN_SFT_COMMAND`) at a quick size writes the shipped tokenizer,
template and config files byte for byte, and the same weights twice; ``tirl model init`` with the same flags
trains the same vocabulary and merges.

Not covered by the default suite: the full rebuild of the shipped weights (820 s at load 2-4 on 2 cores, about
45 min at load 16-30); ``TIRL_REBUILD_ASSETS=1`` runs it and compares every file's bytes with the shipped ones
(passed once, at commit e7816d7).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from pathlib import Path

import pytest
from tests.tiny_run import tirl_in_process

from tirl.envs.tasks.chain_gen import generate_chain_tasks
from tirl.models.chat_format import TemplateChatFormat
from tirl.models.corpus import as_tool_calls
from tirl.models.loading import (
    QWEN2_CHAIN_DIR,
    QWEN2_CHAIN_SFT_COMMAND,
    QWEN2_CHAIN_STAGE1,
    builtin_model_path,
    load_policy,
)
from tirl.models.safe_template import render_chat
from tirl.models.toolcalls import PYTHON_TOOL, parse_tool_calls
from tirl.types import Message, Role

ASSET = builtin_model_path().parent / QWEN2_CHAIN_DIR
SHIPPED_FILES = (
    "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
    "chat_template.jinja",
)  # fmt: skip
NOT_TRAINED = tuple(f for f in SHIPPED_FILES if f != "model.safetensors")  # the same at any training length


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unversioned(path: Path) -> bytes:
    """The file's bytes without the ``"transformers_version"`` line ``save_pretrained`` writes into the configs.

    It names the transformers release that wrote the file, so it follows the install (a clean clone got 5.25.0
    while the asset was written with 5.24.0); every other byte must still match.
    """
    return re.sub(rb'\n *"transformers_version": "[^"]*",?', b"", path.read_bytes())


def test_it_is_shipped_small_and_loads_through_tirls_loading_path_with_tools() -> None:
    total = sum(f.stat().st_size for f in ASSET.rglob("*") if f.is_file())
    assert total <= 6 * 1024 * 1024, f"{total:,} bytes"
    policy = load_policy(ASSET, need_tools=True, threads=1)
    assert type(policy.model).__name__ == "Qwen2ForCausalLM"
    assert policy.model.config.tie_word_embeddings
    assert isinstance(policy.chat, TemplateChatFormat) and policy.chat.tool_support.hermes
    assert 1500 <= len(policy.tokenizer) <= policy.model.config.vocab_size  # a real BPE vocabulary
    assert "--init " + QWEN2_CHAIN_STAGE1 in (ASSET / "README.md").read_text()  # the card names the second stage


def test_its_template_renders_tools_and_calls_in_hermes_format_and_the_parser_reads_them_back() -> None:
    policy = load_policy(ASSET, need_tools=True, threads=1)
    tok = policy.tokenizer
    task = generate_chain_tasks(1, seed=424242)[0]
    call = as_tool_calls(f"```python\n{task.data['code']}\n```")
    text = render_chat(
        tok.chat_template,
        [
            {"role": "user", "content": task.prompt},
            {"role": "assistant", "content": None, "tool_calls": [{"name": "python", "arguments": {"code": "1"}}]},
        ],
        tools=[PYTHON_TOOL],
    )
    assert "<tools>\n" + json.dumps(PYTHON_TOOL) + "\n</tools>" in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "python", "arguments": {"code": "1"}}\n</tool_call>' in text
    ids = policy.chat.assistant_ids(call)  # what the demonstrations trained it to sample
    message = policy.chat.assistant_message(ids)
    assert message.content == "" and len(message.tool_calls) == 1
    assert (message.tool_calls[0].name, message.tool_calls[0].arguments) == ("python", {"code": task.data["code"]})
    assert parse_tool_calls(call).tool_calls[0].arguments == {"code": task.data["code"]}
    rerendered = render_chat(tok.chat_template, [{"role": "assistant", "content": "", "tool_calls": [
        {"name": "python", "arguments": message.tool_calls[0].arguments}]}])  # fmt: skip
    assert call in rerendered and tok.encode(call, add_special_tokens=False) == ids[:-1]
    prompt = policy.chat.prompt_ids([Message(role=Role.USER, content=task.prompt)], tools=[PYTHON_TOOL])
    assert tok.convert_tokens_to_ids("<tool_call>") not in prompt[-3:]  # the header ends the prompt, not a call


@pytest.mark.parametrize(
    "text",
    [
        "x=781. Repeat x=x*4%787 until x<100.",
        "```output\nNameError: name 'prnt' is not defined\n```",
        'def f(n):\n    return {"a": n ** 2}  # naïve — ok\n\tdone',
    ],
)
def test_tokens_round_trip_and_every_digit_is_one_token(text: str) -> None:
    tok = load_policy(ASSET, threads=1).tokenizer
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode())  # merges, not bytes
    pieces = [tok.decode([i]) for i in ids]
    assert all(not (len(p.strip()) > 1 and any(c.isdigit() for c in p)) for p in pieces), pieces


def test_tools_on_tir_chain_default_to_this_model_and_plain_tir_chain_to_tiny_chain() -> None:
    assert builtin_model_path("tir-chain", tools=True) == ASSET
    assert builtin_model_path("tir-chain").name == "tiny-chain" and builtin_model_path("tir-math").name == "tiny-tir"
    assert builtin_model_path("tir-math", tools=True).name == "tiny-tir"  # no tool-calling warm start for it


def test_one_training_step_with_tools_runs_and_calls_the_python_tool(tmp_path: Path) -> None:
    """A real ``tirl train`` step with the real sandbox, no ``--model``: env.tools=true on tir-chain loads this
    model (before: tiny-chain, whose format has no tools, refused the run). About 20-40 s on 2 busy cores."""
    run = tmp_path / "run"
    small = ["--set", "trainer.prompts_per_step=2", "--set", "algo.group_size=2", "--set", "env.eval_size=4"]
    args = ["train", "--env", "tir-chain", "--set", "env.tools=true", "--steps", "1"]
    proc = tirl_in_process(*args, "--no-progress", "--run-dir", str(run), *small)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    trajs = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    calls = [c for t in trajs for m in t["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert calls and all(c["function"]["name"] == "python" for c in calls[:1]), trajs[0]["messages"]


def test_model_init_with_the_same_flags_makes_the_shipped_tokenizer(tmp_path: Path) -> None:
    """``tirl model init --corpus tasks --split-digits`` and ``tirl sft --arch qwen2`` train the same BPE."""
    flags = "--vocab 2048 --corpus tasks --split-digits --layers 4 --hidden 128 --heads 4".split()
    proc = tirl_in_process("model", "init", "--arch", "qwen2", *flags, "--out", str(tmp_path / "m"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    made, shipped = (json.loads((d / "tokenizer.json").read_text())["model"] for d in (tmp_path / "m", ASSET))
    assert made["vocab"] == shipped["vocab"] and made["merges"] == shipped["merges"]
    assert (tmp_path / "m" / "chat_template.jinja").read_bytes() == (ASSET / "chat_template.jinja").read_bytes()
    assert "vocabulary 1727 (embedding rows 2048)" in proc.stdout


def _rebuild(out: Path, *quick: str) -> None:
    """The README's two-command rebuild writing to ``out`` (its first stage next to it), ``quick`` appended.

    argparse's last occurrence wins, so ``quick`` flags replace the command's own.
    """
    for command in QWEN2_CHAIN_SFT_COMMAND.split(" && "):
        args = shlex.split(command.replace(QWEN2_CHAIN_STAGE1, str(out) + "-stage1"))[1:]
        args[args.index("--out") + 1] = args[args.index("--out") + 1].replace("src/tirl/assets/qwen2-chain", str(out))
        proc = tirl_in_process(*args, *quick)
        assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_rebuild_command_at_a_quick_size_writes_the_shipped_files_and_the_same_weights_twice(
    tmp_path: Path,
) -> None:
    """Two real quick rebuilds (both stages: 4 demonstrations, 2 steps each; 1-3 min on 2 busy cores).

    Everything but the weights is the same at any training length, so those files must equal the shipped
    ones; the weights of two runs must be equal (the full-length comparison is ``TIRL_REBUILD_ASSETS=1``).
    """
    quick = ["--steps", "2", "--train-tasks", "4", "--copy-steps", "1", "--eval-tasks", "1", "--eval-every", "100"]
    first, second = tmp_path / "a", tmp_path / "b"
    _rebuild(first, *quick)
    _rebuild(second, *quick)
    for name in NOT_TRAINED:
        assert unversioned(first / name) == unversioned(ASSET / name), name
    assert sha256(first / "model.safetensors") == sha256(second / "model.safetensors")
    assert sha256(first / "model.safetensors") != sha256(ASSET / "model.safetensors")  # it did train less


@pytest.mark.slow
@pytest.mark.timeout(7200)  # the suite's 300 s limit stopped it: both stages take 14-45 min on 2 cores
@pytest.mark.skipif(os.environ.get("TIRL_REBUILD_ASSETS") != "1", reason="the full rebuild takes 14-45 min")
def test_the_full_rebuild_is_byte_identical_to_the_shipped_checkpoint(tmp_path: Path) -> None:
    """The README's command, unchanged but for ``--out``: every shipped file byte for byte."""
    _rebuild(tmp_path / "full")
    for name in SHIPPED_FILES:
        assert unversioned(tmp_path / "full" / name) == unversioned(ASSET / name), name


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--tools"], "--arch qwen2"),  # the character model's template has no tools
        (["--tools", "--env", "swe-lite", "--arch", "qwen2"], "--env swe-lite"),
        (["--arch", "qwen2", "--vocab", "100"], "--vocab 100"),
        (["--arch", "qwen2", "--corpus", "web"], "--corpus"),
    ],
)
def test_bad_sft_model_flags_are_one_error_line(tmp_path: Path, args: list[str], named: str) -> None:
    proc = tirl_in_process("sft", "--out", str(tmp_path / "m"), *args)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert named in lines[0] and not (tmp_path / "m").exists()
