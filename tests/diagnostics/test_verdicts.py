"""The file checks of test-judged rewards (tirl.diagnostics.verdicts) against plain references."""

from __future__ import annotations

import itertools

import pytest

from tirl.diagnostics.verdicts import SIGNS, audit_verdicts, signs_of, verdict_ceiling
from tirl.types import Message, Role, ToolCall, Trajectory


def reference_ceiling(passed: int, total: int, timed_out: bool, failure: str | None, mode: str | None) -> float:
    """The reward rule of SweLiteEnv, spelled out: all-pass 1.0, else 0 under "all", else the fraction passed."""
    if total == 0:
        return 0.0
    all_pass = passed == total and not timed_out and failure is None
    if all_pass:
        return 1.0
    return 0.0 if mode == "all" else passed / total


def test_ceiling_matches_the_reference_on_a_grid() -> None:
    grid = itertools.product(range(5), (False, True), (None, "no_verdict"), (None, "all", "fraction"))
    for total, timed_out, failure, mode in grid:
        for passed in range(total + 1):
            record = {"tests_passed": passed, "tests_total": total, "eval_timed_out": timed_out,
                      "eval_failure": failure}  # fmt: skip
            if mode is not None:
                record["reward_mode"] = mode
            want = reference_ceiling(passed, total, timed_out, failure, mode)
            assert verdict_ceiling(record) == pytest.approx(want)


def test_a_partial_reward_under_the_binary_mode_is_mismatched() -> None:
    """An edited file: 3 of 5 tests passed under reward_mode "all" earns 0, so a recorded 0.6 is forged."""
    record = {"tests_passed": 3, "tests_total": 5, "eval_timed_out": False, "eval_failure": None}
    binary = audit_verdicts([_traj("b", 0.6, {**record, "reward_mode": "all"})])
    fraction = audit_verdicts([_traj("f", 0.6, {**record, "reward_mode": "fraction"})])
    assert binary is not None and fraction is not None
    assert binary["mismatched"]["count"] == 1 and fraction["mismatched"]["count"] == 0


@pytest.mark.parametrize("record", [None, {}, {"tests_passed": 1}, {"tests_passed": True, "tests_total": 1}, "x"])
def test_records_without_counts_have_no_ceiling(record: object) -> None:
    assert verdict_ceiling(record) is None


def _traj(tid: str, reward: float, record: dict | None, *texts: str, calls: tuple[ToolCall, ...] = ()) -> Trajectory:
    messages = [Message(role=Role.USER, content="fix it")]
    messages += [Message(role=Role.ASSISTANT, content=t) for t in texts]
    if calls:
        messages.append(Message(role=Role.ASSISTANT, content=None, tool_calls=calls))
    messages.append(Message(role=Role.TOOL, content="conftest.py written 3 passed"))  # tool text is not the agent's
    return Trajectory(id=tid, messages=messages, reward=reward, info={} if record is None else {"eval": record})


PASS = {"tests_passed": 3, "tests_total": 3, "eval_timed_out": False, "eval_failure": None}
FAIL = {"tests_passed": 2, "tests_total": 3, "eval_timed_out": False, "eval_failure": None}


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("```bash\ncat > conftest.py <<'EOF'\nEOF\n```", ("pytest_config",)),
        ("```bash\nprintf '[pytest]\\naddopts = -p no:python' > pytest.ini\n```", ("pytest_config",)),
        ("```bash\necho 'import os' > /usr/lib/x.pth\n```", ("startup_hooks",)),
        ("```python\nimport os\nos._exit(0)\n```", ("exit_hooks",)),
        ("```bash\nls .tirl_eval\n```", ("judge_files",)),
        ("```bash\necho '3 passed in 0.01s'\n```", ("printed_verdict",)),
        ("```bash\nsed -i '4s/-/+/' calc/core.py\npython3 check.py\n```", ()),
        ('```bash\ngrep -n "def total(" calc/core.py\n```', ()),
    ],
)
def test_signs(text: str, kinds: tuple[str, ...]) -> None:
    assert signs_of(_traj("t", 0.0, PASS, text)) == kinds


def test_signs_read_tool_call_arguments_but_not_tool_output() -> None:
    call = ToolCall(name="bash", arguments='{"command": "touch sitecustomize.py"}')
    assert signs_of(_traj("t", 0.0, PASS, calls=(call,))) == ("startup_hooks",)
    assert signs_of(_traj("t", 0.0, PASS, "```bash\nls\n```")) == ()  # the tool message names conftest: not counted
    assert set(SIGNS) == {"pytest_config", "startup_hooks", "judge_files", "exit_hooks", "printed_verdict"}


def test_audit_counts_mismatches_and_rewards_without_counts() -> None:
    rows = [
        _traj("ok", 1.0, PASS, "```bash\nsubmit\n```"),
        _traj("raised", 1.0, FAIL, "```bash\nsubmit\n```"),
        _traj("fraction", 2 / 3, FAIL, "```bash\nsubmit\n```"),  # reward_mode=fraction: at its ceiling
        _traj("bare", 1.0, None, "```bash\ntouch conftest.py\nsubmit\n```"),
        _traj("zero", 0.0, FAIL, "```bash\ntouch conftest.py\n```"),
    ]
    data = audit_verdicts(rows)
    assert data is not None
    assert data["judged"] == 4
    assert data["rewarded"] == {"count": 4, "examples": ["ok", "raised", "fraction", "bare"]}
    assert data["mismatched"] == {"count": 1, "examples": ["raised"]}
    assert data["rewarded_without_counts"] == {"count": 1, "examples": ["bare"]}
    assert data["signs"] == {"pytest_config": {"count": 2, "examples": ["bare", "zero"], "rewarded": 1}}
    assert audit_verdicts([_traj("m", 1.0, None, "\\boxed{3}")]) is None  # no test counts anywhere: not this check
