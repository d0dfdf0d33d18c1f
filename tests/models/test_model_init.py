"""`tirl model init`: standard loading, determinism, a CPU training step, and bad input (one error line, exit 2).

The CLI runs in this process (:func:`tests.tiny_run.tirl_in_process`), so the suite does not
pay a fresh torch import per call (8-17 s each on a busy 2-core machine); one bad-flag case runs as a real
subprocess to keep the exit status and the stderr of a real process checked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tests.tiny_run import tirl_in_process as tirl
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from tirl.errors import ConfigError
from tirl.models.init import ModelSpec, init_model

TIRL = [sys.executable, "-m", "tirl.cli"]


def tirl_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``tirl ARGS`` as a real subprocess."""
    return subprocess.run([*TIRL, *args], capture_output=True, text=True, timeout=120)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_made_model_loads_with_the_auto_classes_and_trains_a_step(tmp_path: Path, arch: str) -> None:
    out = init_model(ModelSpec(arch=arch), tmp_path / arch)
    assert AutoConfig.from_pretrained(out).model_type == arch
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == ("Qwen2ForCausalLM" if arch == "qwen2" else "LlamaForCausalLM")
    assert (out / "chat_template.jinja").is_file() and tok.chat_template
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    text = "What is 12*7?\n```python\nprint(12*7)\n```"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text  # byte-level: lossless
    assert len(tok.encode(text, add_special_tokens=False)) < len(text)  # real merges, not characters
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)] * 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = model.model.embed_tokens.weight.detach().clone()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and not torch.equal(before, model.model.embed_tokens.weight)


def test_same_flags_give_the_same_files(tmp_path: Path) -> None:
    a = init_model(ModelSpec(seed=3), tmp_path / "a")
    b = init_model(ModelSpec(seed=3), tmp_path / "b")
    c = init_model(ModelSpec(seed=4), tmp_path / "c")
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    wa, wb, wc = (load_file(p / "model.safetensors") for p in (a, b, c))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)


def test_size_flags_make_a_larger_model(tmp_path: Path) -> None:
    out = tmp_path / "m"
    proc = tirl("model", "init", "--arch", "llama", "--out", str(out), "--layers", "3", "--hidden", "128")
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (3, 128, 1024)
    assert "tool calls: yes" in proc.stdout


def test_bad_flags_and_an_existing_out_are_one_error_line(tmp_path: Path) -> None:
    assert "--vocab 10" in one_error_line(tirl_process("model", "init", "--out", str(tmp_path / "x"), "--vocab", "10"))
    assert not (tmp_path / "x").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    line = one_error_line(tirl("model", "init", "--out", str(tmp_path / "full")))
    assert "exists and is not an empty directory" in line and "--out" in line
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    # a parent that exists but takes no new entry: the error names the user's --out, not a temporary name
    line = one_error_line(tirl("model", "init", "--out", "/proc/tirl-model"))
    assert line.startswith("error: /proc/tirl-model: cannot write in /proc (") and "writable directory" in line
    with pytest.raises(ConfigError, match="--hidden 100 is not divisible by --heads 3"):
        ModelSpec(hidden=100, heads=3).check()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(ModelSpec(), tmp_path_factory.mktemp("made") / "m")


def _copy(src: Path, dst: Path, drop: tuple[str, ...]) -> Path:
    shutil.copytree(src, dst)
    for name in drop:
        (dst / name).unlink()
    return dst


def test_checkpoint_without_tokenizer_is_named(made: Path, tmp_path: Path) -> None:
    bad = _copy(made, tmp_path / "bad", ("tokenizer.json", "tokenizer_config.json"))
    line = one_error_line(tirl("model", "check", str(bad)))
    assert "has no tokenizer" in line and "tokenizer.save_pretrained" in line


def test_checkpoint_without_chat_template_is_named(made: Path, tmp_path: Path) -> None:
    bad = _copy(made, tmp_path / "bad", ("chat_template.jinja",))
    line = one_error_line(tirl("model", "check", str(bad)))
    assert "has no chat template" in line and "chat_template.jinja" in line
    line = one_error_line(tirl("serve", "--model", str(bad), "--port", "0"))  # every command loads the same way
    assert "has no chat template" in line


def test_template_without_tool_support_is_named(made: Path, tmp_path: Path) -> None:
    bad = _copy(made, tmp_path / "bad", ("chat_template.jinja",))
    plain = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    (bad / "chat_template.jinja").write_text(plain)
    assert tirl("model", "check", str(bad)).returncode == 0  # fine for episodes without tools
    line = one_error_line(tirl("model", "check", str(bad), "--tools"))
    assert "no tool support" in line and "tool definitions" in line and "assistant tool_calls" in line
    assert "tirl model init" in line


def test_generator_vllm_is_accepted_and_says_what_it_needs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401

        pytest.skip("vLLM is installed here: the flag would start an engine")
    except ImportError:
        pass
    proc = tirl("train", "--generator", "vllm", "--steps", "1", "--run-dir", str(tmp_path / "run"), "--no-progress")
    line = one_error_line(proc)  # argparse accepts it; the set-up check names what is missing
    assert "vLLM" in line and "--generator openai" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", [["model", "check"], ["serve", "--port", "0", "--model"]])
def test_a_run_directory_given_as_a_model_names_its_checkpoint(tmp_path: Path, command: list[str]) -> None:
    """It said "has no tokenizer ... save_pretrained" (a run's config.json is tirl's own, not a model's)."""
    run = tmp_path / "run"
    for step in (1, 3, 2):
        (run / "checkpoints" / f"step-{step}" / "model").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "metrics.jsonl").write_text("")
    line = one_error_line(tirl(*command, str(run)))
    fix = f"give a checkpoint's model: {run}/checkpoints/step-3/model"
    assert line == f"error: {run}: is a tirl run directory, not a model — {fix}"
