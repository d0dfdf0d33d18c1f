"""Every config key is set to a chosen value by at least one test (issue 21).

A key counts as set when a test file holds one of:

* a dotted override ``section.key=VALUE`` (``--set``, ``load_config(overrides=...)``) in a string;
* a TOML table ``[section]`` with a line ``key = VALUE`` in a string;
* ``key=`` in a call of the section's class (``AlgoConfig(kl_coef=...)``), or in ``replace(x.section, key=...)``;
* the ``tirl train`` shortcut flag of the key (``--ray-address`` for ``trainer.ray_address``);
* a dict literal of at least two entries whose keys are all fields of one section (a table of values that a
  test turns into ``algo.KEY=VALUE`` overrides, as ``tests/trainer/test_loss_plumbing.py`` does).

Not counted: the round-trip property (``tests/test_config_roundtrip.py``), which sets every key to drawn
values without running anything with them. Not covered: whether a test that sets a key also asserts on
what it changes (review that by reading the test the failure names).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from tirl.config import TirlConfig

TESTS = Path(__file__).parent
EXCLUDED = {"test_config_roundtrip.py", Path(__file__).name}
SHORTCUTS = {  # tirl train flag -> the key it sets (tirl.commands.train)
    "--model": "model.path",
    "--env": "env.name",
    "--steps": "trainer.steps",
    "--generator": "model.generator",
    "--base-url": "model.base_url",
    "--backend": "trainer.backend",
    "--ray-address": "trainer.ray_address",
}


def all_keys() -> dict[str, str]:
    """``section.key`` -> the section's config class name, for every field of every section."""
    out = {}
    for section in dataclasses.fields(TirlConfig):
        cls = section.default_factory  # type: ignore[misc]
        for f in dataclasses.fields(cls):
            out[f"{section.name}.{f.name}"] = cls.__name__
    return out


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _keys_in_string(text: str, keys: dict[str, str]) -> set[str]:
    found = {k for k in keys if re.search(rf"(?<![\w.]){re.escape(k)}\s*=", text)}
    for table in re.finditer(r"^\s*\[(\w+)\]\s*$((?:\n(?!\s*\[).*)*)", text, re.MULTILINE):
        for line in table.group(2).splitlines():
            m = re.match(r"\s*(\w+)\s*=", line)
            if m and f"{table.group(1)}.{m.group(1)}" in keys:
                found.add(f"{table.group(1)}.{m.group(1)}")
    found |= {key for flag, key in SHORTCUTS.items() if text == flag}
    return found


def _keys_in_call(node: ast.Call, keys: dict[str, str]) -> set[str]:
    name = _call_name(node)
    words = {kw.arg for kw in node.keywords if kw.arg}
    found = {k for k, cls in keys.items() if cls == name and k.split(".", 1)[1] in words}
    if name == "replace" and node.args and isinstance(node.args[0], ast.Attribute):
        section = node.args[0].attr
        found |= {f"{section}.{w}" for w in words if f"{section}.{w}" in keys}
    return found


def keys_set_in(source: str, keys: dict[str, str]) -> set[str]:
    """The config keys one test file sets (see the module docstring for what counts)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= _keys_in_string(node.value, keys)
        elif isinstance(node, ast.JoinedStr):  # f"algo.lr={lr}": the literal parts
            text = "".join(v.value if isinstance(v, ast.Constant) else "0" for v in node.values)
            found |= _keys_in_string(text, keys)
        elif isinstance(node, ast.Call):
            found |= _keys_in_call(node, keys)
        elif isinstance(node, ast.Dict):
            found |= _keys_in_table(node, keys)
    return found


def _keys_in_table(node: ast.Dict, keys: dict[str, str]) -> set[str]:
    names = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    if len(names) < 2 or len(names) != len(node.keys):
        return set()
    sections = {k.split(".", 1)[0] for k in keys}
    return {f"{sec}.{n}" for sec in sections if all(f"{sec}.{n}" in keys for n in names) for n in names}


def unset_keys() -> list[str]:
    keys = all_keys()
    seen: set[str] = set()
    for path in sorted(TESTS.rglob("*.py")):
        if path.name not in EXCLUDED:
            seen |= keys_set_in(path.read_text(encoding="utf-8"), keys)
    return sorted(set(keys) - seen)


def test_the_scanner_sees_each_way_of_setting_a_key() -> None:
    keys = all_keys()
    src = '''
load_config(None, ["algo.lr=1e-3", f"trainer.steps={n}"])
cfg = AlgoConfig(kl_coef=0.1)
cfg2 = replace(cfg.sandbox, pool_size=2)
TABLE = {"clip_low": 0.1, "clip_high": 0.3}
NOT_A_TABLE = {"clip_low": 0.1, "colour": "red"}
TOML = """
[model]
dtype = "bfloat16"
[env]
seed = 3
"""
main(["train", "--ray-address", "auto"])
'''
    assert keys_set_in(src, keys) == {
        "algo.lr", "trainer.steps", "algo.kl_coef", "sandbox.pool_size", "model.dtype", "env.seed",
        "trainer.ray_address", "algo.clip_low", "algo.clip_high",
    }  # fmt: skip
    assert keys_set_in('x = "algo.lr"\ny = cfg.algo.kl_coef == 0\n', keys) == set()  # reading is not setting


def test_every_config_key_is_set_by_some_test() -> None:
    assert unset_keys() == []
