"""Audit of test-judged rewards (swe-lite): does each reward stand on its verdict, what did the agent touch.

Three checks, the first two read the file only:

* **Reward against its verdict.** A trajectory whose evaluation recorded test counts
  (``info["eval"]``: ``tests_passed``, ``tests_total``, ``eval_timed_out``, ``eval_failure``, as
  :class:`~tirl.envs.swe_lite.SweLiteEnv` writes them) must not have a reward above what those counts
  give: 1.0 only when every counted test passed, with no time-out and no evaluation failure; else
  0 under the record's ``reward_mode`` ``"all"`` (the default's binary reward), the fraction passed
  under ``"fraction"``, and at most the fraction passed in an older record without a mode. A reward above
  that is ``mismatched`` (a trajectory edited after the fact,
  or a scorer that disagrees with its own verdict); a rewarded trajectory without counts in a file
  where others have them is ``rewarded_without_counts``.
* **Signs of tampering** in what the agent ran (its messages' text and tool-call arguments), by kind
  (:data:`SIGNS`): pytest configuration and plugins, interpreter start-up hooks, the judge's
  directory and hidden tests, process exits and tracing hooks, printed test summaries. A sign is a
  reason to look, not a verdict: ``grep conftest`` is harmless. Counted over all trajectories and
  over the rewarded ones, with example ids.
* **Re-judged** (``tirl audit --rejudge``): each rewarded trajectory replayed, and its edits judged on
  the task's own files alone (:mod:`tirl.envs.swe_replay`). ``outside_sources`` and
  ``not_reproduced`` are the suspect outcomes.

Not covered: trajectories without test counts (math, chain tasks: their reward is an answer match,
audited by the detector-too-eager check); signs written in ways the patterns do not match (base64,
string concatenation) — the re-judge does not depend on the signs.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from tirl.diagnostics.tally import Tally
from tirl.types import Role, Trajectory

if TYPE_CHECKING:  # the replay imports the env and the sandbox, which the file checks never need
    from tirl.envs.swe_replay import Rejudgement

#: kind -> pattern over what the agent ran (case-insensitive)
_SIGN_TEXT = {
    "pytest_config": r"conftest|pytest\.ini|tox\.ini|setup\.cfg|pyproject\.toml|pytest_plugins|addopts|PYTEST_\w+|"
    r"-p\s+no:",
    "startup_hooks": r"sitecustomize|usercustomize|\.pth\b|PYTHONSTARTUP|PYTHONPATH|__pycache__|\.pyc\b",
    "judge_files": r"\.tirl_eval|test_hidden|hidden_tests|/hidden\b",
    "exit_hooks": r"os\._exit|atexit|sys\.settrace|sys\.setprofile|faulthandler|signal\.signal|builtins|sys\.modules\[",
    "printed_verdict": r"(echo|print|printf|write)\b[^\n]*\b\d+\s+passed\b",
}
SIGNS: dict[str, re.Pattern[str]] = {kind: re.compile(text, re.I) for kind, text in _SIGN_TEXT.items()}
_EPS = 1e-9


def agent_text(traj: Trajectory) -> str:
    """What the agent wrote: its messages' text and its tool calls' arguments, in order."""
    parts: list[str] = []
    for message in traj.messages:
        if message.role is not Role.ASSISTANT:
            continue
        parts.append(message.content or "")
        for call in message.tool_calls:
            args = call.arguments
            parts.append(args if isinstance(args, str) else json.dumps(args, default=str))
    return "\n".join(parts)


def signs_of(traj: Trajectory) -> tuple[str, ...]:
    """The :data:`SIGNS` kinds found in what the agent wrote, in :data:`SIGNS` order."""
    text = agent_text(traj)
    return tuple(kind for kind, pattern in SIGNS.items() if pattern.search(text))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def verdict_ceiling(record: Any) -> float | None:
    """The most reward an evaluation record allows (``None``: the record has no test counts).

    1.0 when ``tests_total > 0``, every test passed, no time-out and no ``eval_failure``; else 0 when
    the record's ``reward_mode`` is ``"all"``, and the fraction passed otherwise (``"fraction"``, or a
    record written before the mode was recorded; 0 with nothing counted).
    """
    if not isinstance(record, dict):
        return None
    passed, total = _number(record.get("tests_passed")), _number(record.get("tests_total"))
    if passed is None or total is None:
        return None
    if total <= 0:
        return 0.0
    if passed >= total and not record.get("eval_timed_out") and not record.get("eval_failure"):
        return 1.0
    if record.get("reward_mode") == "all":
        return 0.0
    return min(passed, total) / total


def audit_verdicts(trajectories: list[Trajectory]) -> dict[str, Any] | None:
    """The first two checks (see the module docstring); ``None`` when no trajectory has test counts."""
    ceilings = [(t, verdict_ceiling(t.info.get("eval"))) for t in trajectories]
    judged = sum(c is not None for _, c in ceilings)
    if not judged:
        return None
    flags, signs = Tally(), Tally()  # flags: "rewarded", "mismatched", "rewarded_without_counts"
    signs_rewarded: Counter[str] = Counter()
    for traj, ceiling in ceilings:
        reward = traj.reward or 0.0
        if reward > _EPS:
            flags.add("rewarded", traj.id)
            if ceiling is None:
                flags.add("rewarded_without_counts", traj.id)
        if ceiling is not None and reward > ceiling + _EPS:
            flags.add("mismatched", traj.id)
        for kind in signs_of(traj):
            signs.add(kind, traj.id)
            signs_rewarded[kind] += reward > _EPS
    rows = signs.table(tuple(SIGNS), "count")
    return {
        "judged": judged,
        **{key: flags.entry(key) for key in ("rewarded", "mismatched", "rewarded_without_counts")},
        "signs": {kind: {**row, "rewarded": signs_rewarded[kind]} for kind, row in rows.items()},
    }


def rejudge_summary(items: list[Rejudgement]) -> dict[str, Any]:
    """``tirl audit --rejudge``'s section: counts by status (every status listed), a row per rewarded trajectory."""
    from tirl.envs.swe_replay import STATUSES

    counts = Counter(item.status for item in items)
    return {
        "rewarded": len(items),
        "by_status": {status: counts[status] for status in STATUSES},
        "items": [item.to_dict() for item in items],
    }


__all__ = ["SIGNS", "agent_text", "audit_verdicts", "rejudge_summary", "signs_of", "verdict_ceiling"]
