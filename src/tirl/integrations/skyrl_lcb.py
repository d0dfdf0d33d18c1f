"""skyrl-gym's ``lcb`` (LiveCodeBench) reward with the model's program run in tirl's sandbox.

skyrl-gym's ``LCBEnv.step`` extracts the last fenced code block of the turn and
runs it against the row's tests in a forked child of tirl's process
(``skyrl_gym.envs.lcb.livecodebench.lcb_check_correctness``): the program runs
with tirl's privileges, and since the comparison with the expected outputs runs
in the same interpreter, the program can rewrite its own verdict.
:func:`lcb_step` (installed on the env instance by
:func:`tirl.integrations.skyrl_code.sandbox_env`) splits the two:

* **in the sandbox**: :data:`HARNESS` loads skyrl-gym's own ``livecodebench``
  module (its source, read from the installed package, is written to the run's
  private work directory with the program and the test *inputs* only) and
  executes the program as skyrl-gym does (``make_function``/``compile_code``/
  ``call_method`` for stdin programs, the named method for call-based ones,
  skyrl-gym's per-test alarm of 6 s and its ``reliability_guard``); it writes
  each test's raw output (stdin programs: the captured stdout; call-based: the
  return value as JSON) to a result file and stops at the first error;
* **on the host**: :func:`passes` compares them with the expected outputs,
  which never enter the sandbox, as skyrl-gym compares (stripped lines, then
  ``Decimal`` per element; call-based: equality, a returned tuple as a list).
  The reward is 1.0 when every test passes, else 0.0, as skyrl-gym's.

A program that crashes, times out (the sandbox's deadline is skyrl-gym's
global one: 7 s per test + 5 s) or writes no result scores 0, and so does one
that leaves a result the host cannot read or compare (not JSON, over 64 MiB, a
link, JSON nested past the parser's stack, a printed ``sNaN``, which ``Decimal``
equality refuses: before, those last two raised in the step and ended the
episode ``error``, outside the update); the sandbox
itself failing is an infrastructure error (:class:`~tirl.envs.base.EnvError`).

Not covered, differences from skyrl-gym's result: the sandbox's Python is the
base interpreter, so the prelude's ``numpy``/``pandas`` imports are dropped
when it lacks them (a program that uses them then fails); a call-based result
is compared as a JSON value (a nested tuple equals a list, an ``int`` key its
string), and one that is not JSON fails; the sandbox's memory limit applies.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["HARNESS", "lcb_reward", "lcb_step", "passes"]

_SPEC = "lcb_spec.json"
_RESULT = "lcb_result.json"
_TEST_TIMEOUT = 6  # skyrl-gym's per-test alarm (lcb_check_correctness's default)
_RESULT_MAX = 64 * 1024 * 1024  # a larger result file is the program's failure

#: The program run in the sandbox (its cwd is the private work directory holding the spec).
HARNESS = r"""
import json, signal, types
spec = json.load(open("lcb_spec.json"))
result_file = open("lcb_result.json", "w")
lcb = types.ModuleType("livecodebench")
exec(compile(spec["source"], "livecodebench.py", "exec"), lcb.__dict__)
kept = []
for line in lcb.import_string.splitlines():
    try:
        exec(line, {})
        kept.append(line)
    except Exception:
        pass  # numpy, pandas: absent from the sandbox's interpreter
lcb.import_string = "\n".join(kept)
results, t, fn = [], spec["timeout"], spec["fn_name"]
signal.signal(signal.SIGALRM, lcb.timeout_handler)
lcb.reliability_guard()
def verdict(exc):
    return "Time Limit Exceeded" if "timeoutexception" in repr(exc).lower() else "Runtime Error: " + repr(exc)[:200]
try:
    if fn is None:
        method = lcb.get_function(lcb.compile_code(lcb.make_function(lcb.clean_if_name(spec["code"])), t),
                                  "wrapped_function")
    else:
        method = lcb.get_function(lcb.compile_code(lcb.import_string + "\n\n" + spec["code"], t), fn)
    if method is None:
        raise RuntimeError("no function " + repr(fn or "wrapped_function"))
except BaseException as exc:
    results.append({"error": "Compilation Error: " + verdict(exc)})
    method = None
for inp in spec["inputs"] if method is not None else []:
    signal.alarm(t)
    try:
        if fn is None:
            with lcb.Capturing() as captured:
                lcb.call_method(method, inp)
            out = {"stdout": captured[0]}
        else:
            value = method(*[json.loads(line) for line in inp.split("\n")])
            out = {"json": json.dumps(list(value) if isinstance(value, tuple) else value)}
        signal.alarm(0)
    except BaseException as exc:
        signal.alarm(0)
        results.append({"error": verdict(exc)})
        break
    results.append(out)
json.dump(results, result_file)
result_file.close()
"""


def _stdio_match(got: str, expected: str, lcb: Any) -> bool:
    """skyrl-gym's ``grade_stdio`` comparison: stripped lines equal, else equal as ``Decimal`` numbers."""
    got_lines, want_lines = lcb.get_stripped_lines(got), lcb.get_stripped_lines(expected)
    if len(got_lines) != len(want_lines):
        return False
    for g, w in zip(got_lines, want_lines, strict=True):
        if g == w:
            continue
        ok_g, dec_g = lcb.convert_line_to_decimals(g)
        ok_w, dec_w = lcb.convert_line_to_decimals(w)
        try:
            if not (ok_g and ok_w and dec_g == dec_w):
                return False
        except ArithmeticError:  # == on a printed signaling NaN ("sNaN") raises InvalidOperation: no match
            return False
    return True


def passes(results: Any, outputs: list[str], call_based: bool) -> bool:
    """Whether the sandbox's raw ``results`` match every expected output (compared here, on the host)."""
    from skyrl_gym.envs.lcb import livecodebench as lcb

    if not isinstance(results, list) or len(results) != len(outputs):
        return False
    for got, expected in zip(results, outputs, strict=True):
        if not isinstance(got, dict):
            return False
        if call_based:
            try:
                if not isinstance(got.get("json"), str) or json.loads(got["json"]) != json.loads(expected):
                    return False
            except (ValueError, RecursionError):  # nested past the parser's stack: the program's failure
                return False
        elif not isinstance(got.get("stdout"), str) or not _stdio_match(got["stdout"], expected, lcb):
            return False
    return True


def _read_result(path: Path) -> Any:
    """The result file the sandbox wrote: a regular file (not a link), at most ``_RESULT_MAX`` bytes; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > _RESULT_MAX:
            return None
        try:
            return json.loads(fh.read(_RESULT_MAX + 1))
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's stack (the program wrote it)
            return None


def lcb_reward(code: Any, tests: list[dict[str, Any]], program: str) -> float:
    """1.0 when ``program`` passes every test of ``tests`` (an ``lcb`` row's ground truth), else 0.0.

    ``code`` is the env's :class:`~tirl.integrations.skyrl_code.SandboxedCode`.
    """
    from skyrl_gym.envs.lcb import livecodebench as lcb

    sample = json.loads(lcb.postprocess_lcb_sample(tests)["input_output"])
    inputs, outputs, fn_name = sample["inputs"], sample["outputs"], sample.get("fn_name")
    source = Path(lcb.__file__).read_text(encoding="utf-8")
    spec = {"source": source, "code": program, "inputs": inputs, "fn_name": fn_name, "timeout": _TEST_TIMEOUT}
    workdir = Path(tempfile.mkdtemp(prefix="tirl-lcb-"))
    try:
        (workdir / _SPEC).write_text(json.dumps(spec), encoding="utf-8")
        deadline = (_TEST_TIMEOUT + 1) * len(inputs) + 5  # skyrl-gym's global timeout
        result = code.run(HARNESS, timeout_s=float(deadline), workdir=workdir)
        if result.error is not None:
            return 0.0  # the sandbox broke: the adapter raises code.infra_error after the step
        return 1.0 if passes(_read_result(workdir / _RESULT), outputs, fn_name is not None) else 0.0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def lcb_step(env: Any, code: Any, action: str) -> dict[str, Any]:
    """``LCBEnv.step`` with the reward from :func:`lcb_reward`: one turn, done, no observation."""
    from skyrl_gym.envs.lcb.livecodebench import extract_code_from_model

    program = extract_code_from_model(action)
    reward = 0.0 if program is None else lcb_reward(code, env.tests, program)
    return {"observations": [], "reward": reward, "done": True, "metadata": {"parsed_code": program}}
