"""Config loading, overrides and validation messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tirl.config import TirlConfig, load_config
from tirl.errors import ConfigError


def test_defaults_load() -> None:
    cfg = load_config()
    assert isinstance(cfg, TirlConfig)
    assert cfg.filter.mode == "off" and cfg.algo.advantage == "grpo"  # the ablation's best mode (README)
    assert (cfg.env.name, cfg.env.max_turns) == ("tir-chain", 6)


def test_toml_then_overrides(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[algo]\nclip_high = 0.3\ngroup_size = 4\n[filter]\nmode = "mask"\n')
    cfg = load_config(f, ["algo.group_size=6", "algo.dual_clip=none", "filter.exec_langs=python,bash"])
    assert cfg.algo.clip_high == 0.3 and cfg.algo.group_size == 6 and cfg.algo.dual_clip is None
    assert cfg.filter.mode == "mask" and cfg.filter.exec_langs == ["python", "bash"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algo.group_size=1", "algo.group_size=1 is invalid: group-relative advantages need >= 2"),
        ("filter.mode=sometimes", "choose one of drop, mask, off"),
        ("algo.lr=fast", "algo.lr='fast' is invalid: use a number"),
        ("algo.clip_hi=0.3", "did you mean 'algo.clip_high'"),
        ("trainer.steps=2.5", "use an integer"),
        ("nosuch.key=1", "unknown config key 'nosuch'"),
        ("algo", "is not key=value"),
        ("model.generator=openai", "needs a server"),
    ],
)
def test_errors_name_key_and_fix(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as exc:
        load_config(None, [override])
    assert message in str(exc.value)


def test_missing_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match=r"is a directory, not a file — check the path given to --config"):
        load_config(tmp_path)  # was "does not exist", then "cannot be read (Is a directory)"
    bad = tmp_path / "bad.toml"
    bad.write_text("[algo\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_list_overrides_take_a_toml_array_or_comma_separated_items() -> None:
    def markers(text: str) -> list[str]:
        return load_config(None, [f"filter.answer_markers={text}"]).filter.answer_markers

    assert markers("####,ANS") == ["####", "ANS"]
    assert markers('["####", "a,b"]') == ["####", "a,b"]  # an item holding a comma (split on commas before)
    assert markers("[]") == [] and markers("") == []
    for bad, needle in (('["####", x]', "is not a TOML array"), ("[[[", "is not a TOML array"), ("[1, 2]", "string")):
        with pytest.raises(ConfigError, match=needle):
            markers(bad)


def test_a_setting_the_rest_of_the_config_does_not_use_gets_a_note() -> None:
    """``--base-url`` without ``--generator openai`` (and ``--ray-address`` without ``--backend ray``) did nothing,
    silently; now the resolved config carries a note that tirl train and tirl config show print."""
    from tirl.config import resolve_config

    notes = resolve_config(None, ["model.base_url=http://gen:8000/v1", "trainer.ray_address=auto"]).notes
    assert any(n.startswith("model.base_url is set but model.generator=hf does not use it") for n in notes)
    assert any(n.startswith("trainer.ray_address is set but trainer.backend=local") for n in notes)
    used = ["model.base_url=http://gen:8000/v1", "model.generator=openai", "trainer.ray_address=auto"]
    used.append("trainer.backend=ray")
    assert not [n for n in resolve_config(None, used).notes if "does not use it" in n]


MOOT = [  # (the key set, the value, what the note names as the setting that would use it)
    ("filter.void_penalty", "2.0", "filter.mode=penalize"),
    ("algo.kl_estimator", "k1", "algo.kl_coef > 0"),
    ("algo.lora_alpha", "16", "algo.lora_rank > 0"),
    ("algo.lora_targets", "q_proj", "algo.lora_rank > 0"),
    ("trainer.wandb_project", "mine", "trainer.wandb=online or offline"),
    ("sandbox.pool_size", "2", "sandbox.warm_pool=true"),
    ("model.vllm_gpu_memory_utilization", "0.9", "--generator vllm"),
    ("model.vllm_max_model_len", "4096", "--generator vllm"),
]
USED = {"filter.void_penalty": "filter.mode=penalize", "algo.kl_estimator": "algo.kl_coef=0.01",
        "algo.lora_alpha": "algo.lora_rank=8", "algo.lora_targets": "algo.lora_rank=8",
        "trainer.wandb_project": "trainer.wandb=offline", "sandbox.pool_size": "sandbox.warm_pool=true"}  # fmt: skip


@pytest.mark.parametrize(("key", "value", "user"), MOOT)
def test_a_key_another_setting_makes_moot_gets_a_note(tmp_path: Path, key: str, value: str, user: str) -> None:
    """``--set filter.void_penalty=2`` under filter.mode=off (the default), ``algo.kl_estimator`` at kl_coef 0,
    ``algo.lora_alpha`` without a LoRA rank, ... were accepted and did nothing, without a word."""
    from tirl.config import resolve_config

    off = {"sandbox.pool_size": ["sandbox.warm_pool=false"]}
    sets = [f"{key}={value}", *off.get(key, [])]
    notes = [n for n in resolve_config(None, sets).notes if n.startswith(f"{key} is set but")]
    assert len(notes) == 1 and user in notes[0], resolve_config(None, sets).notes
    toml = tmp_path / "c.toml"
    section, _, name = key.partition(".")
    toml.write_text(f"[{section}]\n{name} = {value if value[0].isdigit() else repr(value)}\n", encoding="utf-8")
    if key not in off:  # from a file the same
        assert [n for n in resolve_config(toml, []).notes if n.startswith(f"{key} is set but")]
    if key in USED:  # with the setting that uses it: no note
        assert not [n for n in resolve_config(None, [f"{key}={value}", USED[key]]).notes if " is set but " in n]
    assert not [n for n in resolve_config(None, off.get(key, [])).notes if " is set but " in n]  # defaults: none


def test_a_config_that_never_ends_is_refused_after_a_bounded_read(tmp_path: Path) -> None:
    """``--config /dev/zero`` (or /dev/full) was read to the end, which never comes: the machine ran out of memory.

    A device is now refused before it is read; a pipe that never ends (``yes |``) is what the bound stops.
    """
    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * (1 << 20) + b"\n")
    with pytest.raises(ConfigError, match=r"is larger than 1 MB — give a TOML config file"):
        load_config(str(big), [])
    with pytest.raises(ConfigError, match=r"config file /dev/zero is a device, not a file"):
        load_config("/dev/zero", [])
    # an endless pipe in a child whose address space is capped: a regression fails there, not on the whole machine
    code = (
        "from tirl.config import load_config\n"
        "try:\n    load_config('/dev/stdin', [])\nexcept Exception as e:\n    print(e)"
    )
    out = subprocess.run(["bash", "-c", f"ulimit -v 2000000; yes | {sys.executable} -c \"$0\"", code],
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert "config file /dev/stdin is larger than 1 MB" in out.stdout, out.stderr[-1000:]


@pytest.mark.parametrize("langs", ['[""]', '["py thon"]', '["python", " "]'])
def test_exec_langs_entries_must_be_one_word(tmp_path: Path, langs: str) -> None:
    """A TOML ``exec_langs = [""]`` was accepted (every python fence then read as void) where --exec-langs '' is not."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[filter]\nexec_langs = {langs}\n")
    with pytest.raises(ConfigError, match=r"filter\.exec_langs.*each one word"):
        load_config(str(cfg), [])


def test_a_file_that_is_not_toml_names_the_fix(tmp_path: Path) -> None:
    """The error said what was wrong and stopped there, with no fix."""
    bad = tmp_path / "c.toml"
    bad.write_text("not toml at all\n")
    with pytest.raises(ConfigError, match=r"is not valid TOML: .* — fix that line"):
        load_config(str(bad), [])


def test_an_empty_config_is_refused_from_a_file_and_from_a_pipe(tmp_path: Path) -> None:
    """``tirl train --config /dev/stdin`` of an empty pipe (a failed ``cat x |``) trained with the defaults; an
    empty file did the same. Both are one error line now; a file of comments only is still a valid config."""
    empty = tmp_path / "empty.toml"
    empty.write_text(" \n\n")
    with pytest.raises(ConfigError, match=r"config file .*empty\.toml is empty — .*leave --config out"):
        load_config(empty, [])
    comments = tmp_path / "defaults.toml"
    comments.write_text("# the defaults, on purpose\n")
    assert load_config(comments, []) == load_config(None, [])
    for command in (["config", "show"], ["train", "--steps", "1"]):
        got = subprocess.run([sys.executable, "-m", "tirl.cli", *command, "--config", "/dev/stdin"], input="",
                             capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)  # fmt: skip
        lines = got.stderr.strip().splitlines()
        assert got.returncode == 2 and len(lines) == 1, got.stderr
        assert lines[0].startswith("error: config file /dev/stdin is empty"), lines
    assert not (tmp_path / "runs").exists()
