"""swe-lite curriculum demonstrations: the expert's episodes through the real env and judge, as SFT rows.

Real parts: the swe-lite env, the sandbox (bubblewrap where it works), the judge's pytest, the rollout
stages of ``build_demonstrations`` and a tiny model's tokenizer. Four tasks (about 2 s each).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.models.conftest import swe_demonstrations

from tirl.envs.tasks.swe_curriculum import generate_curriculum
from tirl.envs.tasks.swe_experts import curriculum_expert_solution
from tirl.jsonl import read_trajectories
from tirl.models.chat_format import SimpleChatFormat
from tirl.models.tiny import TinyModelSpec, build_tiny_model
from tirl.sft_recipe import write_demonstrations
from tirl.types import Role, TerminationReason


@pytest.fixture(scope="module")
def swe_demos():  # type: ignore[no-untyped-def]
    chat = SimpleChatFormat(
        build_tiny_model(TinyModelSpec(hidden_size=16, layers=1, heads=1, kv_heads=1, intermediate_size=16))[1]
    )
    tasks = generate_curriculum(4, seed=11)
    return tasks, chat, swe_demonstrations(tasks, chat, "tirl-sft-swe-")


def test_swe_demonstrations_through_the_real_env(swe_demos, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tasks, chat, trajs = swe_demos
    assert len(trajs) == len(tasks)  # the judge passes every expert episode
    by_id = {t.id: t for t in tasks}
    for traj in trajs:
        traj.check_token_view()
        assert traj.termination is TerminationReason.SUBMITTED and traj.reward == 1.0
        contents = [m.content for m in traj.assistant_messages]
        assert contents == curriculum_expert_solution(by_id[traj.group])
        tool = [m.content or "" for m in traj.messages if m.role is Role.TOOL]
        assert tool[-1] == "```output\nall checks passed\n```"  # the real sandbox ran the check
        sampled = [i for i, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
        assert sampled == [i for c in contents for i in chat.assistant_ids(c)]
    out = tmp_path / "demos.jsonl"
    write_demonstrations(trajs, out)
    back = [t for _, t in read_trajectories(out)]  # tirl filter / tirl audit read the file
    assert [t.messages for t in back] == [t.messages for t in trajs] and {t.reward for t in back} == {1.0}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["token_ids"] for r in rows] == [t.token_ids for t in trajs]
    assert [r["loss_mask"] for r in rows] == [t.loss_mask for t in trajs]


def test_bad_demos_out_is_one_error_line_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    bad = tmp_path / "a-file" / "demos.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tirl.cli",
            "sft",
            "--env",
            "swe-lite",
            "--out",
            str(tmp_path / "m"),
            "--demos-out",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "a-file" in lines[0]
    assert not (tmp_path / "m").exists()
