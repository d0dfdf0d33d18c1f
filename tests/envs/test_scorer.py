"""The swe-lite judge (tirl.envs.scorer*): its wire, its verdict channel, and what the subject can reach.

The codec and verdict parser are tested directly; the rest runs whole episodes through the real
bubblewrap sandbox and the rollout stages (``play``/``make_strategy``), with tasks written for the
test: each checks one property of the judge (values, not objects, cross back; the subject cannot
see the secret, the hidden tests or the judge's descriptors; a failure the episode causes is its
reward 0, counted, and never ``eval_failed``). Forgery attempts on the generated tasks are in
test_swe_forgery.py.
"""

from __future__ import annotations

import collections
import json
import os
import types
from pathlib import Path

import pytest

from tirl.config import RolloutConfig
from tirl.envs import scorer, scorer_wire
from tirl.envs.base import Task
from tirl.envs.scorer import Verdict, read_verdict
from tirl.envs.scorer_wire import WireError, decode, encode
from tirl.envs.swe_lite import generate_swe_tasks
from tirl.envs.tasks.swe_programs import PROGRAMS
from tirl.envs.workspace import materialise, pytest_bundle
from tirl.rollout.base import RolloutRequest
from tirl.rollout.strategies import make_strategy
from tirl.testing import play
from tirl.testing.scripted import ScriptedRunner
from tirl.trainer.trainer import rollout_metrics
from tirl.types import TerminationReason

SECRET = "5ec2e7" * 5 + "ab"  # 32 hex digits, what secrets.token_hex(16) gives


def task(files: dict[str, str], hidden: dict[str, str], name: str = "judge") -> Task:
    return Task(id=name, prompt="p", kind="swe-lite", data={"files": files, "hidden_tests": hidden})


@pytest.fixture
def make(make_swe):  # type: ignore[no-untyped-def]
    """The shared swe-lite env factory (tests/envs/conftest.py)."""
    return make_swe


SUBMIT = ["<answer>submit</answer>"]


# --- the wire and the verdict line ---------------------------------------------------------------


def test_values_round_trip_and_everything_else_is_a_reference() -> None:
    value = [None, True, 3, 2.5, "s", (1, (2,)), {"k": [1]}, {1, 2}, frozenset({3}), b"\x00\xff", 1 + 2j]
    assert decode(encode(value, None), None) == value
    assert type(decode(encode((1,), None), None)) is tuple

    class F(float):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = float.__hash__

    refs: list[object] = []
    encoded = encode([F(1.0), True, object], lambda obj: refs.append(obj) or {"h": [7, "F"]})
    assert encoded == {"l": [1.0, True, {"h": [7, "F"]}]} and refs == [object]  # F(1.0) goes as the float 1.0
    assert type(decode(encode(F(1.0), None), None)) is float
    point = collections.namedtuple("point", "x y")(1, 2)
    assert decode(encode([point, collections.OrderedDict(a=1)], None), None) == [(1, 2), {"a": 1}]


@pytest.mark.parametrize("bad", [{"l": [1], "t": [2]}, {"d": [[1]]}, {"c": [1, "x"]}, [1, 2], {"x": 1}])
def test_malformed_values_are_refused(bad: object) -> None:
    def unknown(tag: str, payload: object) -> object:
        raise WireError(f"unknown tag {tag}")

    with pytest.raises(WireError):
        decode(bad, unknown)


def test_a_value_nested_too_deeply_is_refused() -> None:
    deep: list[object] = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(WireError, match="deeply"):
        encode(deep, None)


def test_only_the_line_signed_with_the_secret_is_a_verdict() -> None:
    from tirl.envs.scorer_runner import verdict_mac

    good = '{"passed": 3, "failed": 0, "errors": 0, "skipped": 1, "timed_out": false, "failures": []}'

    def signed(payload: str) -> str:
        return f"{verdict_mac(SECRET, payload)} {payload}"

    out = f"{'0' * 64} {good.replace('3', '9')}\n{signed(good)}\nTIRL {good}\n{SECRET} {good.replace('3', '9')}\n"
    assert read_verdict(out, SECRET) == Verdict(3, 0, 0, 1)  # the secret itself as the tag is no signature
    assert read_verdict(out, "f" * 32) is None
    assert read_verdict(signed(good.replace("3", "-3")), SECRET) is None
    assert read_verdict(signed("[1]"), SECRET) is None
    assert read_verdict(signed("{"), SECRET) is None
    assert read_verdict("\ud800 \udc00\n", SECRET) is None  # text no encoder takes is no verdict, never a crash


def test_the_judge_program_fits_one_command_line() -> None:
    """The judge goes to the sandbox as ``python -c CODE``; past MAX_ARG_STRLEN every verdict would be lost.

    The sandbox refuses such code as the program's failure, so a judge grown too long would score every
    episode 0 (``no_verdict``) rather than fail loudly: this test is the loud failure.
    """
    from tirl.sandbox._common import MAX_ARG_BYTES

    size = len(os.fsencode(scorer.judge_code(60.0)))
    assert size < MAX_ARG_BYTES // 2, f"the judge program is {size} bytes (limit {MAX_ARG_BYTES})"


# --- episodes through the real sandbox -------------------------------------------------------------


POINTKIT = """
from dataclasses import dataclass
ORIGIN_NAME = "origin"
@dataclass
class Point:
    x: int
    y: int
    def __iter__(self):
        return iter((self.x, self.y))
    def __len__(self):
        return 2
    def __getitem__(self, i):
        return (self.x, self.y)[i]
    def __str__(self):
        return f"({self.x}, {self.y})"
def make(x, y=0):
    return Point(x, y)
"""
POINTKIT_TESTS = """
import pointkit
from pointkit import ORIGIN_NAME, Point, make
def test_objects():
    a, b = make(1, 2), Point(1, 2)
    assert a == b and not (a != b) and a != make(2)
    assert list(a) == [1, 2] and len(a) == 2 and a[1] == 2 and 2 in a and str(a) == "(1, 2)"
    a.x = 5
    assert a.x == 5 and a != b
    assert ORIGIN_NAME == "origin" and pointkit.ORIGIN_NAME == "origin"
    assert make(1) != (1, 0)  # an object never equals a value
"""


def all_programs() -> Task:
    files, hidden = {"pointkit/__init__.py": POINTKIT}, {"test_pointkit.py": POINTKIT_TESTS}
    for program in PROGRAMS:
        files[f"{program.package}/__init__.py"] = f"from {program.package}.core import *  # noqa: F403\n"
        files[program.module_path] = program.source
        hidden[f"test_{program.package}.py"] = program.tests
    return task(files, hidden, "all-programs")


async def test_every_shipped_program_passes_through_the_judge(make) -> None:  # type: ignore[no-untyped-def]
    """All 8 programs (objects, methods, ``pytest.raises(match=)``, ``is False``) and the operations on objects."""
    result = await play(make(reward_mode="fraction"), all_programs(), SUBMIT)
    expected = sum(p.tests.count("\ndef test_") for p in PROGRAMS) + 1
    assert result.info["tests_total"] == expected and result.info["tests_passed"] == expected, result.info
    assert result.reward == 1.0 and result.info["eval_failure"] is None


ALWAYS_EQUAL = """
class AnyEq:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
class F(float):
    def __eq__(self, other):
        return True
    __hash__ = float.__hash__
def mean(xs):
    return AnyEq()
def median(xs):
    return F(0.0)
def items(xs):
    return [AnyEq()]
"""
ALWAYS_EQUAL_TESTS = """
from anyeq import items, mean, median
def test_mean():
    assert mean([1, 2]) == 1.5
def test_median():
    assert median([1, 2]) == 1.5
def test_items():
    assert items([1]) == [1]
"""


async def test_an_object_that_equals_everything_equals_no_value(make) -> None:  # type: ignore[no-untyped-def]
    t = task({"anyeq/__init__.py": ALWAYS_EQUAL}, {"test_anyeq.py": ALWAYS_EQUAL_TESTS})
    result = await play(make(), t, SUBMIT)
    assert result.reward == 0.0 and result.info["tests_failed"] == 3, result.info


STOP_TESTS = """
from primes import is_prime
def test_all():
    assert all(map(is_prime, [2, 3, 5, 7]))
def test_none():
    assert not any(map(is_prime, [1, 4, 9, 15]))
def test_filter():
    assert list(filter(is_prime, range(10))) == [2, 3, 5, 7]
"""


async def test_a_stop_iteration_from_the_code_under_test_does_not_end_the_judges_iteration(make) -> None:  # type: ignore[no-untyped-def]
    """``is_prime`` raises ``StopIteration``: inside ``map`` in the judge that once ended the iteration.

    ``all()`` of an empty iteration is True, ``any()`` False: two of the three tests passed (reward 2/3 with
    ``reward_mode="fraction"``) with no answer computed. Now it is an error of the call, as PEP 479 makes it in
    generators, and every test fails.
    """
    files = {"primes/__init__.py": "def is_prime(n):\n    raise StopIteration\n"}
    result = await play(make(reward_mode="fraction"), task(files, {"test_primes.py": STOP_TESTS}), SUBMIT)
    assert result.reward == 0.0 and result.info["tests_failed"] == 3, result.info


CAUGHT_CODE = """import os, sys
def crash(s):
    os._exit(3)
def interrupt(s):
    raise KeyboardInterrupt
def leave(s):
    raise SystemExit(0)
def garble(s):
    os.write(int(sys.argv[2]), b"not json\\n")
"""
CAUGHT_TESTS = """import pytest
import calc
def test_crash():
    with pytest.raises(Exception):
        calc.crash(1)
def test_interrupt():
    with pytest.raises(Exception):
        calc.interrupt(1)
def test_exit():
    with pytest.raises(Exception):
        calc.leave(1)
def test_garble():
    with pytest.raises(Exception):
        calc.garble(1)
def test_bare():
    try:
        calc.crash(1)
    except BaseException:
        pass
"""


async def test_a_test_that_expects_an_error_does_not_pass_when_the_code_under_test_dies(make) -> None:  # type: ignore[no-untyped-def]
    """The judge's own failures (the subject exited, broke the wire, raised no ``Exception``) fail the test.

    They were ``Exception``s in the judge: ``pytest.raises(Exception)`` and ``except Exception`` took a subject
    that only called ``os._exit``, raised ``KeyboardInterrupt`` or ``SystemExit`` (under pytest itself none of
    them is caught by either), or wrote nonsense on the wire for the error the test expected: all five passed
    (found by the red-team pass of session 45). A test that catches even ``BaseException`` fails too.
    """
    t = task({"calc/__init__.py": CAUGHT_CODE}, {"test_calc.py": CAUGHT_TESTS})
    result = await play(make(reward_mode="fraction"), t, SUBMIT)
    assert result.reward == 0.0 and result.info["tests_failed"] == 5, result.info


MUTATING_CODE = """
def sorted_copy(xs):
    xs.sort()
    return xs
def add(xs, x):
    xs.append(x)
def set_cell(grid, i, j, v):
    grid[i][j] = v
def configure(cfg=None):
    cfg["seen"] = True
    cfg["inner"].add(3)
def check_sorted(xs):
    xs.sort()
    raise ValueError("was not sorted")
"""
MUTATING_TESTS = """
import pytest
from lists import add, check_sorted, configure, set_cell, sorted_copy
def test_unchanged_after_an_error():
    xs = [2, 1]
    with pytest.raises(ValueError):
        check_sorted(xs)
    assert xs == [2, 1]
def test_input_unchanged():
    xs = [3, 1, 2]
    assert sorted_copy(xs) == [1, 2, 3]
    assert xs == [3, 1, 2]
def test_add():
    xs = [1]
    assert add(xs, 2) is None
    assert xs == [1, 2]
def test_cell():
    grid = [[0, 0], [0, 0]]
    row = grid[0]
    set_cell(grid, 0, 1, 5)
    assert row == [0, 5] and grid == [[0, 5], [0, 0]]
def test_keyword():
    inner = {1}
    cfg = {"inner": inner}
    configure(cfg=cfg)
    assert cfg == {"inner": {1, 3}, "seen": True} and inner == {1, 3}
"""


async def test_what_a_call_does_to_its_arguments_is_what_the_test_sees(make) -> None:  # type: ignore[no-untyped-def]
    """Arguments cross to the subject as copies; the changes a call makes to its containers come back.

    Before session 45 they did not: a test that a function leaves its input alone passed for code that sorted
    the caller's list in place (reward 1.0 with that bug in place), and correct code that changes its
    argument (``append``, a nested cell, a keyword ``dict``) failed. Now only the two functions that change
    an input they must leave alone fail (one of them then raises), and the containers the test already held
    (``row``, ``inner``) see the change.
    """
    t = task({"lists/__init__.py": MUTATING_CODE}, {"test_lists.py": MUTATING_TESTS})
    result = await play(make(reward_mode="fraction"), t, SUBMIT)
    failing = ["test_unchanged_after_an_error", "test_input_unchanged"]
    assert result.info["tests_passed"] == 3 and result.info["tests_failing"] == failing, result.info


def test_an_argument_comes_back_only_as_what_a_call_can_make_of_it() -> None:
    xs, inner = [1, [2]], {"k": {1}}
    kept = xs[1]
    scorer_wire.sync(xs, [1, [2, 3], 4])
    scorer_wire.sync(inner, {"k": {5}, "j": 0})
    assert xs == [1, [2, 3], 4] and kept is xs[1] and inner == {"k": {5}, "j": 0}
    for local, new in (([1], (1,)), ({1}, [1]), ((1, []), (1,)), (5, 6), (([],), ({},))):
        with pytest.raises(WireError):
            scorer_wire.sync(local, new)


PRINTING_CODE = """import sys, warnings
def greet(name):
    print(f"Hello, {name}!")
    sys.stdout.buffer.write(b"bytes too\\n")
    print("careful", file=sys.stderr)
def double(x):
    print("debug:", x)
    return x * 2
def fail(x):
    print("about to fail")
    raise ValueError(x)
def old_api(x):
    warnings.warn("old_api is deprecated", DeprecationWarning)
    return x
def loud(x):
    warnings.warn("careful", UserWarning)
    return x
"""
PRINTING_TESTS = """import pytest
from talk import double, fail, greet, loud, old_api
def test_warns():
    with pytest.warns(DeprecationWarning, match="deprecated"):
        assert old_api(1) == 1
@pytest.mark.filterwarnings("error")
def test_no_warning():
    assert loud(1) == 1
def test_greet(capsys):
    greet("Ann")
    assert capsys.readouterr() == ("Hello, Ann!\\nbytes too\\n", "careful\\n")
def test_silent(capsys):
    assert double(2) == 4
    assert capsys.readouterr().out == ""
def test_fail(capsys):
    with pytest.raises(ValueError):
        fail(1)
    assert capsys.readouterr().out == "about to fail\\n"
"""


async def test_what_the_code_under_test_prints_or_warns_reaches_the_test(make) -> None:  # type: ignore[no-untyped-def]
    """A call's ``sys.stdout``/``sys.stderr`` output goes to the judge's, where ``capsys`` reads it; its warnings too.

    Before session 45 the output went straight to the judge's standard error and the warnings stayed in the
    subject: a test that a function prints nothing, or warns nothing (``filterwarnings("error")``), passed for
    code that did (reward 1.0 with that bug in place), and tests of what a function prints or warns failed
    for correct code. Now only the chatty ``double`` and the warning ``loud`` fail.
    """
    t = task({"talk/__init__.py": PRINTING_CODE}, {"test_talk.py": PRINTING_TESTS})
    result = await play(make(reward_mode="fraction"), t, SUBMIT)
    failing = ["test_no_warning", "test_silent"]
    assert result.info["tests_passed"] == 3 and result.info["tests_failing"] == failing, result.info


HELPER_HIDDEN = {
    "helpers.py": "CASES = [(1, 2), (5, 10)]\n",
    "test_calc.py": "from calc import double\nfrom helpers import CASES\ndef test_double():\n"
    "    for x, want in CASES:\n        assert double(x) == want\n",
}
FORGED_HELPER = "printf 'CASES = [(1, 2), (5, 6)]\\n' > helpers.py"


@pytest.mark.parametrize("fixed", [False, True])
async def test_a_helper_module_of_the_hidden_tests_comes_from_them_not_the_workspace(make, fixed: bool) -> None:  # type: ignore[no-untyped-def]
    """``from helpers import CASES`` in a hidden test loads the hidden ``helpers.py``, whatever the workspace holds.

    It used to be a reference into the subject, which imports from the workspace: an agent that wrote a
    ``helpers.py`` whose expected values matched the bug got reward 1.0 (found by the red-team pass of
    session 45). Now the forged file changes nothing, and the fix (``x * 2``) passes next to it.
    """
    body = "x * 2" if fixed else "x + 1"
    t = task({"calc/__init__.py": f"def double(x):\n    return {body}\n"}, HELPER_HIDDEN)
    result = await play(make(), t, [f"```bash\n{FORGED_HELPER}\n```", *SUBMIT])
    assert result.reward == float(fixed), result.info


PROBE = """
import glob, os
def reachable(secret):
    found = []
    for path in glob.glob(".tirl_eval/**", recursive=True) + glob.glob("/tmp/**", recursive=True):
        if os.path.isfile(path):
            found.append(path)
    judge = os.getppid()
    for name in ("mem", "environ", "maps", "fd/0", "fd/1", "fd/2", "fd"):
        try:
            if name == "fd":
                os.listdir(f"/proc/{judge}/fd")
            else:
                with open(f"/proc/{judge}/{name}", "rb") as f:
                    f.read(1)
            found.append(f"/proc/judge/{name}")
        except OSError:
            pass
    for pid in [d for d in os.listdir("/proc") if d.isdigit()]:
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    if secret.encode() in f.read():
                        found.append(f"secret in /proc/{pid}/{name}")
            except OSError:
                pass
    return found
def sane():
    return os.path.isfile("probe/__init__.py") and os.getppid() > 1
"""


async def test_the_subject_reaches_no_secret_hidden_test_or_judge_descriptor(  # type: ignore[no-untyped-def]
    make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe lists what it could open; the hidden test wants nothing (and a sane probe)."""
    monkeypatch.setattr(scorer, "secrets", types.SimpleNamespace(token_hex=lambda n: SECRET))
    hidden = {
        "test_probe.py": f"from probe import reachable, sane\ndef test_probe():\n    assert sane()\n"
        f"    assert reachable({SECRET!r}) == []\n"
    }
    result = await play(make(), task({"probe/__init__.py": PROBE}, hidden), SUBMIT)
    assert result.reward == 1.0, result.info.get("eval_output")


async def test_calling_the_code_under_test_at_import_is_a_collection_error(make) -> None:  # type: ignore[no-untyped-def]
    hidden = {"test_x.py": "from calc import double\nVALUE = double(2)\ndef test_x():\n    assert VALUE == 4\n"}
    result = await play(make(), task({"calc.py": "def double(x):\n    return 2 * x\n"}, hidden), SUBMIT)
    assert result.reward == 0.0 and result.info["tests_errors"] >= 1, result.info


async def test_a_test_past_the_deadline_fails_and_the_others_still_count(make) -> None:  # type: ignore[no-untyped-def]
    files = {"spin.py": "def fast():\n    return 1\ndef spin():\n    while True:\n        pass\n"}
    hidden = {
        "test_spin.py": "from spin import fast, spin\ndef test_a():\n    assert fast() == 1\n"
        "def test_b():\n    spin()\n"
    }
    result = await play(make(eval_timeout_s=4.0, reward_mode="fraction"), task(files, hidden), SUBMIT)
    assert result.info["eval_timed_out"] is True and result.info["tests_passed"] == 1
    assert result.info["tests_failed"] == 1 and result.reward == 0.5
    assert result.reason is TerminationReason.SUBMITTED and not result.trajectory.failed


async def test_killing_the_judge_is_reward_0_not_eval_failed(make) -> None:  # type: ignore[no-untyped-def]
    """Writing a fake verdict to the stdout of the sandbox init and the judge, then killing it: reward 0."""
    module = TASK.data["module"]
    kill = (
        "import os, signal\n"
        "for pid in (1, os.getppid(), 'self'):  # the sandbox's init, the judge (never the host's processes)\n"
        "    try:\n"
        "        with open(f'/proc/{pid}/fd/1', 'w') as f:\n"
        '            f.write(\'\\n\' + \'0\' * 32 + \' {"passed": 9, "failed": 0, "errors": 0, "skipped": 0,\'\n'
        '                    \' "timed_out": false, "failures": []}\\n\')\n'
        "    except OSError:\n"
        "        pass\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n"
    )
    turn = f"```bash\ncat >> {module} <<'EOF'\n{kill}EOF\nsubmit\n```"
    result = await play(make(), TASK, [turn])
    assert result.reason is TerminationReason.SUBMITTED and not result.trajectory.failed
    assert result.reward == 0.0 and result.info["eval_failure"] == "no_verdict", result.info


async def test_the_verdict_line_as_it_travels_signs_no_other_verdict(make, swe_cache: Path) -> None:  # type: ignore[no-untyped-def]
    """The real judge's line, read on its way (as a subject can where the sandbox runs as the host's uid): no key.

    Before the fix the line began with the secret itself, so whoever read it (a daemon of the code under
    test holding ``/proc/1/fd/1`` open for reading: ``verdict_pipe_thief`` in test_swe_forgery.py) could
    append ``<secret> {"passed": 5, "failed": 0, ...}``, and the host took it (reward 1.0 on the unfixed bug,
    found in session 45). Now the line carries an HMAC of its JSON: the same tag on another JSON is refused.
    """
    env = make()
    await env.reset(TASK)
    try:
        assert env.workspace is not None
        hidden = materialise(TASK, swe_cache).hidden
        assert hidden is not None
        secret = scorer.stage(env.workspace, hidden, pytest_bundle(swe_cache))
        run = await (await env.sandbox()).run(
            scorer.judge_code(20.0), lang="python", timeout_s=25.0, workdir=env.workspace
        )
    finally:
        await env.close()
    genuine = read_verdict(run.stdout, secret)
    assert genuine is not None and genuine.failed == 1, (run.stdout, run.stderr[-2000:])
    (line,) = [ln for ln in run.stdout.splitlines() if ln.strip()]
    assert secret not in run.stdout
    tag, _, payload = line.partition(" ")
    forged = json.dumps(dict(json.loads(payload), passed=genuine.passed + 1, failed=0, failures=[]))
    assert read_verdict(f"{run.stdout}\n{tag} {forged}\n", secret) == genuine  # the forged line is not a verdict
    assert read_verdict(f"{tag} {forged}\n", secret) is None


TASK = generate_swe_tasks(1, seed=0, kinds=("wrong_operator",))[0]
FILL = {
    "bytes": "n = 0\ntry:\n    while True:\n        with open(f'big{n}', 'wb') as f:\n"
    "            f.write(b'0' * (8 << 20))\n        n += 1\nexcept OSError:\n    print('full')\n",
    "files": "n = 0\ntry:\n    while True:\n        open(f'f{n}', 'w').close()\n        n += 1\n"
    "except OSError:\n    print('full')\n",
}


@pytest.mark.skipif(os.geteuid() != 0, reason="the workspace caps need root (documented in docs/sandbox.md)")
@pytest.mark.parametrize("what", sorted(FILL))
async def test_a_workspace_filled_to_its_cap_is_reward_0_and_counted(make, what: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 22: filling the workspace made evaluate() fail (ENOSPC) and the episode ended ``eval_failed``."""
    turn = f"```python\n{FILL[what]}```"
    strategy = make_strategy(
        RolloutConfig(strategy="sync_batch", retries=0), lambda _t: make(), ScriptedRunner([turn, SUBMIT[0]])
    )
    try:
        batch = await strategy.collect(RolloutRequest(tasks=[TASK], group_size=1))
    finally:
        await strategy.close()
    traj = batch.trajectories[0]
    assert "full" in (traj.messages[-2].content or ""), traj.messages[-2]
    assert traj.termination is TerminationReason.SUBMITTED and not traj.failed, traj.error
    assert traj.reward == 0.0 and traj.info["eval"]["eval_failure"] == "workspace_full"
    assert rollout_metrics(batch.trajectories)["rollout/eval_failure/workspace_full"] == 1.0


async def test_a_jsonl_repository_without_a_test_command_goes_to_the_judge(  # type: ignore[no-untyped-def]
    make, work_root: Path
) -> None:
    """A user repository with ``hidden_tests`` and no ``test_command``: judged, so the os._exit forgery fails."""
    import json

    from tirl.envs.swe_lite import load_swe_tasks

    repo, hidden = work_root / "calc", work_root / "hidden"
    (repo / "calc").mkdir(parents=True)
    (repo / "calc" / "__init__.py").write_text("def double(x):\n    return x + x + 1\n")
    hidden.mkdir()
    (hidden / "test_calc.py").write_text("from calc import double\ndef test_two():\n    assert double(1) == 2\n")
    (work_root / "swe.jsonl").write_text(json.dumps({"repo": "calc", "prompt": "fix", "hidden_tests": "hidden"}))
    (task_,) = load_swe_tasks(work_root / "swe.jsonl")
    assert task_.data["test_command"] is None
    forge = (
        "```bash\nprintf 'import os\\nprint(\"1 passed in 0.01s\")\\nos._exit(0)\\n' >> calc/__init__.py\nsubmit\n```"
    )
    forged = await play(make(), task_, [forge])
    assert forged.reward == 0.0 and forged.info["tests_failed"] == 1, forged.info
    fix = "```bash\nsed -i 's/x + x + 1/x + x/' calc/__init__.py\nsubmit\n```"
    fixed = await play(make(), task_, [fix])
    assert fixed.reward == 1.0 and fixed.info["tests_passed"] == 1, fixed.info.get("eval_output")


async def test_interrupting_the_judge_does_not_drop_the_failing_tests(make) -> None:  # type: ignore[no-untyped-def]
    """SIGINT to the judge in the one test the code cannot pass: the tests not reported count as errors.

    Before the fix pytest stopped as interrupted and the verdict counted only the test that had passed
    (reward 1.0).
    """
    files = {
        "sly.py": "import os, signal, time\ndef fast():\n    return 1\n"
        "def hard():\n    os.kill(os.getppid(), signal.SIGINT)\n    time.sleep(2)\n    return 0\n"
    }
    hidden = {
        "test_sly.py": "import pytest\nfrom sly import fast, hard\ndef test_a():\n    assert fast() == 1\n"
        "def test_b():\n    assert hard() == 42\ndef test_c():\n    assert fast() == 1\n"
    }
    result = await play(make(), task(files, hidden), SUBMIT)
    assert result.reward == 0.0, result.info
    assert result.info["tests_total"] == 3 and result.info["tests_passed"] <= 2, result.info


def test_a_collected_test_without_an_outcome_counts_as_an_error() -> None:
    from tirl.envs.scorer_runner import Tally

    tally = Tally(types.SimpleNamespace(timed_out=False, broken=""), "tests")  # type: ignore[arg-type]
    tally.collected = 3
    tally.pytest_runtest_logreport(types.SimpleNamespace(passed=True, skipped=False, when="call", nodeid="t::a"))
    assert tally.verdict()["passed"] == 1 and tally.verdict()["errors"] == 2


async def test_lowering_the_judges_limits_only_fails_tests(make) -> None:  # type: ignore[no-untyped-def]
    """``prlimit`` on the judge (same uid: the kernel allows it) makes later calls fail, never pass.

    ``test_d`` expects an error: the judge's own ``OSError`` (no descriptor left for the next subject's pipes)
    once passed it (found by the red-team pass of session 45).
    """
    files = {
        "sly.py": "import os, resource\ndef fast():\n    return 1\ndef hard():\n"
        "    for res, val in ((resource.RLIMIT_AS, 64 << 20), (resource.RLIMIT_NOFILE, 5)):\n"
        "        resource.prlimit(os.getppid(), res, (val, val))\n    return 0\n"
    }
    hidden = {
        "test_sly.py": "import pytest\nfrom sly import fast, hard\ndef test_a():\n    assert fast() == 1\n"
        "def test_b():\n    assert hard() == 42\ndef test_c():\n    assert fast() == 1\n"
        "def test_d():\n    with pytest.raises(Exception):\n        fast()\n"
    }
    result = await play(make(), task(files, hidden), SUBMIT)
    assert result.reward == 0.0 and result.info["tests_total"] == 4 and result.info["tests_passed"] == 1, result.info


SHADOWING = {  # a package the judge imports itself: from pytest's bundle, and from the standard library
    "tomli": (
        "def loads(s):\n    return {}\n",
        "import tomli\ndef test_loads():\n    assert tomli.loads('a = 1') == {'a': 1}\n",
    ),
    "statistics": (
        "def mean(xs):\n    return sum(xs) / (len(xs) + 1)\n",
        "from statistics import mean\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n",
    ),
}


@pytest.mark.parametrize("name", sorted(SHADOWING))
async def test_a_repository_whose_package_the_judge_imports_itself_is_refused(  # type: ignore[no-untyped-def]
    make, work_root: Path, name: str
) -> None:
    """``tomli/`` or ``statistics/`` in the repository: the judge would import its own copy and pass the tests.

    Before the fix both tasks loaded, and an episode that changed nothing got reward 1.0 (the hidden tests
    ran on the bundle's tomli and the standard library's statistics). Now the task file is refused at load
    (it names the module and the fix), a task built in code is refused at reset (``init_failed``), and the
    same repository with a ``test_command`` (run in the workspace, where the package comes first) loads.
    """
    import json

    from tirl.envs.swe_lite import load_swe_tasks
    from tirl.errors import InputError

    source, test = SHADOWING[name]
    repo, hidden = work_root / "repo", work_root / "hidden"
    (repo / name).mkdir(parents=True)
    (repo / name / "__init__.py").write_text(source)
    hidden.mkdir()
    (hidden / f"test_{name}.py").write_text(test)
    row = {"repo": "repo", "prompt": "fix", "hidden_tests": "hidden"}
    (work_root / "swe.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError, match=f"'{name}'.*judge imports from its own copy.*test_command"):
        load_swe_tasks(work_root / "swe.jsonl")
    in_code = Task(id="shadow", prompt="fix", kind="swe-lite", data={"repo": str(repo), "hidden_tests": str(hidden)})
    result = await play(make(), in_code, ["```bash\necho nothing\nsubmit\n```"])
    assert result.reason is TerminationReason.INIT_FAILED and result.reward == 0.0, result
    assert name in (result.error or ""), result.error
    (work_root / "swe.jsonl").write_text(json.dumps(dict(row, test_command="python3 -m pytest -q hidden")) + "\n")
    assert load_swe_tasks(work_root / "swe.jsonl")[0].data["test_command"]
