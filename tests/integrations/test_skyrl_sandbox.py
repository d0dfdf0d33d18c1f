"""Real skyrl-gym envs whose model-written code tirl runs in its real bubblewrap sandbox (tirl.integrations.skyrl_code).

The attack tests go through :class:`SkyRLGymEnv`'s public API only, so they also run on the code before the
sandbox was wired in, where skyrl-gym ran the code on the host and every one of them failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from skyrl_gym.envs.base_text_env import BaseTextEnv  # noqa: E402
from skyrl_gym.envs.lcb.livecodebench import compute_score  # noqa: E402
from skyrl_gym.tools.python import PythonCodeExecutorToolGroup  # noqa: E402

from tirl.config import EnvConfig, FilterConfig, SandboxConfig  # noqa: E402
from tirl.envs import load_tasks  # noqa: E402
from tirl.envs.base import EnvError, Task  # noqa: E402
from tirl.errors import ConfigError, InputError  # noqa: E402
from tirl.filters import rules_from_config  # noqa: E402
from tirl.integrations.skyrl_gym import SkyRLGymEnv  # noqa: E402
from tirl.sandbox.bwrap import BwrapSandbox, bwrap_problem  # noqa: E402
from tirl.types import Message, Role  # noqa: E402

pytestmark = pytest.mark.skipif(bwrap_problem() is not None, reason=f"bubblewrap unusable: {bwrap_problem()}")
RULES = rules_from_config(FilterConfig(action_rule="fields", action_tags=["tool"]))


@pytest.fixture
async def sandbox() -> AsyncIterator[BwrapSandbox]:
    sb = BwrapSandbox(timeout_s=5.0, memory_mb=512)
    yield sb
    await sb.close()


def _task(env_class: str, ground_truth: str, host_code: bool = False) -> Task:
    extras = {"reward_spec": {"method": "rule", "ground_truth": ground_truth}}
    data = {"env_class": env_class, "extras": extras, "host_code": host_code}
    return Task(id="t", prompt="go", answer=None, kind="skyrl-gym", data=data)


async def _python_tool(sandbox: Any, code: str) -> str:
    """The observation of one ``searchcode`` turn that calls skyrl-gym's python tool with ``code``."""
    env = SkyRLGymEnv(max_turns=3, rules=RULES, sandbox=sandbox)
    await env.reset(_task("searchcode", "42"))
    try:
        result = await env.step(Message(role=Role.ASSISTANT, content=f"<tool><python>{code}</python></tool>"))
    finally:
        await env.close()
    assert len(result.observation) <= 1  # searchcode shows no message for empty output
    return "".join(str(m.content) for m in result.observation)


async def test_the_python_tool_cannot_write_a_host_file(sandbox: BwrapSandbox, tmp_path: Path) -> None:
    target = tmp_path / "written_by_the_policy"
    text = await _python_tool(sandbox, f"open({str(target)!r}, 'w').write('pwned'); print('wrote')")
    assert not target.exists(), text  # skyrl-gym's own tool wrote it
    assert text.startswith("Error executing Python code:") and "wrote" not in text


async def test_the_python_tool_cannot_read_a_host_file(sandbox: BwrapSandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the-user-secret-" + uuid.uuid4().hex)
    text = await _python_tool(sandbox, f"print(open({str(secret)!r}).read())")
    assert "the-user-secret-" not in text and "No such file" in text


async def test_the_python_tool_cannot_reach_a_host_socket(sandbox: BwrapSandbox) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = (
            f"import socket as s; s.create_connection(('127.0.0.1', {port}), timeout=2).send(b'x'); print('connected')"
        )
        text = await _python_tool(sandbox, code)
        with pytest.raises(BlockingIOError):  # nobody connected
            listener.accept()
    assert "connected" not in text and "Error executing Python code:" in text


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_the_python_tool_leaves_no_background_process(sandbox: BwrapSandbox) -> None:
    token = "tirl-bg-" + uuid.uuid4().hex
    code = ("import subprocess as s, sys; s.Popen([sys.executable, '-c', 'import time; time.sleep(60)', "
            f"{token!r}], start_new_session=True, stdout=s.DEVNULL, stderr=s.DEVNULL); print('ok')")  # fmt: skip
    text = await _python_tool(sandbox, code)
    left = _processes_with(token)
    for _ in range(20):  # the sandbox kills its PID namespace when the run ends; allow the kernel a moment
        if not left:
            break
        await asyncio.sleep(0.1)
        left = _processes_with(token)
    for pid in left:  # the old code: the daemon outlived the episode; do not leave it behind
        os.kill(pid, 9)
    assert text == "ok" and not left


@pytest.mark.parametrize(
    "code",
    ["print('hello')\nprint(6 * 7)", "x = 1", "print('a')\n1 / 0", "import sys; sys.stderr.write('w\\n'); print(1)"],
)
async def test_the_sandboxed_tool_answers_as_skyrl_gyms_own(sandbox: BwrapSandbox, code: str) -> None:
    """The same string as skyrl-gym's PythonCodeExecutorToolGroup for output, silence, a traceback and stderr."""
    expected = PythonCodeExecutorToolGroup().python(code)
    assert await _python_tool(sandbox, code) == expected


async def test_a_timeout_or_a_killed_program_is_the_episodes_tool_output(sandbox: BwrapSandbox) -> None:
    from tirl.envs.common import SandboxLease
    from tirl.integrations.skyrl_code import SandboxedCode, sandbox_env

    group = PythonCodeExecutorToolGroup(timeout=1.0)
    env = type("Env", (), {"tool_groups": [group]})()
    code = SandboxedCode(SandboxLease(sandbox, None), asyncio.get_running_loop())
    with pytest.raises(EnvError, match=r"tirl cannot sandbox — .*env.skyrl_host_code=true"):
        sandbox_env(env, code, env_class="mine", allow_host=False)  # an env class tirl does not know
    sandbox_env(env, code, env_class="mine", allow_host=True)  # opted in: its python group still sandboxed
    slow = await asyncio.to_thread(group.execute_tool, "python", "while True: pass")
    assert slow == PythonCodeExecutorToolGroup(timeout=1.0).python("while True: pass")
    assert slow == "Error executing Python code: Execution timed out after 1.0 seconds."
    killed = await asyncio.to_thread(group.execute_tool, "python", "import os, signal; os.kill(os.getpid(), 9)")
    assert killed == "Error executing Python code: exited with status 137."  # bwrap: 128 + SIGKILL; skyrl-gym: ''

    assert code.infra_error is None  # the model's failures, not the sandbox's


async def test_a_broken_sandbox_is_an_infrastructure_error_not_a_tool_output() -> None:
    """searchcode turns any exception of a tool into the observation; a sandbox failure must end the episode."""
    broken = BwrapSandbox(python="/opt/no-such-python/bin/python3")  # the sandbox cannot start its interpreter
    env = SkyRLGymEnv(max_turns=3, rules=RULES, sandbox=broken)
    await env.reset(_task("searchcode", "42"))
    with pytest.raises(EnvError, match=r"'searchcode': tirl's sandbox failed running the model's code: SetupError"):
        await env.step(Message(role=Role.ASSISTANT, content="<tool><python>print(1)</python></tool>"))
    await env.close()


# --- lcb: the program judged for the reward ---------------------------------------------------------------------------

_STDIO = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
          {"input": "5 7\n", "output": "12\n", "testtype": "stdin"}]  # fmt: skip
_CALL = [{"input": "[1, 2, 3]\n2", "output": "[3, 4, 5]", "testtype": "functional", "metadata": {"func_name": "add"}}]
_FORGE = """import sys
f = sys._getframe()
while f is not None:
    if "metadata_list" in f.f_locals and "result" in f.f_locals:
        f.f_locals["result"].append([True])
    f = f.f_back
print("wrong")"""


async def _lcb(sandbox: Any, tests: list[dict[str, Any]], program: str) -> float:
    env = SkyRLGymEnv(max_turns=1, rules=RULES, sandbox=sandbox)
    await env.reset(_task("lcb", json.dumps(tests)))
    try:
        result = await env.step(Message(role=Role.ASSISTANT, content=f"```python\n{program}\n```"))
    finally:
        await env.close()
    assert result.terminated or result.truncated
    return result.reward


async def test_lcb_code_cannot_forge_its_reward(sandbox: BwrapSandbox) -> None:
    """skyrl-gym compares in the program's own process: the program appended its verdict to the grader's list."""
    assert await _lcb(sandbox, _STDIO, _FORGE) == 0.0


async def test_lcb_code_cannot_write_a_host_file(sandbox: BwrapSandbox, tmp_path: Path) -> None:
    target = tmp_path / "written_by_the_policy"
    # os.open: skyrl-gym's call_method replaces builtins.open with a mock while the program runs
    program = f"import os\nos.write(os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT), b'pwned')\nprint(3)"
    await _lcb(sandbox, _STDIO, program)
    assert not target.exists()


@pytest.mark.parametrize(
    ("tests", "program"),
    [
        (_STDIO, "a, b = map(int, input().split())\nprint(a + b)"),
        (_STDIO, "a, b = map(int, input().split())\nprint(a - b)"),
        (_STDIO, "d = defaultdict(int)\na, b = map(int, input().split())\nprint(float(a + b))"),  # prelude; Decimal
        (_STDIO, "import os\nos._exit(3)"),
        (_CALL, "class Solution:\n    def add(self, xs, k):\n        return tuple(x + k for x in xs)"),
        (_CALL, "class Solution:\n    def add(self, xs, k):\n        return [x + k for x in xs[1:]]"),
        (_CALL, "class Solution:\n    def add(self, xs, k):\n        raise ValueError(k)"),
    ],
)
async def test_lcb_rewards_keep_skyrl_gyms_meaning(sandbox: BwrapSandbox, tests: Any, program: str) -> None:
    """The reward of honest programs equals skyrl-gym's own compute_score (run here on the host)."""
    _, expected = await asyncio.to_thread(compute_score, f"```python\n{program}\n```", tests)
    assert await _lcb(sandbox, tests, program) == expected


# A program that leaves JSON nested past the host parser's stack: in the result file itself, or as a call-based
# return value (json.dumps patched in the harness's process). json.loads raised RecursionError on the host, the step
# raised, and the episode ended ``error``: an infrastructure failure, left out of the update, instead of reward 0.
_DEEP_FILE = """import os
fd = os.open("lcb_result.json", os.O_WRONLY | os.O_TRUNC)
os.write(fd, b"[" * 200000 + b"]" * 200000)
os._exit(0)"""
_DEEP_VALUE = """import json
json.dumps = lambda value: "[" * 200000 + "]" * 200000
class Solution:
    def add(self, xs, k):
        return [x + k for x in xs]"""


# A printed signaling NaN: the host compares the lines as Decimal numbers, and == on an sNaN raised InvalidOperation.
_SNAN = 'input()\nprint("sNaN")'


@pytest.mark.parametrize(
    ("tests", "program"),
    [(_STDIO, _DEEP_FILE), (_CALL, _DEEP_VALUE), (_STDIO, _SNAN)],
    ids=["nested-file", "nested-value", "snan"],
)
async def test_lcb_output_the_host_cannot_read_or_compare_is_reward_0_not_an_error(
    sandbox: BwrapSandbox, tests: Any, program: str
) -> None:
    assert await _lcb(sandbox, tests, program) == 0.0


# --- env classes tirl cannot sandbox ------------------------------------------------------------------------------


class _Unknown(BaseTextEnv):  # type: ignore[misc]
    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()

    def step(self, action: str) -> Any:
        return {"observations": [], "reward": 1.0, "done": True, "metadata": {}}


@pytest.fixture
def unknown_env() -> Any:
    skyrl_gym.register(id="tirl_unknown", entry_point=_Unknown)
    yield
    skyrl_gym.envs.registration.deregister("tirl_unknown")


def test_an_env_class_tirl_does_not_know_is_refused_unless_opted_in(tmp_path: Path, unknown_env: Any) -> None:
    path = tmp_path / "rows.jsonl"
    row = {"prompt": [{"role": "user", "content": "go"}], "env_class": "tirl_unknown", "answer": "x"}
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError, match=r"rows.jsonl:1: skyrl-gym env class 'tirl_unknown' .*not one tirl knows"):
        load_tasks(EnvConfig(name="skyrl-gym", tasks_file=str(path)), 1)
    with pytest.raises(ConfigError, match=r"env.name=skyrl-gym:tirl_unknown: .* set env.skyrl_host_code=true"):
        load_tasks(EnvConfig(name="skyrl-gym:tirl_unknown", tasks_file=str(path)), 1)
    with pytest.warns(RuntimeWarning, match=r"env.skyrl_host_code=true: env class 'tirl_unknown'.*NOT in tirl's"):
        tasks = load_tasks(EnvConfig(name="skyrl-gym", tasks_file=str(path), skyrl_host_code=True), 1)
    assert tasks[0].data["host_code"] is True


async def test_an_unknown_env_class_is_refused_at_reset_without_the_opt_in(unknown_env: Any) -> None:
    env = SkyRLGymEnv(max_turns=1, rules=RULES, sandbox_config=SandboxConfig(backend="bwrap"))
    with pytest.raises(EnvError, match=r"'tirl_unknown' uses .*_Unknown, which tirl cannot sandbox"):
        await env.reset(_task("tirl_unknown", "x"))
    await env.close()
    env = SkyRLGymEnv(max_turns=1, rules=RULES)
    await env.reset(_task("tirl_unknown", "x", host_code=True))
    assert (await env.step(Message(role=Role.ASSISTANT, content="<tool>a</tool>"))).reward == 1.0
    await env.close()
