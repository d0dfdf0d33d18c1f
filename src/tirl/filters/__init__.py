"""Batch filters: the void-turn rule and group-level checks."""

from tirl.filters.void_turn import FilterResult, FilterStats, VoidTurnFilter, judge_trajectory

__all__ = ["FilterResult", "FilterStats", "VoidTurnFilter", "judge_trajectory"]
