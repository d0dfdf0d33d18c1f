"""Re-judging rewarded swe-lite episodes for real (tirl.envs.swe_replay, `tirl audit --rejudge`).

Each trajectory here is played for real (SweLiteEnv, the sandbox, the hidden tests judged by the scorer), then
re-judged: an expert fix is confirmed, a fix that lives in a module the agent added is ``outside_sources``, a
record whose reward was raised after the fact is ``not_reproduced``, an unknown task is ``unresolved``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tirl.cli import main
from tirl.envs.base import Task
from tirl.envs.swe_replay import MAX_SOURCE_BYTES, _own_files, find_task, rejudge, rejudge_rewarded
from tirl.envs.tasks.swe_curriculum import bug_of, generate_curriculum
from tirl.envs.tasks.swe_experts import bash_turn, curriculum_expert_solution, fix_command, wrong_fix_solution
from tirl.envs.tasks.swe_gen import generate_swe_tasks
from tirl.sandbox._tree import empty_dir
from tirl.types import Message, Role, Trajectory

TASK = generate_curriculum(1, seed=3, split="validation")[0]


async def play(make_swe, task: Task, turns: list[str], traj_id: str) -> Trajectory:  # type: ignore[no-untyped-def]
    """One real episode of scripted assistant turns, recorded as the pipeline records it."""
    env = make_swe(max_turns=12)
    messages = await env.reset(task)
    for text in turns:
        action = Message(role=Role.ASSISTANT, content=text)
        messages.append(action)
        step = await env.step(action)
        messages += step.observation
        if step.terminated or step.truncated:
            break
    result = await env.evaluate()
    await env.close()
    return Trajectory(
        id=traj_id, messages=messages, group=task.id, reward=result.reward, correct=result.correct,
        info={"eval": dict(result.info)},
    )  # fmt: skip


def helper_module_fix(task: Task) -> list[str]:
    """A fix that works only with a file the task did not have: the fixed code in a new module, core.py importing it."""
    module = str(task.data["module"])
    package = module.split("/")[0]
    fixed = f"{package}/fixed.py"
    return [
        bash_turn(f"cp {module} {fixed}"),
        bash_turn(fix_command(bug_of(task), fixed)),
        bash_turn(f"printf 'from {package}.fixed import *  # noqa\\n' > {module}"),
        bash_turn("python3 check.py"),
        bash_turn("submit"),
    ]


def test_find_task_resolves_built_in_ids() -> None:
    for task in generate_curriculum(3, seed=5, split="heldout") + generate_curriculum(2, seed=1, split="train"):
        found = find_task(task.id)
        assert found is not None and found.id == task.id and found.data == task.data
    planted = generate_swe_tasks(6, seed=2)[5]
    found = find_task(planted.id)
    assert found is not None and found.data == planted.data
    assert find_task("swec-nosuchpkg-f-wrong_operator-3-s0-1") is None
    assert find_task("swe-s0-999999999-x-y") is None  # not generated that far
    assert find_task("swe-s" + "9" * 5000 + "-1-x") is None  # a hostile record's id: past int()'s digit limit
    assert find_task("swe-s1-" + "9" * 5000 + "-x") is None
    assert find_task("user-1") is None
    own = Task(id="user-1", prompt="p", kind="swe-lite", data={"repo": "r"})
    assert find_task("user-1", {"user-1": own}) == own
    # the trainer's per-step ids (s<step>-<i>-<task id>) resolve to the task, under the id the record holds
    stepped = find_task(f"s4-1-{task.id}")
    assert stepped is not None and stepped.id == f"s4-1-{task.id}" and stepped.data == task.data
    assert find_task("s2-0-user-1", {"user-1": own}) == Task(id="s2-0-user-1", prompt="p", kind="swe-lite",
                                                             data={"repo": "r"})  # fmt: skip
    assert find_task("s2-0-user-2", {"user-1": own}) is None


def test_own_files_never_follow_links_and_walk_any_depth(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "core.py").write_text("x = 1\n")
    (ws / "check.py").symlink_to("/etc/passwd")  # a source replaced by a link: gone in the clean copy
    (ws / "big.py").write_bytes(b"#" * (MAX_SOURCE_BYTES + 1))  # too large to carry: gone too
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mod.py").write_text("secret\n")
    (ws / "lib").symlink_to(outside, target_is_directory=True)  # a directory link: not entered
    fd = os.open(ws, os.O_RDONLY)
    for _ in range(1200):  # deeper than the recursion limit (os.makedirs itself would recurse)
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(os.open("conftest.py", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)
    try:
        own, extra = _own_files(ws, {"pkg/core.py", "check.py", "big.py", "lib/mod.py"})
    finally:
        empty_dir(str(ws / "d"))  # pytest's recursive clean-up would not get through it
    assert own == {"pkg/core.py": b"x = 1\n", "check.py": None, "big.py": None, "lib/mod.py": None}
    assert "lib" in extra and any(p.endswith("/conftest.py") and p.count("/") == 1200 for p in extra)
    assert not any(p.startswith("lib/") for p in extra)


async def test_expert_fix_is_confirmed(make_swe) -> None:  # type: ignore[no-untyped-def]
    traj = await play(make_swe, TASK, curriculum_expert_solution(TASK), "expert")
    assert traj.reward == 1.0
    out = await rejudge(traj, TASK, lambda: make_swe(max_turns=12))
    assert (out.status, out.replayed, out.clean) == ("confirmed", 1.0, 1.0)


async def test_a_reward_that_needs_an_added_file_is_outside_sources(make_swe) -> None:  # type: ignore[no-untyped-def]
    traj = await play(make_swe, TASK, helper_module_fix(TASK), "helper")
    assert traj.reward == 1.0  # the judge runs the workspace's code: the fix works there
    out = await rejudge(traj, TASK, lambda: make_swe(max_turns=12))
    assert (out.status, out.replayed, out.clean) == ("outside_sources", 1.0, 0.0)
    package = str(TASK.data["module"]).split("/")[0]
    assert f"{package}/fixed.py" in out.extra_files


async def test_a_raised_reward_is_not_reproduced_and_unknown_tasks_are_unresolved(make_swe) -> None:  # type: ignore[no-untyped-def]
    wrong = await play(make_swe, TASK, wrong_fix_solution(TASK), "edited")
    assert wrong.reward == 0.0
    wrong.reward = 1.0  # the record edited after the fact
    stranger = Trajectory(id="stranger", messages=wrong.messages, group="user-task-9", reward=1.0)
    unrewarded = Trajectory(id="zero", messages=wrong.messages, group=TASK.id, reward=0.0)
    out = await rejudge_rewarded([wrong, stranger, unrewarded], lambda: make_swe(max_turns=12))
    assert [(r.traj_id, r.status) for r in out] == [("edited", "not_reproduced"), ("stranger", "unresolved")]
    assert out[0].replayed == 0.0 and out[0].clean is None


@pytest.fixture
def played_file(make_swe, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    import asyncio

    async def all_four() -> list[Trajectory]:
        conftest = bash_turn(
            "cat > conftest.py <<'EOF'\nimport pytest\ndef pytest_collection_modifyitems(items):\n    items.clear()\n"
            "EOF\nsubmit"
        )
        return [
            await play(make_swe, TASK, curriculum_expert_solution(TASK), "expert"),
            await play(make_swe, TASK, helper_module_fix(TASK), "helper"),
            await play(make_swe, TASK, [conftest], "conftest"),
            await play(make_swe, TASK, wrong_fix_solution(TASK), "edited"),
        ]

    rows = [t.to_dict() for t in asyncio.run(all_four())]
    assert [r["reward"] for r in rows] == [1.0, 1.0, 0.0, 0.0]  # the hardened judge refuses the conftest trick
    rows[3]["reward"] = 1.0
    path = tmp_path / "swe.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_verdicts_and_rejudge(played_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(played_file), "--json"]) == 0  # the file checks alone never fail the command
    verdicts = json.loads(capsys.readouterr().out)["verdicts"]
    assert verdicts["judged"] == 4 and verdicts["rewarded"]["count"] == 3
    assert verdicts["mismatched"] == {"count": 1, "examples": ["edited"]}  # 1.0 against its own failing counts
    assert verdicts["signs"]["pytest_config"] == {"count": 1, "examples": ["conftest"], "rewarded": 0}

    assert main(["audit", str(played_file), "--rejudge", "--json"]) == 1
    rejudged = json.loads(capsys.readouterr().out)["rejudged"]
    assert rejudged["by_status"] == {"confirmed": 1, "outside_sources": 1, "not_reproduced": 1, "unresolved": 0}
    assert {i["id"]: i["status"] for i in rejudged["items"]} == {
        "expert": "confirmed", "helper": "outside_sources", "edited": "not_reproduced",
    }  # fmt: skip

    assert main(["audit", str(played_file), "--rejudge"]) == 1
    text = capsys.readouterr().out
    assert "re-judged 3 rewarded trajectories: confirmed 1, outside_sources 1, not_reproduced 1" in text
    assert "reward above its verdict: 1 (e.g. edited)" in text


def test_cli_refuses_a_rejudge_it_cannot_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectories.jsonl").write_text("")
    (run / "config.json").write_text(json.dumps({"env": {"name": "tir-chain"}}))
    assert main(["audit", str(run), "--rejudge"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--rejudge replays swe-lite episodes" in err and err.count("\n") == 1
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    assert main(["audit", str(run), "--config", str(cfg)]) == 2
    assert "is a run directory with its own config.json" in capsys.readouterr().err


def test_cli_refuses_a_rejudge_of_a_bare_file_of_answer_judged_episodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tir-chain run's trajectories.jsonl copied out: --rejudge replayed it as swe-lite and printed "unresolved: no
    task with this id in the built-in generators", exit 0 (its task is a built-in tir-chain one)."""
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "\\boxed{37}"}]
    traj = {"id": "s1-t1-g1", "reward": 1.0, "info": {"eval": {"answer": "37", "expected": "37"}}, "messages": messages}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(traj) + "\n")
    assert main(["audit", str(path), "--rejudge"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: --rejudge replays swe-lite episodes") and err.count("\n") == 1, err
    assert "judged by their answers" in err and "drop --rejudge" in err


def test_cli_a_broken_sandbox_is_one_error_line(
    played_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge that cannot break on demand here (the sandbox itself failing) is faked: every run reports an error."""
    import tirl.sandbox
    from tirl.sandbox.base import ExecResult

    class Broken:
        async def run(self, *args: object, **kwargs: object) -> ExecResult:
            return ExecResult("", "", None, error="bwrap: setting up uid map: Permission denied")

        async def close(self) -> None:
            pass

    monkeypatch.setattr(tirl.sandbox, "create_sandbox", lambda *a, **k: Broken())
    assert main(["audit", str(played_file), "--rejudge"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: the sandbox failed while re-judging") and captured.err.count("\n") == 1
    assert "re-judged" not in captured.out  # no verdict printed on a broken sandbox


def test_cli_reads_a_run_directory_and_its_config(played_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run directory: its trajectories.jsonl, and its config.json for the rule and the replay's env."""
    from tirl.config import config_to_dict, resolve_config

    run = played_file.parent / "run"
    run.mkdir()
    (run / "trajectories.jsonl").write_bytes(played_file.read_bytes())
    cfg = resolve_config(None, ["env.name=swe-lite", "sandbox.timeout_s=10"]).config
    (run / "config.json").write_text(json.dumps(config_to_dict(cfg)))
    assert main(["audit", str(run), "--rejudge", "--json"]) == 1
    by_status = json.loads(capsys.readouterr().out)["rejudged"]["by_status"]
    assert by_status == {"confirmed": 1, "outside_sources": 1, "not_reproduced": 1, "unresolved": 0}
    (run / "config.json").write_text("{not json")
    assert main(["audit", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "cannot read the run's config" in err and err.count("\n") == 1


def test_a_fraction_run_is_re_judged_on_its_own_reward_mode(  # type: ignore[no-untyped-def]
    make_swe, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run trained with env.reward_mode=fraction: an unfixed episode's partial reward is confirmed, not
    ``not_reproduced`` (the replay judged it as all-or-nothing, 0, before the mode was read from the run)."""
    import asyncio

    from tirl.config import config_to_dict, resolve_config

    unfixed = asyncio.run(play(lambda **kw: make_swe(reward_mode="fraction", **kw), TASK, [bash_turn("submit")], "u"))
    assert 0.0 < float(unfixed.reward or 0.0) < 1.0
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectories.jsonl").write_text(json.dumps(unfixed.to_dict()) + "\n")
    cfg = resolve_config(None, ["env.name=swe-lite", "sandbox.timeout_s=10", "env.reward_mode=fraction"]).config
    (run / "config.json").write_text(json.dumps(config_to_dict(cfg)))
    assert main(["audit", str(run), "--rejudge", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdicts"]["mismatched"]["count"] == 0
    assert report["rejudged"]["by_status"]["confirmed"] == 1


def test_a_bare_file_of_a_fraction_run_is_re_judged_under_fraction(  # type: ignore[no-untyped-def]
    make_swe, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the run's config a reward strictly between 0 and 1 can only be a fraction run's: it is replayed
    under fraction (the preset's all-or-nothing replay earned 0: ``not_reproduced``, exit 1), and a fraction
    raised after the fact is still ``not_reproduced``."""
    import asyncio

    unfixed = asyncio.run(play(lambda **kw: make_swe(reward_mode="fraction", **kw), TASK, [bash_turn("submit")], "u"))
    reward = float(unfixed.reward or 0.0)
    assert 0.0 < reward < 0.95
    raised = {**unfixed.to_dict(), "id": "raised", "reward": 0.99}
    path = tmp_path / "swe.jsonl"
    path.write_text(json.dumps(unfixed.to_dict()) + "\n")
    assert main(["audit", str(path), "--rejudge", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rejudged"]["by_status"]["confirmed"] == 1
    path.write_text(json.dumps(unfixed.to_dict()) + "\n" + json.dumps(raised) + "\n")
    assert main(["audit", str(path), "--rejudge", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verdicts"]["mismatched"] == {"count": 1, "examples": ["raised"]}
    assert {i["id"]: i["status"] for i in report["rejudged"]["items"]} == {"u": "confirmed", "raised": "not_reproduced"}
