"""The docs say what the code does: every ``tirl`` command line they show uses real options, every option
default they quote is the parser's default, and every config default they quote is the dataclass default.

Scanned: README.md, docs/*.md and examples/README.md — inline code (`` `tirl ...` ``) and command lines in
fenced blocks. Not covered: prose that states a default without naming its key or flag, and commands shown
through a shell variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from tirl.cli import COMMANDS, OneLineParser
from tirl.config import TirlConfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "README.md"]
INLINE = re.compile(r"`(tirl [a-z][^`\n]*)`")
BLOCK_LINE = re.compile(r"^\s*(?:\$\s*)?(?:\S+=\S+\s+)*(?:\.venv/bin/)?(tirl [a-z].*)$")


def _parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """(command,) and (command, sub) -> its parser, built the way ``tirl.cli.main`` builds it."""
    out: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for name, (module_name, help_text) in COMMANDS.items():
        parser = OneLineParser(prog=f"tirl {name}", description=help_text)
        importlib.import_module(f"tirl.commands.{module_name}").add_arguments(parser)
        out[(name,)] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    out[(name, sub)] = subparser
    return out


PARSERS = _parsers()


def _shown() -> list[tuple[str, str]]:
    """(where, command line) for every ``tirl`` command the docs show."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        in_block = False
        for number, line in enumerate(text.splitlines(), start=1):
            if line.lstrip().startswith("```"):
                in_block = not in_block
                continue
            where = f"{doc.relative_to(ROOT)}:{number}"
            if in_block:
                m = BLOCK_LINE.match(line)
                if m:
                    found.append((where, m.group(1).split("#")[0].split("&&")[0].split("|")[0].strip()))
            else:
                found += [(where, m.group(1)) for m in INLINE.finditer(line)]
    return found


def _parser_for(words: list[str]) -> tuple[tuple[str, ...], argparse.ArgumentParser] | None:
    if len(words) < 2 or (words[1],) not in PARSERS:
        return None
    key: tuple[str, ...] = (words[1],)
    if len(words) > 2 and (words[1], words[2]) in PARSERS:
        key = (words[1], words[2])
    return key, PARSERS[key]


def _options(key: tuple[str, ...], parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The options of ``parser``; for a command with sub-commands named as ``…`` or ``a|b``, those of every one."""
    parsers = [parser]
    if len(key) == 1:
        parsers += [p for k, p in PARSERS.items() if len(k) == 2 and k[0] == key[0]]
    return {opt: a for p in parsers for a in p._actions for opt in a.option_strings}


def _is_output(command: str) -> bool:
    """A line the command prints (``tirl serve: listening on …``), not a command."""
    return command.split()[1].endswith(":")


SHOWN = _shown()


def test_the_docs_show_commands() -> None:
    assert len(SHOWN) > 100 and {c.split()[1] for _, c in SHOWN} >= {"train", "eval", "diagnose", "serve"}


@pytest.mark.parametrize(("where", "command"), SHOWN, ids=[w for w, _ in SHOWN])
def test_every_shown_option_exists(where: str, command: str) -> None:
    if _is_output(command):
        return
    words = command.replace("\\|", "|").split()
    found = _parser_for(words)
    assert found is not None, f"{where}: `{command}` names no tirl command"
    options = _options(*found)
    for word in words:
        flag = word.strip("[]").split("=")[0]
        if flag.startswith("--") and flag != "--":
            assert flag in options, f"{where}: `{command}`: {flag} is not an option of `tirl {' '.join(found[0])}`"


# `[--flag VALUE]` in a synopsis, VALUE a number or a comma list (`[--n 200]`, `[--modes off,mask]`); a bare word
# (`[--split validation]`) is read as "optionally add this", not as a default
QUOTED_DEFAULT = re.compile(r"\[(--[a-z][\w-]*) ([0-9][\w.]*|[\w-]+(?:,[\w-]+)+)\]")


@pytest.mark.parametrize(("where", "command"), SHOWN, ids=[w for w, _ in SHOWN])
def test_every_quoted_option_default_is_the_parsers(where: str, command: str) -> None:
    found = _parser_for(command.replace("\\|", "|").split())
    if found is None:
        return
    options = _options(*found)
    for flag, value in QUOTED_DEFAULT.findall(command):
        action = options.get(flag)
        if action is None or "|" in value or action.default in (None, argparse.SUPPRESS):
            continue  # a choice list, or an option without a default (checked above)
        default = ",".join(action.default) if isinstance(action.default, list | tuple) else action.default
        assert _same(value, default), f"{where}: `{flag} {value}` but the default is {action.default!r}"


def _config_defaults() -> dict[str, Any]:
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(TirlConfig)
    for section in dataclasses.fields(TirlConfig):
        cls = hints[section.name]
        for f in dataclasses.fields(cls):
            out[f"{section.name}.{f.name}"] = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    return out


CONFIG_DEFAULTS = _config_defaults()
# "`algo.lr` ... default 5e-05", "`trainer.prompts_per_step` defaults to 8", "`env.name` (default `tir-chain`)"
KEY_DEFAULT = re.compile(
    r"`(" + "|".join(re.escape(k) for k in CONFIG_DEFAULTS) + r")`[^`.;\n]{0,12}?\(?\bdefaults?(?: to| is|:)? "
    r"(`[\w.+-]+`|[0-9][\w.+-]*|true|false)(?![\w.+-])(?!\s*(?:→|->))"  # "default 2048 → 1024" is history
)


def _same(value: str, default: Any) -> bool:
    if isinstance(default, bool):
        return value.lower() == str(default).lower()
    if isinstance(default, int | float) and not isinstance(default, bool):
        try:
            return float(value) == float(default)
        except ValueError:
            return False
    return value == str(default)


def test_every_quoted_config_default_is_the_dataclasses() -> None:
    checked = 0
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            for key, quoted in KEY_DEFAULT.findall(line):
                value = quoted.strip("`")
                checked += 1
                where = f"{doc.relative_to(ROOT)}:{number}"
                assert _same(value, CONFIG_DEFAULTS[key]), f"{where}: {key} default {value} but the code has " \
                    f"{CONFIG_DEFAULTS[key]!r}"  # fmt: skip
    assert checked >= 1
