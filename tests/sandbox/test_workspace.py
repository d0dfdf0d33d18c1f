"""Host workspaces (swe-lite) against hostile agents: size and file caps, modes, depth, links.

Each test runs the agent's commands through the real bubblewrap backend with the workspace bound as
``/work`` (as swe-lite does), then checks what the host finds afterwards.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sandbox.conftest import make

from tirl.envs.base import Task
from tirl.envs.swe_lite import SweLiteEnv, generate_swe_tasks
from tirl.envs.workspace import Template, Workspace, provision
from tirl.types import Message, Role

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the workspace caps need root (documented)")


@pytest.fixture
def workspace() -> Iterator[Workspace]:
    root = Path(tempfile.mkdtemp(prefix="tirl-ws-test-", dir="/tmp"))  # reachable by the sandbox uid
    os.chmod(root, 0o755)
    repo = root / "template"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    ws = provision(Template(repo, None, True), root / "work")
    try:
        yield ws
    finally:
        ws.remove()
        shutil.rmtree(root)


async def _agent(ws: Workspace, code: str, lang: str = "python") -> str:
    sb = make("bwrap", timeout_s=30)
    r = await sb.run(code, lang=lang, workdir=ws.path)
    assert r.error is None, r
    return r.stdout


@ROOT_ONLY
async def test_the_number_of_files_in_a_workspace_is_capped(host_audit: object, workspace: Workspace) -> None:
    code = """
import os
n = 0
try:
    for n in range(60000):
        os.close(os.open(f'f{n}', os.O_CREAT | os.O_WRONLY))
    print('created 60000')
except OSError as e:
    print('stopped after', n)
"""
    out = await _agent(workspace, code)
    assert out.startswith("stopped after") and int(out.split()[2]) <= 20000, out
    assert len(os.listdir(workspace.path)) <= 20000


@ROOT_ONLY
async def test_the_bytes_in_a_workspace_are_capped(host_audit: object, workspace: Workspace) -> None:
    code = """
n = 0
try:
    for n in range(200):
        with open(f'big{n}', 'wb') as f:
            f.write(b'0' * (1 << 20))
    print('wrote 200 MB')
except OSError as e:
    print('stopped after', n, 'MB')
"""
    out = await _agent(workspace, code)
    assert out.startswith("stopped after") and int(out.split()[2]) <= 64, out


async def test_set_id_and_world_writable_modes_do_not_survive_the_run(host_audit: object, workspace: Workspace) -> None:
    await _agent(workspace, "chmod 2777 .; mkdir d; chmod 3777 d; touch d/f; chmod 6777 d/f; chmod 4666 a.py", "bash")
    bad = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH
    for p in (workspace.path, workspace.path / "d", workspace.path / "d" / "f", workspace.path / "a.py"):
        mode = os.lstat(p).st_mode
        assert mode & bad == 0, (p, oct(mode))
        assert os.lstat(p).st_uid == os.getuid()


async def test_a_3000_deep_tree_is_handed_back_and_removed(host_audit: object, workspace: Workspace) -> None:
    code = "import os\nfor i in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nprint('deep')"
    assert await _agent(workspace, code) == "deep\n"
    assert await _agent(workspace, "print(sorted(__import__('os').listdir('.')))") == "['a.py', 'd']\n"
    path = workspace.path
    workspace.remove()
    assert not path.exists()


def _asst(text: str) -> Message:
    return Message(role=Role.ASSISTANT, content=text)


@pytest.mark.parametrize("target", ["/etc", "file"])
async def test_a_planted_tirl_eval_does_not_break_evaluation(host_audit: object, tmp_path: Path, target: str) -> None:
    task: Task = generate_swe_tasks(1, seed=0, kinds=("wrong_operator",))[0]
    root = Path(tempfile.mkdtemp(prefix="tirl-ws-test-", dir="/tmp"))
    os.chmod(root, 0o755)
    plant = {
        "/etc": "ln -s /etc .tirl_eval",
        "file": "echo x > .tirl_eval",
    }[target]
    env = SweLiteEnv(sandbox=make("bwrap", timeout_s=30), cache_dir=tmp_path / "cache", work_root=root)
    etc_before = sorted(os.listdir("/etc"))
    try:
        await env.reset(task)
        await env.step(_asst(f"```bash\n{plant}\n```"))
        result = await env.evaluate()
    finally:
        await env.close()
        shutil.rmtree(root)
    assert result.reward == 0.0 and result.info["tests_total"] >= 4, result.info  # the bug is still there
    assert sorted(os.listdir("/etc")) == etc_before


async def test_ownership_is_handed_over_off_the_event_loop(
    host_audit: object, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import tirl.sandbox.bwrap as bwrap_module

    threads: list[threading.Thread] = []
    real = bwrap_module.give_to

    def recording(*args: object, **kw: object) -> None:
        threads.append(threading.current_thread())
        real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(bwrap_module, "give_to", recording)
    await _agent(workspace, "print(1)")
    assert len(threads) == 2  # to the sandbox's uid, and back
    assert all(t is not threading.main_thread() for t in threads)
