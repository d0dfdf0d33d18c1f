"""Batch filters: the void-turn rule applied to a training batch.

Public API (what the trainer, the CLI and the diagnostics use)::

    from tirl.filters import VoidTurnFilter, FilterResult, FilterStats, MODES, judge_trajectory, rules_from_config
    from tirl.filters import RuleOptions, rules_with_options  # a config's rule with command-line changes

``VoidTurnFilter.from_config(cfg.filter).apply(groups)`` judges every
trajectory once, sets ``Trajectory.void``/``void_turns``/``loss_weight`` and
returns the kept groups (aligned with the input) with their ``usable`` counts
and the batch statistics. A mode is one row of ``MODES``.

A whole trajectory JSONL file (``tirl filter``) is judged by
:func:`tirl.filters.stream.judge_file` (imported on its own: it loads ``orjson``).
"""

from tirl.filters.void_turn import (
    MODES,
    FilterMode,
    FilterResult,
    FilterStats,
    ModeRule,
    RuleOptions,
    VoidTurnFilter,
    judge_trajectory,
    rules_from_config,
    rules_with_options,
)

__all__ = [
    "MODES",
    "FilterMode",
    "FilterResult",
    "FilterStats",
    "ModeRule",
    "RuleOptions",
    "VoidTurnFilter",
    "judge_trajectory",
    "rules_from_config",
    "rules_with_options",
]
