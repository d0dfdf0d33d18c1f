"""Hostile answers are wrong answers: never an exception, never a parse of a huge value, never a blocked loop.

Each of these failed on the old ``tirl.answers`` (``1e5000`` raised ValueError, so the
episode was ``eval_failed`` and dropped, and ``tirl audit`` crashed).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from tirl.answers import FallbackPool, answers_match, answers_match_async, decide
from tirl.cli import main
from tirl.config import SandboxConfig
from tirl.envs.base import Task
from tirl.envs.tir_math import TirMathEnv
from tirl.sandbox import create_sandbox
from tirl.types import Message, Role, TerminationReason

HOSTILE = [
    "1e5000",
    "-1e5000",
    "1e-5000",
    r"\boxed{1e10000000}",
    r"10^{10^{10}}",
    r"2^{2^{2^{2^{2^{2}}}}}",
    "9" * 5000,
    "1" + "0" * 100_000,
    r"3 \times 10^{100000}",
    "100000!",
    "(" * 5000,
    "{" * 5000 + "1",
    r"\frac{" * 3000,
]


@pytest.mark.parametrize("answer", HOSTILE, ids=[f"h{i}" for i in range(len(HOSTILE))])
def test_a_hostile_answer_is_wrong_without_parsing(answer: str) -> None:
    assert answers_match(answer, "1") is False
    assert decide(answer, "1").path in ("hostile", "string", "exact", "missing", "text")  # settled without math-verify


def test_a_hostile_answer_still_matches_an_identical_string() -> None:
    assert answers_match("1e5000", "1e5000") is True
    assert answers_match(r"\boxed{10^{10^{10}}}", r"10^{10^{10}}") is True


def test_a_hostile_gold_is_handled_the_same_way() -> None:
    assert answers_match("1", "1e5000") is False


async def test_tir_math_scores_1e5000_as_a_wrong_answer_not_an_infrastructure_failure() -> None:
    sandbox = create_sandbox(SandboxConfig(backend="process", warm_pool=False), warn=False)
    env = TirMathEnv(sandbox=sandbox)
    await env.reset(Task(id="h", prompt="Compute 1.", answer="1", kind="tir-math"))
    step = await env.step(Message(role=Role.ASSISTANT, content=r"\boxed{1e5000}"))
    assert step.reason is TerminationReason.ANSWERED
    result = await env.evaluate()
    assert result.reward == 0.0 and result.correct is False
    assert "error" not in result.info and result.info.get("reason") != "eval_failed"
    await env.close()
    await sandbox.close()


def test_tirl_audit_reads_a_hostile_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {
            "id": f"t{i}",
            "messages": [
                {"role": "user", "content": "What is 1?"},
                {"role": "assistant", "content": f"\\boxed{{{answer}}}"},
            ],
            "answer": "1",
        }
        for i, answer in enumerate(["1e5000", "1e10000000", "10^{10^{10}}", "1"])
    ]
    path = tmp_path / "trajs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["audit", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert "Traceback" not in out and out.strip()


def test_tirl_report_reads_a_hostile_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    user = {"role": "user", "content": "What is 1?"}
    rows = [
        {"id": "a", "answer": "1", "messages": [user, {"role": "assistant", "content": "\\boxed{1e5000}"}]},
        {"id": "b", "answer": "1", "messages": [user, {"role": "assistant", "content": "\\boxed{1}"}]},
    ]
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "Trajectory audit" in page and "2 trajectories" in page


async def test_the_fallback_runs_off_the_event_loop() -> None:
    order: list[str] = []

    async def other() -> None:
        order.append("other ran")

    async def grade() -> None:
        assert await answers_match_async(r"\sqrt{8}", r"2\sqrt{2}") is True
        order.append("graded")

    await asyncio.gather(grade(), other())
    assert order == ["other ran", "graded"]


def test_a_stuck_worker_is_killed_and_replaced() -> None:
    pool = FallbackPool(size=1, timeout_s=2.0)
    try:
        assert pool.check("(x+1)^2", "x^2+2x+1") is True
        (worker,) = pool._idle
        os.kill(worker.proc.pid, signal.SIGSTOP)  # a comparison that never returns
        assert pool.check("(x+1)^2", "x^2+2x+1") is False
        assert pool.kills == 1 and worker.proc.poll() is not None
        assert pool.check("(x+1)^2", "x^2+2x+1") is True  # a fresh worker
    finally:
        pool.close()


def test_a_crashed_worker_is_replaced() -> None:
    pool = FallbackPool(size=1, timeout_s=5.0)
    try:
        assert pool.check(r"\sqrt{8}", r"2\sqrt{2}") is True
        (worker,) = pool._idle
        worker.proc.kill()
        worker.proc.wait()
        assert pool.check(r"\sqrt{8}", r"2\sqrt{2}") is False
        assert pool.check(r"\sqrt{8}", r"2\sqrt{2}") is True
    finally:
        pool.close()


def test_the_fallback_compares_exactly_not_within_a_tolerance() -> None:
    pool = FallbackPool(size=1)
    try:
        assert pool.check(r"\pi", r"\pi + 10^{-30}\sqrt{2}") is False  # math-verify alone says True
        assert pool.check(r"\frac{1}{3}", r"\frac{333333}{1000000}") is False
        assert pool.check(r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}") is True
    finally:
        pool.close()


def test_a_closed_pool_refuses_work() -> None:
    pool = FallbackPool(size=1)
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.check("x", "x")


def test_a_forked_child_gets_its_own_workers() -> None:
    from tirl.answers.fallback import default_pool

    parent = default_pool()
    assert parent.check("(x+1)^2", "x^2+2x+1") is True
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own pool, and closing it leaves the parent's workers alone
        ok = default_pool() is not parent and answers_match(r"\sqrt{8}", r"2\sqrt{2}")
        from tirl.answers import shutdown_default_pool

        shutdown_default_pool()
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    assert default_pool() is parent and parent.check("(x+1)^2", "x^2+2x+1") is True
