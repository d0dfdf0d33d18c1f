"""``tirl config``: print the resolved config (``show``) or the TRL/verl names tirl accepts (``aliases``).

``tirl config show [--config FILE.toml] [--set KEY=VALUE ...] [--resume RUN_DIR]`` prints the config a
``tirl train`` with the same arguments would run, as TOML that ``--config`` reads back, each value followed by
its source (``default``, ``file``, ``--set``, ``saved`` for a run's own ``config.json``, or ``env NAME`` for a
default of the env's own job, :mod:`tirl.config_presets`; ``--env NAME`` is ``--set env.name=NAME``). Unset optional
keys (TOML has no null) are printed as comments. Notes on TRL/verl names go to stderr, as in ``tirl train``.

``tirl config aliases`` lists every TRL and verl name tirl accepts and what it becomes
(:mod:`tirl.config_aliases`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from tirl.commands import flag_overrides
from tirl.config import ResolvedConfig, config_to_dict, resolve_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``tirl config show`` and ``tirl config aliases``."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="{show,aliases}")
    show = sub.add_parser("show", help="print the resolved config as TOML, each value with its source")
    show.add_argument("--config", metavar="FILE.toml", help="a TOML config file")
    show.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[])
    show.add_argument("--env", metavar="NAME", help="environment name (env.name), as tirl train --env")
    show.add_argument("--resume", metavar="RUN_DIR", help="start from a run's saved config.json")
    sub.add_parser("aliases", help="the TRL and verl names tirl accepts, and the tirl key each becomes")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "nan"  # the config refuses non-finite values
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def render_toml(resolved: ResolvedConfig) -> str:
    """The resolved config as TOML, one ``key = value  # source`` line per key, sections in config order."""
    lines: list[str] = []
    for section, values in config_to_dict(resolved.config).items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            source = resolved.sources.get(f"{section}.{key}", "default")
            if value is None:
                lines.append(f"# {key} is unset  # {source}")
            else:
                lines.append(f"{key} = {_toml_value(value)}  # {source}")
        lines.append("")
    return "\n".join(lines)


def _show(args: argparse.Namespace) -> int:
    from tirl.commands.train import read_run_config, read_saved_notes

    base = read_run_config(Path(args.resume)) if args.resume else None
    for note in read_saved_notes(Path(args.resume)) if args.resume else []:
        print(f"note: {note} (saved with the run)", file=sys.stderr)
    overrides = flag_overrides(args.overrides, [("--env", "env.name", args.env)])  # after --set, as tirl train's
    resolved = resolve_config(args.config, overrides, base)
    from tirl.envs.registry import get_spec

    get_spec(resolved.config.env.name)  # an unknown env is tirl train's error line here too (nothing imported)
    for note in resolved.notes:
        print(f"note: {note}", file=sys.stderr)
    sys.stdout.write(render_toml(resolved))
    return 0


def _aliases() -> int:
    from tirl.config_aliases import alias_table

    rows = alias_table()
    width = max(len(key) for key, _, _ in rows)
    for key, source, what in rows:
        print(f"{key:<{width}}  {source:<4}  {what}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of ``tirl config``."""
    return _show(args) if args.action == "show" else _aliases()
