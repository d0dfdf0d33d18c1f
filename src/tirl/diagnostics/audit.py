r"""Audit of a trajectory file: void turns and why, the detector-too-eager rate, turns, lengths, tool errors.

Which turns are void is decided by the one rule, :func:`tirl.filters.void_turn.judge_trajectory`
(:func:`tirl.parsing.judge_messages`); this module only *explains* a turn the
rule already judged void, with one reason from :data:`VOID_REASONS`:

* ``empty``: no text and no tool call;
* ``malformed_tool_call``: a tool call without a name or with arguments that are not JSON;
* ``truncated``: the turn hit the generation limit (``finish_reason == "length"``) or the
  episode ended ``overlong``;
* ``unclosed_fence``: a code fence that is never closed;
* ``blank_code``: a closed executable-language block with a blank body;
* ``non_exec_code``: only closed blocks of other languages (``text``, ``output``…);
* ``placeholder_answer``: a ``\boxed``/``<answer>`` that is empty or a placeholder;
* ``prose_only``: text with none of the above (e.g. "let me double-check").

The **detector-too-eager** check (seed 000, section 4.3): among void
trajectories whose ground truth is known, the fraction whose final answer
(:attr:`TrajectoryVerdict.final_answer`, the answer the model wrote) matches
it by :func:`tirl.answers.answers_match`; without an ``answer`` field, the
evaluator's ``correct`` (older files: ``info["correct"]``) is used when the model wrote an
answer. A high rate means the rule throws away good episodes.

Tool errors are read from tool messages in tirl's observation format
(``[timed out]``, ``[memory limit exceeded]``, ``[exit status N]``,
``[sandbox error: …]``) and from Python exception lines (``NameError: …``,
``Traceback``), in the policy's messages only (not those of the task's prompt:
:attr:`~tirl.types.Trajectory.policy_messages`). Not covered: other frameworks' error conventions beyond these.

Test-judged rewards (swe-lite) get the checks of :mod:`tirl.diagnostics.verdicts` (``verdicts``:
``None`` when no trajectory recorded test counts), and issues that name a function get
:mod:`tirl.diagnostics.swe_edits` (``edits``: does the first edit land in that function; ``None`` otherwise).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.answers import answers_match
from tirl.diagnostics.swe_edits import edit_locality
from tirl.diagnostics.tally import EXAMPLES, Tally
from tirl.diagnostics.verdicts import audit_verdicts
from tirl.fences import scan_fences
from tirl.filters.void_turn import judge_trajectory
from tirl.jsonl import read_trajectories
from tirl.parsing import DEFAULT_RULES, ParseRules
from tirl.types import Message, Role, TerminationReason, Trajectory

VOID_REASONS: tuple[str, ...] = (
    "empty",
    "malformed_tool_call",
    "truncated",
    "unclosed_fence",
    "blank_code",
    "non_exec_code",
    "placeholder_answer",
    "prose_only",
)
TOOL_ERRORS: tuple[str, ...] = ("timeout", "memory", "sandbox_error", "exception", "nonzero_exit")
_EXC_LINE = re.compile(r"^\s*(Traceback \(most recent call last\)|[A-Za-z_][\w.]*(Error|Exception)\b:?)", re.M)


def void_reason(message: Message, *, truncated: bool = False, rules: ParseRules = DEFAULT_RULES) -> str:
    """Why a turn that the rule judged void is void (an explanation, not a second rule)."""
    text = message.content or ""
    if not text.strip() and not message.tool_calls:
        return "empty"
    if message.tool_calls and not text.strip():
        return "malformed_tool_call"
    if truncated:
        return "truncated"
    if "```" in text or "~~~" in text:
        blocks, regions = scan_fences(text)
        if len(regions) > len(blocks):
            return "unclosed_fence"
        if any(rules.is_exec_lang(b.lang) for b in blocks):
            return "blank_code"
        if blocks:
            return "non_exec_code"
    if "\\boxed" in text or "<answer>" in text.lower():
        return "placeholder_answer"
    if message.tool_calls:
        return "malformed_tool_call"
    return "prose_only"


def tool_error(content: str | None) -> str | None:
    """The kind of error a tool observation reports, or ``None``."""
    text = content or ""
    if "[timed out]" in text:
        return "timeout"
    if "[memory limit exceeded]" in text:
        return "memory"
    if "[sandbox error" in text:
        return "sandbox_error"
    if _EXC_LINE.search(text):
        return "exception"
    if "[exit status" in text:
        return "nonzero_exit"
    return None


def _dist(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * (len(ordered) - 1) + 0.5))]

    return {
        "n": len(values),
        "mean": round(statistics.fmean(values), 3),
        "min": ordered[0],
        "p50": q(0.5),
        "p90": q(0.9),
        "max": ordered[-1],
    }


def _length(traj: Trajectory, unit: str) -> float:
    if unit == "sampled_tokens":
        return float(sum(t.sampled_tokens for t in traj.turns))
    return float(sum(len(m.content or "") for m in traj.assistant_messages))


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The audit's numbers; :meth:`to_dict` is the ``--json`` output."""

    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (documented in docs/diagnostics.md)."""
        return self.data


def _correct(traj: Trajectory, final_answer: str | None) -> bool | None:
    """Whether the model's final answer is correct; ``None`` when there is no ground truth.

    The ground truth is the trajectory's ``answer`` field. Without it, a boolean
    ``correct`` recorded by the environment's evaluator is used, but only
    when the model wrote a final answer (a void episode that was never evaluated
    is not counted).
    """
    if traj.answer is not None:
        return answers_match(final_answer, traj.answer)
    flag = traj.correct
    if isinstance(flag, bool) and final_answer is not None:
        return flag
    return None


def _truncated_turns(traj: Trajectory) -> set[int]:
    """Assistant-message indexes (the prompt's demonstrations counted, as in ``void_turns``) of turns cut short."""
    given = traj.prompt_assistant_messages  # TurnRecord.index counts the policy's turns only
    out = {t.index + given for t in traj.turns if t.finish_reason == "length"}
    if traj.termination is TerminationReason.OVERLONG and traj.assistant_messages:
        out.add(len(traj.assistant_messages) - 1)
    return out


def _tool_errors(trajectories: list[Trajectory]) -> dict[str, Any]:
    tally = Tally()
    messages = 0
    for traj in trajectories:
        for m in traj.policy_messages:  # a tool message of the task's prompt is not the policy's doing
            if m.role is Role.TOOL:
                messages += 1
                kind = tool_error(m.content)
                if kind:
                    tally.add(kind, traj.id)
    total = sum(tally.counts.values())
    return {
        "tool_messages": messages,
        "tool_errors": {
            "total": total,
            "rate": round(total / messages, 4) if messages else None,
            "by_kind": tally.table(TOOL_ERRORS, "count"),
        },
    }


def _void_reasons(traj: Trajectory, void_turns: tuple[int, ...], rules: ParseRules, tally: Tally) -> None:
    assistant = traj.assistant_messages
    truncated = _truncated_turns(traj)
    for idx in void_turns:
        if idx < len(assistant):
            tally.add(void_reason(assistant[idx], truncated=idx in truncated, rules=rules), traj.id)
        else:
            tally.add("truncated", traj.id)  # the episode ended void before the turn was recorded


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def audit_trajectories(trajectories: list[Trajectory], rules: ParseRules = DEFAULT_RULES) -> AuditReport:
    """Audit judged trajectories (see the module docstring)."""
    reasons = Tally()
    first_void_turn: Counter[int] = Counter()
    truth_sources: Counter[str] = Counter()
    void_ids: list[str] = []
    void_correct: list[str] = []
    void_turns = void_with_truth = valid_correct = valid_with_truth = 0
    for traj in trajectories:
        verdict = judge_trajectory(traj, rules)
        correct = _correct(traj, verdict.final_answer)
        if correct is not None:
            truth_sources["answer" if traj.answer is not None else "info.correct"] += 1
        if not verdict.void:
            valid_with_truth += correct is not None
            valid_correct += bool(correct)
            continue
        void_ids.append(traj.id)
        void_turns += len(verdict.void_turns)
        if verdict.void_turns:
            first_void_turn[verdict.void_turns[0]] += 1
        _void_reasons(traj, verdict.void_turns, rules, reasons)
        void_with_truth += correct is not None
        if correct:
            void_correct.append(traj.id)
    n = len(trajectories)
    # tokens when every trajectory has turn records, else characters (never a mix of both)
    unit = "sampled_tokens" if trajectories and all(t.turns for t in trajectories) else "assistant_chars"
    terminations = Counter(t.termination.value for t in trajectories if t.termination is not None)
    data: dict[str, Any] = {
        "trajectories": n,
        "void": len(void_ids),
        "valid": n - len(void_ids),
        "void_ratio": _rate(len(void_ids), n) or 0.0,
        "void_turns": void_turns,
        "void_examples": void_ids[:EXAMPLES],
        "void_reasons": reasons.table(VOID_REASONS, "turns"),
        "first_void_turn": {str(k): first_void_turn[k] for k in sorted(first_void_turn)},
        "void_correct": {
            "with_ground_truth": void_with_truth,
            "correct": len(void_correct),
            "rate": _rate(len(void_correct), void_with_truth),
            "examples": void_correct[:EXAMPLES],
            "valid_accuracy": _rate(valid_correct, valid_with_truth),
            "truth_source": dict(truth_sources),
        },
        "turns": _dist([float(t.policy_turns) for t in trajectories]),  # the prompt's demonstrations are no turn
        "length": {"unit": unit, **_dist([_length(t, unit) for t in trajectories])},
        **_tool_errors(trajectories),
        "terminations": dict(terminations.most_common()),
        "verdicts": audit_verdicts(trajectories),
        "edits": edit_locality(trajectories),
    }
    return AuditReport(data)


def audit_file(path: str | Path, rules: ParseRules = DEFAULT_RULES) -> AuditReport:
    """Read a trajectory JSONL file (errors name the line) and audit it."""
    return audit_trajectories([t for _, t in read_trajectories(path)], rules)
