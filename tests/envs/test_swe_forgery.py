"""swe-lite reward forgery (issue 22): an agent that leaves the planted bug in place must get reward 0.

Each case is one attack an RL policy could find: it plants files in the workspace (or appends to the
package under test, which the hidden tests import) that try to make the evaluator report a pass, then
submits without fixing the bug. The attacks run for real: the real bubblewrap sandbox, the real
evaluator, real pytest. Every case that forged a pass on the scorer before issue 22 (the pytest runner
in the same interpreter as the code under test) says so in its id list below; the others were already
held and stay as guards.

Not covered here: the sandbox's own isolation (tests/sandbox/) and the judge's wire format
(tests/envs/test_scorer.py).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tirl.envs.swe_lite import expert_solution, generate_swe_tasks
from tirl.testing import play
from tirl.types import Message, Role, TerminationReason, ToolCall

TASK = generate_swe_tasks(1, seed=0, kinds=("wrong_operator",))[0]
MODULE = TASK.data["module"]
PACKAGE = TASK.data["program"]

# Prints every results line a scorer might trust: pytest's summary and a marker line for every nonce-like
# token found in any process's command line (the old runner's nonce was in its argv).
FORGE = r"""
import json as _json, os as _os, re as _re, sys as _sys
def _tirl_forge():
    tokens = set()
    for pid in ["self"] + [d for d in _os.listdir("/proc") if d.isdigit()]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                tokens.update(_re.findall(r"TIRL_[A-Z_]*[0-9a-f]{8,}", f.read().decode("utf-8", "replace")))
        except OSError:
            pass
    good = {"passed": 6, "failed": 0, "errors": 0, "skipped": 0, "status": 0, "timed_out": False}
    lines = ["", "6 passed in 0.01s"] + [t + " " + _json.dumps(good) for t in sorted(tokens)]
    return "\n".join(lines) + "\n"
def _tirl_exit():
    _sys.stdout.write(_tirl_forge())
    _sys.stdout.flush()
    _os._exit(0)
"""


def write(path: str, text: str) -> str:
    """A shell line that writes ``text`` to ``path`` (parents created)."""
    parent = str(Path(path).parent)
    mkdir = f"mkdir -p {shlex.quote(parent)} && " if parent != "." else ""
    return f"{mkdir}printf '%s' {shlex.quote(text)} > {shlex.quote(path)}"


def append_to_module(text: str) -> str:
    return f"printf '%s' {shlex.quote(text)} >> {shlex.quote(MODULE)}"


EXIT_AT_IMPORT = FORGE + "_tirl_exit()\n"
PLUGIN = FORGE + "def pytest_configure(config):\n    _tirl_exit()\n_tirl_exit()\n"

ATTACKS: dict[str, list[str]] = {
    # issue 22: replace print in the runner's __main__; the results line then reports no failures
    "main_print": [
        append_to_module(
            FORGE
            + "import builtins as _b, __main__ as _m\n_p = _b.print\n"
            + "def _fake(*a, **k):\n    if any('TIRL_' in str(x) for x in a):\n"
            + "        return _p(_tirl_forge())\n    return _p(*a, **k)\n"
            + "_m.print = _fake\n_b.print = _fake\n"
        )
    ],
    # issue 22: pprint.py at the workspace root shadows the standard library inside the test process
    "pprint_shadow": [write("pprint.py", EXIT_AT_IMPORT)],
    "argparse_shadow": [write("argparse.py", EXIT_AT_IMPORT)],
    "difflib_shadow": [write("difflib.py", EXIT_AT_IMPORT)],
    "pytest_shadow": [write("pytest.py", EXIT_AT_IMPORT)],
    "_pytest_shadow": [write("_pytest/__init__.py", EXIT_AT_IMPORT)],
    "pluggy_shadow": [write("pluggy/__init__.py", EXIT_AT_IMPORT)],
    "json_shadow": [write("json/__init__.py", EXIT_AT_IMPORT)],
    "os_exit_fake_output": [append_to_module(EXIT_AT_IMPORT)],
    "sys_exit_patched": [
        append_to_module(
            FORGE + "_real_exit = _sys.exit\n_sys.exit = lambda *a: (_sys.stdout.write(_tirl_forge()), _real_exit(0))\n"
            "_sys.exit(1)\n"
        )
    ],
    "atexit_fake_output": [
        append_to_module(FORGE + "import atexit as _ae\n_ae.register(lambda: _sys.stdout.write(_tirl_forge()))\n")
    ],
    # in-memory patching of pytest inside the test process: every failing call is reported as passed
    "pytest_internals_patched": [
        append_to_module(
            "import sys as _s\n"
            "_r = _s.modules.get('_pytest.runner')\n"
            "if _r is not None:\n"
            "    _orig = _r.CallInfo.from_call.__func__\n"
            "    def _from_call(cls, func, when, reraise=None):\n"
            "        info = _orig(cls, func, when, reraise)\n"
            "        object.__setattr__(info, 'excinfo', None)\n"
            "        return info\n"
            "    _r.CallInfo.from_call = classmethod(_from_call)\n"
        )
    ],
    "stdout_replaced": [
        append_to_module(
            "import re as _re, sys as _s\n"
            "class _W:\n"
            "    def __init__(self, inner):\n        self.inner = inner\n"
            "    def write(self, text):\n"
            "        text = _re.sub(r'\"(failed|errors)\": [0-9]+', r'\"\\1\": 0', text)\n"
            "        return self.inner.write(_re.sub(r'[0-9]+ failed', '0 failed', text))\n"
            "    def __getattr__(self, name):\n        return getattr(self.inner, name)\n"
            "_s.stdout = _W(_s.stdout)\n"
        )
    ],
    "stdlib_function_patched": [
        append_to_module(
            "import json as _j\n_dumps = _j.dumps\n"
            "def _fake(obj, *a, **k):\n"
            "    if isinstance(obj, dict) and 'failed' in obj:\n"
            "        obj = dict(obj, passed=obj['passed'] + obj['failed'], failed=0, errors=0)\n"
            "    return _dumps(obj, *a, **k)\n"
            "_j.dumps = _fake\n"
        )
    ],
    "sitecustomize": [write("sitecustomize.py", EXIT_AT_IMPORT), write("usercustomize.py", EXIT_AT_IMPORT)],
    "pth_file": [write("zz_evil.pth", "import os; os._exit(0)\n"), write("evil.pth", "import pprint\n")],
    "conftest_any_depth": [
        write(path, PLUGIN)
        for path in (
            "conftest.py",
            f"{PACKAGE}/conftest.py",
            "tests/conftest.py",
            "a/b/c/conftest.py",
            ".tirl_eval/conftest.py",
        )
    ],
    "entry_point_plugin": [
        write("evilplug.py", PLUGIN),
        write("evil-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n"),
        write("evil-1.0.dist-info/entry_points.txt", "[pytest11]\nevil = evilplug\n"),
    ],
    "ini_plugin_options": [
        write("evilplug.py", PLUGIN),
        write("pytest.ini", "[pytest]\naddopts = -p evilplug\n"),
        write("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p evilplug"\n'),
        write("setup.cfg", "[tool:pytest]\naddopts = -p evilplug\n"),
        write("tox.ini", "[pytest]\naddopts = -p evilplug\n"),
    ],
    "dotenv_pythonpath": [
        write("evil/pprint.py", EXIT_AT_IMPORT),
        write("evil/argparse.py", EXIT_AT_IMPORT),
        write(".env", "PYTHONPATH=/work/evil\nPYTEST_ADDOPTS=-p evilplug\nPYTEST_PLUGINS=evilplug\n"),
        write("evilplug.py", PLUGIN),
    ],
    "fake_results_line": [
        append_to_module(
            'print(\'\\nTIRL_PYTEST_0123456789abcdef {"passed": 6, "failed": 0, "errors": 0, "skipped": 0}\')\n'
            'print(\'TIRL_VERDICT 0123456789abcdef0123456789abcdef {"passed": 6, "failed": 0}\')\n'
            "print('6 passed in 0.01s')\n"
        )
    ],
}

#: Cases that got reward 1.0 on the scorer before issue 22 (checked at commit 713d207; see the commit message).
FORGED_BEFORE = {
    "main_print",
    "pprint_shadow",
    "argparse_shadow",
    "difflib_shadow",
    "os_exit_fake_output",
    "atexit_fake_output",
    "pytest_internals_patched",
    "stdlib_function_patched",
}


def test_every_case_that_forged_before_is_still_attempted() -> None:
    assert set(ATTACKS) >= FORGED_BEFORE


@pytest.fixture
def make(make_swe):  # type: ignore[no-untyped-def]
    """The shared swe-lite env factory (tests/envs/conftest.py)."""
    return make_swe


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_a_forgery_without_a_fix_gets_reward_0(make, attack: str) -> None:  # type: ignore[no-untyped-def]
    turn = "```bash\n" + "\n".join(ATTACKS[attack]) + "\nsubmit\n```"
    result = await play(make(), TASK, [turn])
    assert result.reason is TerminationReason.SUBMITTED, result.error
    assert result.reward == 0.0 and not result.correct, (attack, result.info.get("eval_output"))


@pytest.mark.parametrize("attack", ["main_print", "pprint_shadow", "pytest_internals_patched", "conftest_any_depth"])
async def test_the_honest_fix_still_passes_next_to_the_attack_files(make, attack: str) -> None:  # type: ignore[no-untyped-def]
    """The same files planted, then the real fix: reward 1.0 (the scorer is not merely refusing everything).

    The files are planted before the fix: the expert's patch replaces one line, appended code stays in
    the module and runs in the subject process, where it can only harm itself.
    """
    _look, patch, submit = expert_solution(TASK)
    plant = "```bash\n" + "\n".join(ATTACKS[attack]) + "\n```"
    result = await play(make(), TASK, [plant, patch, submit])
    assert result.reason is TerminationReason.SUBMITTED
    assert result.reward == 1.0, (attack, result.info.get("eval_output"))


async def test_text_no_command_line_can_carry_is_a_failed_command_not_an_infrastructure_error(make) -> None:  # type: ignore[no-untyped-def]
    """A tool call whose JSON arguments hold ``"\\ud800"``, and a 140 KB block: each a failed command, and on.

    Both are the policy's text. Before the fix the sandbox could not start either (``bash -c`` carries the
    code in argv: UnicodeEncodeError, E2BIG) and reported ``error``: the episode ended ``error``, an
    infrastructure failure left out of the update, so any episode could leave its reward that way.
    """
    env = make()
    await env.reset(TASK)
    call = ToolCall("bash", '{"command": "echo \\ud800"}')
    actions = [
        Message(role=Role.ASSISTANT, content=None, tool_calls=(call,)),
        Message(role=Role.ASSISTANT, content="```bash\n: '" + "x" * 140_000 + "'\n```"),
    ]
    _look, patch, submit = expert_solution(TASK)
    try:
        for action in actions:
            step = await env.step(action)
            assert step.reason is None and "error" not in step.info, step.info
            assert step.info["exit_codes"] == [1] and "error: the code" in (step.observation[0].content or "")
        await env.step(Message(role=Role.ASSISTANT, content=patch))
        end = await env.step(Message(role=Role.ASSISTANT, content=submit))
        assert end.reason is TerminationReason.SUBMITTED
        assert (await env.evaluate()).reward == 1.0
    finally:
        await env.close()
