"""Configuration: dataclasses, loaded from TOML, overridden with dotted ``key=value`` pairs.

>>> cfg = load_config(None, ["algo.clip_high=0.3", "trainer.steps=5"])
>>> (cfg.algo.clip_high, cfg.trainer.steps)
(0.3, 5)

Every section validates itself in ``__post_init__`` (ConfigError naming the key, the bad value and the fix); unknown
keys are errors (the closest valid key suggested), and so is a key below a value (``algo.clip_high.x``). Each value
is read as its key's type by :func:`tirl.config_values.coerce`: a number that is not the one written (``1e-400``
read as 0.0, ``1e999``, ``inf``, a float for an integer key, beyond 64 bits) is a ConfigError, as is a TOML file not
UTF-8, too deep or with an over-long integer. A TOML file and a saved config have types: a string there for a
number or boolean key (``steps = "5"``) is refused with the value to write instead; ``--set`` text is parsed.
Every numeric key has a range (:data:`tirl.config_ranges.RANGES`, in docs/configuration.md) checked at the end of
its section; a key set but unused by the rest of the config is a note
(:mod:`tirl.config_notes`). The sections themselves are :mod:`tirl.config_schema`'s, re-exported here.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tirl.config_notes import moot_settings, unused_settings
from tirl.config_schema import (  # re-exported: import the sections from tirl.config
    AlgoConfig,
    EnvConfig,
    FilterConfig,
    GenerationConfig,
    ModelConfig,
    RolloutConfig,
    SandboxConfig,
    TirlConfig,
    TrainerConfig,
)
from tirl.config_values import coerce, quoted_kind, toml_float, toml_line, unquoted
from tirl.errors import ConfigError, InputError, InvalidValue, cut, show_value
from tirl.inputs import input_file


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@dataclass(frozen=True)
class _Exact:
    """A value read from a saved config (``config.json``): typed already, so no text rule applies to it.

    Command-line and TOML text has two shorthands that a saved value must not go through again: the strings
    ``none``/``null`` mean "unset" for an optional key, and a string given for a list is split at commas.
    """

    value: Any


@dataclass(frozen=True)
class _FromFile:
    """A value a TOML file gave for the key it spells ``written``.

    Text shorthands apply (``"none"``, a comma list), but a string for a number or boolean key is refused
    (:func:`_refuse_quoted`).
    """

    value: Any
    written: str  # the dotted key as the file spells it (``trainer.steps``, ``max_steps``)
    path: Path
    text: str  # the file's text, to find the line of a refused value


def _raw(value: Any) -> Any:
    return value.value if isinstance(value, _Exact | _FromFile) else value


def _refuse_quoted(leaf: _Exact | _FromFile, tp: Any, key: str) -> None:
    """ConfigError when ``leaf`` is a string for a number or boolean key ``key``: its file has types."""
    kind = quoted_kind(leaf.value, tp)
    if kind is None:
        return
    shown, fix = cut(json.dumps(leaf.value, ensure_ascii=False)), unquoted(leaf.value, tp, key)
    if isinstance(leaf, _Exact):  # tirl writes typed JSON: a string here is an edit
        raise ConfigError(f"saved config {key} = {shown} is a string, but tirl writes {kind} there — write "
                          f"{fix or kind} without quotes, or restore the config.json tirl wrote")  # fmt: skip
    name = leaf.written.rpartition(".")[2]
    line = toml_line(leaf.text, name, leaf.value)
    raise ConfigError(f"config file {leaf.path}{'' if line is None else f':{line}'}: {cut(leaf.written)} = {shown} "
                      f"is a string, but {key} takes {kind} — write {cut(name)}"
                      f"{f' = {fix}' if fix else f' as {kind}'}, without quotes")  # fmt: skip


def _not_a_section(key: str, given: dict[str, Any], where: str | None = None) -> ConfigError:
    """``key`` (``algo.clip_high``) holds a value but was given keys below it (``given``: ``{"x": "0.3"}``).

    ``where`` names the input (default: the first key given, ``config key 'algo.clip_high.x'``).
    """
    leaves = _leaves(given, f"{key}.")
    value = _raw(leaves[0][1]) if leaves else None
    text = value if isinstance(value, str) else show_value(value) if isinstance(value, int | float) else "VALUE"
    if where is None:
        where = f"config key {show_value(leaves[0][0])}" if leaves else f"config table [{key}]"
    section, _, name = key.rpartition(".")
    return ConfigError(
        f"{where}: {key} is a value, not a section — set it directly: --set {key}={cut(text)}"
        + (f" (in a TOML file: {name} = ... under [{section}])" if section else "")
    )


def _unknown(key: str, valid: list[str], value: Any = None) -> ConfigError:
    """``key`` is no config key: the closest one, and the file when a TOML file gave it (``value``'s leaves)."""
    section, _, name = key.rpartition(".")
    close = [f"{section}.{c}" if section else c for c in difflib.get_close_matches(name, valid, n=1)]
    if not section and not close:  # `steps = 3` above every table of a TOML file, or --set steps=3
        close = sorted(k for k in tirl_keys() if k.rpartition(".")[2] == name)
    hint = f" — did you mean '{close[0]}'?" if close else f" — valid keys: {', '.join(sorted(valid))}"
    leaves = _leaves(value) if isinstance(value, dict) else [("", value)]
    files = [leaf.path for _, leaf in leaves if isinstance(leaf, _FromFile)]
    if files and not section and "." in (close or [""])[0]:
        sec, _, leaf = close[0].partition(".")
        hint += f" ({leaf} = ... under [{sec}])"
    where = f"config file {files[0]}: " if files else ""  # it read as a --set typo, with --config beside it
    return ConfigError(f"{where}unknown config key {show_value(key)}{hint}")


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if key not in names:
            raise _unknown(full, names, value)
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                given, first = show_value(_raw(value)), fields(tp)[0].name
                raise ConfigError(f"config section [{full}] must be a table of keys, not {given} — set a key inside "
                                  f"it: --set {full}.{first}=VALUE, or a [{full}] table in a TOML file")  # fmt: skip
            kwargs[key] = _build(tp, value, f"{full}.")  # type: ignore[arg-type]
        elif isinstance(value, dict):  # --set algo.clip_high.x=0.3, or a [algo.clip_high] table
            raise _not_a_section(full, value)
        elif isinstance(value, _Exact | _FromFile):
            _refuse_quoted(value, tp, full)
            kwargs[key] = coerce(value.value, tp, full, text=isinstance(value, _FromFile))
        else:
            kwargs[key] = coerce(value, tp, full)
    try:
        return cls(**kwargs)
    except InvalidValue as exc:  # a value out of its range: from a file, the file is named (it read as a --set)
        leaf = data.get(exc.key.removeprefix(prefix)) if exc.key.startswith(prefix) else None
        if isinstance(leaf, _FromFile):
            raise ConfigError(f"config file {leaf.path}: {str(exc).removeprefix('config ')}") from None
        raise


def _exact_tree(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``data`` with every leaf wrapped in :class:`_Exact` (tables stay dicts, so overrides can replace leaves)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(f"saved config key {prefix}{key!r} is not a string — restore the config.json tirl wrote")
        out[key] = _exact_tree(value, f"{prefix}{key}.") if isinstance(value, dict) else _Exact(value)
    return out


def parse_override(text: str) -> tuple[list[str], str]:
    """Split ``"algo.clip_high=0.3"`` into (["algo", "clip_high"], "0.3")."""
    if "=" not in text:
        raise ConfigError(f"override {show_value(text)} is not key=value — write e.g. algo.clip_high=0.3")
    key, value = text.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"override {show_value(text)} has an empty key — write e.g. algo.clip_high=0.3")
    return parts, value.strip()


def _read_toml(p: Path, limit: int = 1 << 20) -> tuple[dict[str, Any], str]:
    """A TOML file's table and text; every problem (kind of path, bytes, syntax, depth, huge ints) is a ConfigError.

    So is an empty one (an empty pipe trained with the defaults): to use the defaults, leave --config out. A file
    that starts with ``{`` is a saved config (a run's ``config.json``): its leaves come back :class:`_Exact`.
    """
    try:
        input_file(p, "check the path given to --config")
    except InputError as exc:
        raise ConfigError(f"config file {p} {exc.problem} — {exc.fix}") from None
    try:  # bounded: a pipe that never ends (`yes |`) took the whole machine's memory
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise ConfigError(f"config file {p} is larger than {limit >> 20} MB — give a TOML config file")
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {p} is not UTF-8 ({exc.reason} at byte {exc.start}) — re-encode it") from None
    except OSError as exc:
        raise ConfigError(f"config file {p} cannot be read ({exc.strerror}) — check the --config path") from None
    if not text.strip():
        raise ConfigError(f"config file {p} is empty — write the settings into it, or leave --config out to "
                          "use the defaults")  # fmt: skip
    if text.lstrip().startswith("{"):  # no TOML document starts so: JSON, as a run's config.json
        return _saved_json(p, text), text
    try:
        return tomllib.loads(text, parse_float=toml_float), text
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc} — fix that line") from None
    except RecursionError:
        raise ConfigError(f"config file {p} is nested too deeply — flatten its arrays and tables") from None
    except ValueError as exc:  # an integer over Python's 4300-digit conversion limit
        raise ConfigError(f"config file {p} holds a value tirl cannot read ({exc}) — shorten it") from None


def _saved_json(p: Path, text: str) -> dict[str, Any]:
    """A saved config given to ``--config`` (a run's ``config.json``): its values exact, as :func:`config_from_dict`."""
    from tirl.jsonl import JSONProblem, parse_json

    fix = "give a run's config.json as tirl wrote it, or a TOML config file"
    try:
        data = parse_json(text, allow_nan=False, unique_keys=True)
    except JSONProblem as exc:
        problem = f"starts like JSON (a run's config.json) but cannot be read: {exc}"
        raise ConfigError(f"config file {p} {problem} — {fix}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} holds a JSON {type(data).__name__}, not an object — {fix}")
    return _exact_tree(data)


@dataclass(frozen=True)
class ResolvedConfig:
    """A config with where each set key came from and the notes on foreign names it translated."""

    config: TirlConfig
    sources: dict[str, str]  # dotted key -> "file" | "--set" | "saved" | "env NAME" (not here: defaults)
    notes: list[str]  # one line per TRL/verl name or value read as tirl's (tirl.config_aliases)


def tirl_keys() -> frozenset[str]:
    """Every dotted config key (``algo.clip_high``…)."""
    hints = _hints(TirlConfig)
    return frozenset(
        f"{s.name}.{f.name}" for s in dataclasses.fields(TirlConfig) for f in dataclasses.fields(hints[s.name])
    )


def _leaves(node: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        out.extend(_leaves(value, f"{path}.") if isinstance(value, dict) else [(path, value)])
    return out


def _place(data: dict[str, Any], key: str, value: Any, where: str) -> None:
    parts = key.split(".")
    node = data
    for depth, part in enumerate(parts[:-1], start=1):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            if depth == 1:  # --set algo=3 before it: the section's own error (or an unknown key's)
                _build(TirlConfig, {part: child}, "")
            raise _not_a_section(".".join(parts[:depth]), _tree(parts[depth:], value), where)
        node = child
    node[parts[-1]] = value


def _tree(parts: list[str], value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``["a", "b"]``."""
    for part in reversed(parts):
        value = {part: value}
    return value  # type: ignore[no-any-return]


def _drop(data: dict[str, Any], key: str) -> None:
    parts = key.split(".")
    chain = [data]
    for part in parts[:-1]:
        chain.append(chain[-1][part])
    del chain[-1][parts[-1]]
    for node, part in zip(reversed(chain[:-1]), reversed(parts[:-1]), strict=True):
        if not node[part]:
            del node[part]


def resolve_config(
    path: str | Path | None = None, overrides: list[str] | None = None, base: dict[str, Any] | None = None
) -> ResolvedConfig:
    """:func:`load_config`, plus each key's source and the notes on TRL/verl names it translated."""
    from tirl.config_aliases import translate
    from tirl.config_presets import env_preset

    if path is not None and base is not None:
        raise ConfigError("a saved config and --config were both given — a resumed run keeps its own config")
    keys = tirl_keys()
    data: dict[str, Any] = _exact_tree(base) if base is not None else {}
    sources = {key: "saved" for key, _ in _leaves(data)}
    notes: list[str] = []
    if path is not None:
        p = Path(path)
        data, text = _read_toml(p)
        for key, value in _leaves(data):
            if isinstance(value, _Exact):  # a saved config (JSON): tirl's own names, values as they were
                sources[key] = "file"
                continue
            moved = translate(key, value, keys.__contains__)
            _drop(data, key)  # a value as written keeps its file (TOML types); a translated one is tirl's text
            leaf = _FromFile(value, key, p, text) if moved.value is value else moved.value
            _place(data, moved.key, leaf, f"config file {p}")
            notes += [moved.note] if moved.note else []
            sources[moved.key] = "file"
    for item in overrides or []:
        parts, value = parse_override(item)
        moved = translate(".".join(parts), value, keys.__contains__)
        notes += [moved.note] if moved.note else []
        _place(data, moved.key, moved.value, f"override {show_value(item)}")
        sources[moved.key] = "--set"
    env_name, preset = env_preset(data, sources, EnvConfig.name)  # the env's own defaults, under file and --set
    for key, value in preset.items():
        _place(data, key, value, f"env {env_name} preset")
        sources[key] = f"env {env_name}"
    c = _build(TirlConfig, data, "")
    given = [key for key, source in sources.items() if source in ("file", "--set")]  # not a saved run's, nor a preset's
    return ResolvedConfig(c, sources, [*notes, *unused_settings(c.model, c.trainer), *moot_settings(c, given)])


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, base: dict[str, Any] | None = None
) -> TirlConfig:
    """Load a :class:`TirlConfig` from an optional TOML file, then apply dotted overrides.

    ``base`` is a saved config (what :func:`config_to_dict` wrote, e.g. a run's ``config.json``): it is read
    exactly, with no command-line shorthand, and ``overrides`` then apply on top of it (``--resume --steps 50``).
    A ``path`` and a ``base`` together are refused: a run continues its own config, not a file's. TRL's and
    verl's names for tirl keys are accepted (:mod:`tirl.config_aliases`); :func:`resolve_config` also returns
    the notes that name the tirl key each one became.
    """
    return resolve_config(path, overrides, base).config


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """A plain JSON-ready dict (``config.json``, summary.json, the evidence bundle, every rank's config).

    :func:`config_from_dict` reads it back to an equal config: ``config_from_dict(config_to_dict(c)) == c``.
    """
    return dataclasses.asdict(cfg)


def config_from_dict(data: dict[str, Any], overrides: list[str] | None = None) -> TirlConfig:
    """The :class:`TirlConfig` that :func:`config_to_dict` wrote, rebuilt exactly, then ``overrides`` applied.

    Lossless where the old ``key=value`` flattening was not: a list item holding a comma stays one item, and
    the string ``"none"`` stays a string. Keys missing from ``data`` take their defaults (a config saved by
    an older tirl); unknown keys and values of the wrong type are one ConfigError naming the key.
    """
    if not isinstance(data, dict):
        raise ConfigError("a saved config must be a JSON object of sections — restore the config.json tirl wrote")
    return load_config(None, overrides, base=data)


__all__ = [
    "AlgoConfig",
    "EnvConfig",
    "FilterConfig",
    "GenerationConfig",
    "ModelConfig",
    "ResolvedConfig",
    "RolloutConfig",
    "SandboxConfig",
    "TirlConfig",
    "TrainerConfig",
    "config_from_dict",
    "config_to_dict",
    "load_config",
    "parse_override",
    "resolve_config",
    "tirl_keys",
]
