"""Subcommands of the tirl CLI, one module each (see ``tirl.cli.COMMANDS``).

:func:`flag_overrides` is what every command that takes ``--set`` shares (``tirl train --steps N`` is
``--set trainer.steps=N``): a key set twice with two values — by two ``--set`` items, or by a ``--set`` and
a flag — is refused instead of one silently winning.
"""

from __future__ import annotations

from collections.abc import Sequence


def flag_overrides(overrides: Sequence[str], flags: Sequence[tuple[str, str, object | None]] = ()) -> list[str]:
    """``--set`` items, then ``KEY=VALUE`` for each given flag of ``flags`` (``(flag, key, value)``; None: not given).

    Raises :class:`~tirl.errors.ConfigError` when two ``--set`` items set one key (in tirl's name or a TRL/verl
    alias of it) to different values (the last used to win without a word: ``--set trainer.steps=3 --set
    trainer.steps=5`` trained 5; the same value twice is accepted), and when a ``--set`` item sets a key a
    given flag sets too (the flag used to win: ``--steps 1 --set trainer.steps=3`` trained one step). A
    malformed ``--set`` item is left to :func:`tirl.config.resolve_config`'s own error.
    """
    from tirl.config import parse_override, tirl_keys
    from tirl.config_aliases import translate
    from tirl.errors import ConfigError, TirlError, cut

    given = {key: (flag, value) for flag, key, value in flags if value is not None}
    keys = tirl_keys()
    seen: dict[str, tuple[str, str]] = {}  # key -> (the first --set item that set it, its value in tirl's terms)
    for item in overrides:
        try:
            parts, value = parse_override(item)
            moved = translate(".".join(parts), value, keys.__contains__)
        except TirlError:
            continue  # resolve_config reports it, with the same words as without a flag
        key = moved.key
        if key in given:
            flag, flag_value = given[key]
            raise ConfigError(
                f"{flag} {cut(str(flag_value))} and --set {cut(item)} both set {key} — give it once ({flag} is {key})"
            )
        first, first_value = seen.setdefault(key, (item, str(moved.value)))
        if first_value != str(moved.value):
            raise ConfigError(
                f"--set {cut(first)} and --set {cut(item)} both set {key} — give it once, with the value you mean"
            )
    return [*overrides, *(f"{key}={value}" for key, (_, value) in given.items())]
