"""Subcommands of the tirl CLI, one module each (see ``tirl.cli.COMMANDS``).

:func:`flag_overrides` is what the commands with config shortcuts share (``tirl train --steps N`` is
``--set trainer.steps=N``): a key set both ways is refused instead of one silently winning.
"""

from __future__ import annotations

from collections.abc import Sequence


def flag_overrides(overrides: Sequence[str], flags: Sequence[tuple[str, str, object | None]]) -> list[str]:
    """``--set`` items, then ``KEY=VALUE`` for each given flag of ``flags`` (``(flag, key, value)``; None: not given).

    Raises :class:`~tirl.errors.ConfigError` when a ``--set`` item (in tirl's name or a TRL/verl alias of it) sets a
    key a given flag sets too: the flag used to win without a word, so ``--steps 1 --set trainer.steps=3`` trained
    one step; and when two ``--set`` items set the same key (the last used to win without a word). ``flags=[]``
    checks a command's ``--set`` list alone. A malformed ``--set`` item is left to
    :func:`tirl.config.resolve_config`'s own error.
    """
    from tirl.config import parse_override, tirl_keys
    from tirl.config_aliases import translate
    from tirl.errors import ConfigError, TirlError, cut

    given = {key: (flag, value) for flag, key, value in flags if value is not None}
    keys = tirl_keys()
    seen: dict[str, str] = {}
    for item in overrides:
        try:
            parts, value = parse_override(item)
            key = translate(".".join(parts), value, keys.__contains__).key
        except TirlError:
            continue  # resolve_config reports it, with the same words as without a flag
        if key in seen:  # the last one used to win without a word
            raise ConfigError(
                f"--set {cut(seen[key])} and --set {cut(item)} both set {key} — give it once, with the value you mean"
            )
        seen[key] = item
        if key in given:
            flag, flag_value = given[key]
            raise ConfigError(
                f"{flag} {cut(str(flag_value))} and --set {cut(item)} both set {key} — give it once ({flag} is {key})"
            )
    return [*overrides, *(f"{key}={value}" for key, (_, value) in given.items())]
