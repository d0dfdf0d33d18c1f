"""The swe-lite verdict program: it runs inside the sandbox, with the standard library and pytest only.

The host (:mod:`tirl.envs.scorer`) runs this module's source in the sandbox as one Python program,
the *judge*, with the episode's workspace as the working directory. The judge never imports a
module of the workspace. It runs the hidden tests with pytest, and every name the hidden tests
import from the repository (``from statkit import mean``) is a :class:`Remote` reference into a
second process, the *subject*: a fresh ``python -I`` per test that imports the repository and
answers the judge's requests over two pipes. What comes back is **data** (``None``, ``bool``,
``int``, ``float``, ``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set`` or
``frozenset``, a subclass as its base type's value, rebuilt by the judge from a tagged JSON form)
or an opaque reference to an object that stays in the subject; an exception comes back as its
nearest built-in exception class and its message (``StopIteration`` as a plain error: in ``map``
it would end the judge's iteration); one that is no ``Exception`` (``SystemExit``), a subject that dies
and a broken wire fail the test, even inside ``pytest.raises(Exception)`` (:class:`RemoteFailure`).
The assertions therefore run in the judge, on values it rebuilt itself: the code under test chooses
what its functions return, never what a comparison or a test outcome is. A reference never equals a
value (an object whose ``__eq__`` always answers True compares unequal to ``2.5``).

The order inside the judge; each step happens before any code of the workspace runs anywhere:

1. ``sys.path`` keeps only the standard library (no ``''``, no site-packages); bytecode is not
   written; ``PYTHON*``/``PYTEST*`` variables are dropped; the process makes itself undumpable
   (``PR_SET_DUMPABLE`` 0): no process of the same uid can ptrace it or open its
   ``/proc/PID/mem``, ``fd/`` or ``environ``;
2. the per-run secret is read from ``.tirl_eval/secret`` and the file unlinked; the pytest bundle
   is read into memory, unlinked, and imported from memory;
3. pytest collects the hidden tests (``--import-mode=importlib``: nothing is added to
   ``sys.path``; ``--noconftest``; its own ini file; plugin autoload off). A test module that
   calls the code under test at import time is a collection error: no subject may run yet. After
   collection the test sources stay in memory and the files are deleted, so that no subject can
   read the expected values;
4. each test gets a fresh subject (its process group is killed after the test) and shares one
   deadline; a call past it fails the test and marks the verdict ``timed_out``;
5. the verdict, ``<mac> <json>`` (:func:`~tirl.envs.scorer_bundle.verdict_mac`: an HMAC of the JSON
   under the secret), is the
   only thing written to the judge's standard output; everything else (pytest's report, the subject's
   output) goes to standard error. No subject holds that descriptor or knows the secret, and a subject
   that reads the line anyway (it can reach the run's output pipe, see docs/sandbox.md) learns a tag
   that signs nothing else.

Not covered (see docs/sandbox.md, "The swe-lite scorer"): what a test asserts about an object of
the subject (its truth value, ``==`` between two such objects, ``len``, ``str``, iteration) is
what that object's own methods answer, as in any Python; an identity check (``is``) on a module
attribute imported at collection time (it is a lazy reference); attributes whose name starts with
``_``; fixtures that reach into the repository (``monkeypatch``), a hidden helper module imported only
inside a test or named like a module of the repository (:func:`~tirl.envs.scorer_bundle.helper_finder`),
tests that pass callables or their own objects to the code under test; an argument that the code keeps
past the call (stored on a subject object, or returned) is a copy in the judge (what a call left in its
container arguments comes back: :func:`~tirl.envs.scorer_wire.sync`); output not written through
``sys.stdout``/``sys.stderr`` during a call (``capfd``); a warning's own class (its nearest built-in).
"""

from __future__ import annotations

import sys
from typing import Any

try:  # in the sandbox the host runs these modules' sources first, in the same globals, and tirl is absent
    from tirl.envs.scorer_bundle import BundleImporter, helper_finder, imported_names, verdict_mac
    from tirl.envs.scorer_wire import EFFECTS, MAX_LINE, WireError, apply_effects, decode, encode
except ImportError:
    pass

SECRET_FILE = "secret"  # in the evaluation directory, read and unlinked by the judge
BUNDLE_FILE = "pytest.zip"
TESTS_DIR = "tests"


# --- the judge (trusted: never imports a module of the workspace) -------------------------------


class RemoteError(Exception):
    """An exception raised by the code under test; its nearest built-in exception class is mixed in."""

    remote_type = ""


class RemoteFailure(BaseException):
    """The subject died, broke the protocol, ran past the deadline, or raised no ``Exception``: the test fails.

    Not an ``Exception``, and :class:`Tally` fails the test even when the test caught it: a hidden test's
    ``pytest.raises(Exception)`` or ``except Exception`` once took a subject that only called ``os._exit`` (or
    raised ``KeyboardInterrupt``, or answered nonsense on the wire) for the error it expected, and passed.
    """


_REMOTE_CLASSES: dict[type, type] = {}
#: exceptions that Python's own protocols read as a signal, not an error: a ``StopIteration`` raised by a call
#: inside ``map``/``filter``/``zip`` ends the iteration, so ``all(map(is_prime, primes))`` would pass with no
#: answer at all. One of them from the subject becomes a plain :class:`RemoteError`, as PEP 479 does in generators.
_SIGNALS = (StopIteration, StopAsyncIteration)


def remote_exception(info: Any) -> BaseException:
    """The judge's stand-in for an exception of the subject (``info``: bases, type, msg).

    Its class mixes in the first built-in exception class the subject names, never one of :data:`_SIGNALS`.
    """
    import builtins

    if type(info) is not dict or type(info.get("bases")) is not list or type(info.get("msg")) is not str:
        return RemoteFailure("malformed exception reply")
    if "Exception" not in info["bases"]:  # SystemExit, KeyboardInterrupt...: under pytest itself no test passes
        return RemoteFailure(f"the code under test raised {str(info.get('type'))[:200]}, not an Exception")
    for name in info["bases"]:
        base = getattr(builtins, name, None) if type(name) is str else None
        if not (isinstance(base, type) and issubclass(base, Exception)) or base is Exception:
            continue
        if issubclass(base, _SIGNALS):
            break
        try:  # a class that cannot be mixed in, or that wants other arguments: try the next base
            cls = _REMOTE_CLASSES.get(base) or _REMOTE_CLASSES.setdefault(base, type(name, (RemoteError, base), {}))
            exc = cls(info["msg"])
        except Exception:
            continue
        exc.remote_type = str(info.get("type"))
        return exc
    exc = RemoteError(info["msg"])
    exc.remote_type = str(info.get("type"))
    return exc


class Link:
    """The judge's end of the wire: one subject per test, started on the first request, one deadline."""

    def __init__(self, wire: str, workspace: str, deadline: float) -> None:
        self.source = wire + "\nsubject_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])\n"
        self.workspace = workspace
        self.deadline = deadline
        self.allowed = False  # False while pytest collects: no subject may run yet
        self.timed_out = False
        self.broken = ""  # why the current test's link failed (a RemoteFailure); Tally fails that test
        self.generation = 0
        self.proc: Any = None
        self._wfd = self._rfd = -1
        self._buf = bytearray()

    def _start(self) -> None:
        import os
        import subprocess

        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        argv = [sys.executable, "-I", "-c", self.source, str(r1), str(w2), self.workspace]
        try:
            self.proc = subprocess.Popen(
                argv,
                pass_fds=(r1, w2),
                stdin=subprocess.DEVNULL,
                stdout=2,
                stderr=2,
                start_new_session=True,
                cwd=self.workspace,
            )
        except BaseException:
            os.close(w1)
            os.close(r2)
            raise
        finally:
            os.close(r1)
            os.close(w2)
        self._wfd, self._rfd, self._buf = w1, r2, bytearray()
        os.set_blocking(w1, False)
        self.generation += 1

    def stop(self) -> None:
        """Kill the current subject and its process group (nothing to do when there is none)."""
        import os
        import signal

        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        os.close(self._wfd)
        os.close(self._rfd)
        self.proc = None

    def broke(self, why: str) -> RemoteFailure:
        """The failure to raise; the test fails whether or not it catches it (:attr:`broken`)."""
        self.broken = self.broken or why
        return RemoteFailure(why)

    def _fail(self, why: str) -> RemoteFailure:
        self.stop()
        return self.broke(why)

    def _wait(self, fd: int, write: bool) -> None:
        import select
        import time

        left = self.deadline - time.monotonic()
        ready = select.select([], [fd], [], max(left, 0))[1] if write else select.select([fd], [], [], max(left, 0))[0]
        if not ready:
            self.timed_out = True
            raise self._fail("the code under test ran past the evaluation deadline")

    def _exchange(self, message: bytes) -> bytes:
        import os

        while message:
            self._wait(self._wfd, write=True)
            message = message[os.write(self._wfd, message) :]
        end = self._buf.find(b"\n")
        while end < 0:
            if len(self._buf) > MAX_LINE:
                raise self._fail("a reply longer than the wire allows")
            self._wait(self._rfd, write=False)
            chunk = os.read(self._rfd, 1 << 16)
            if not chunk:
                status = self.proc.poll()
                raise self._fail(f"the code under test exited during the call (status {status})")
            end = chunk.find(b"\n")
            end = -1 if end < 0 else len(self._buf) + end
            self._buf += chunk
        line = bytes(self._buf[:end])
        del self._buf[: end + 1]
        return line

    def request(self, op: str, target: Any, **fields: Any) -> Any:
        """Send one request about ``target``; the decoded value, or raise the subject's exception.

        Anything else that goes wrong is a :class:`RemoteFailure`, never the code's error: the judge's own
        ``OSError`` or ``MemoryError`` (a subject that lowered the judge's ``RLIMIT_NOFILE`` with ``prlimit``
        made the next ``os.pipe`` fail, and a ``pytest.raises(Exception)`` passed).
        """
        try:
            return self._request(op, target, fields)
        except (RemoteFailure, RemoteError, Warning):  # a Warning: the code's, made an error by the test's filters
            raise
        except Exception as exc:
            raise self.broke(f"the judge failed during the call ({type(exc).__name__}: {str(exc)[:200]})") from None

    def _request(self, op: str, target: Any, fields: dict[str, Any]) -> Any:
        import json
        import time

        if not self.allowed:
            raise RemoteFailure("the hidden tests used the code under test at import time (not supported)")
        if time.monotonic() >= self.deadline:
            self.timed_out = True
            raise self.broke("the evaluation deadline has passed")
        if self.proc is None:
            self._start()
        payload = {k: encode(v, self._outgoing) for k, v in fields.items()}
        message = json.dumps({"op": op, "t": target, **payload}).encode() + b"\n"
        try:
            line = self._exchange(message)
        except OSError as exc:
            raise self._fail(f"the code under test broke the wire ({exc})") from None
        try:
            reply = json.loads(line)
            if type(reply) is not dict or set(reply) - (EFFECTS if op == "call" else set()) not in ({"x"}, {"v"}):
                raise WireError("not a reply")
            apply_effects(reply, fields, self._incoming)  # what the call left in its arguments, printed, warned
            if "x" in reply:
                error = remote_exception(reply["x"])
                if isinstance(error, RemoteFailure):
                    raise self.broke(str(error))
            else:
                return decode(reply["v"], self._incoming)
        except (ValueError, KeyError, TypeError, RecursionError, WireError) as exc:
            raise self._fail(f"the code under test broke the wire ({type(exc).__name__})") from None
        raise error

    def _outgoing(self, value: Any) -> Any:
        if isinstance(value, Remote):
            return value._wire()
        kind = type(value).__name__
        raise self.broke(f"a {kind} cannot be passed to the code under test (only data and its objects)")

    def _incoming(self, tag: str, payload: Any) -> Any:
        if tag != "h" or type(payload) is not list or len(payload) != 2 or type(payload[0]) is not int:
            raise WireError(f"unknown tag {tag!r}")
        return Remote(self, ["h", payload[0]], self.generation, str(payload[1])[:200])


class Remote:
    """A reference to an object of the subject: a module attribute path (lazy) or an object (handle).

    Operations go to the subject; a reference is never equal to a value, and its ``repr`` is local.
    """

    __slots__ = ("_generation", "_label", "_link", "_target")

    def __init__(self, link: Link, target: Any, generation: int | None, label: str) -> None:
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_generation", generation)
        object.__setattr__(self, "_label", label)

    def _live(self) -> None:
        """A handle is only good in the subject process that made it."""
        if self._generation is not None and (self._generation != self._link.generation or self._link.proc is None):
            raise self._link.broke(f"{self._label} belongs to a subject process that has ended")

    def _wire(self) -> Any:
        self._live()
        return {"p": self._target} if self._generation is None else {"h": self._target[1]}

    def _ask(self, op: str, **fields: Any) -> Any:
        self._live()
        return self._link.request(op, self._target, **fields)

    def _value(self) -> Any:
        """A lazy reference resolved (a value or a handle); a handle itself."""
        return self if self._generation is not None else self._ask("get")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        target = ["a", self._target, name]
        if self._generation is None and not self._link.allowed:
            return Remote(self._link, target, None, f"{self._label}.{name}")
        self._live()
        return self._link.request("get", target)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ask("setattr", n=name, v=value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the object in the subject with data (and the subject's own objects) as arguments."""
        return self._ask("call", a=list(args), k=kwargs)

    def _compare(self, other: Any, op: Any) -> Any:
        mine = self._value()
        if not isinstance(mine, Remote):
            return op(mine, other)
        return NotImplemented

    def __eq__(self, other: object) -> Any:
        mine = self._value()
        if not isinstance(mine, Remote):
            return mine == other
        theirs = other._value() if isinstance(other, Remote) else other
        if not isinstance(theirs, Remote):
            return NotImplemented  # a reference never equals a value: no always-equal objects
        answer = mine._ask("eq", o=theirs)
        if type(answer) is not bool:
            raise self._link.broke("== answered a non-bool")
        return answer

    def __ne__(self, other: object) -> Any:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = object.__hash__

    def __lt__(self, other: Any) -> Any:
        return self._compare(other, lambda a, b: a < b)

    def __le__(self, other: Any) -> Any:
        return self._compare(other, lambda a, b: a <= b)

    def __gt__(self, other: Any) -> Any:
        return self._compare(other, lambda a, b: a > b)

    def __ge__(self, other: Any) -> Any:
        return self._compare(other, lambda a, b: a >= b)

    def _typed(self, op: str, kind: type, **fields: Any) -> Any:
        mine = self._value()
        if not isinstance(mine, Remote):
            return None, mine
        answer = mine._ask(op, **fields)
        if type(answer) is not kind:
            raise self._link.broke(f"{op} of {self._label} answered a {type(answer).__name__}, not a {kind.__name__}")
        return answer, None

    def __bool__(self) -> bool:
        answer, value = self._typed("bool", bool)
        return bool(value) if answer is None else answer

    def __len__(self) -> int:
        answer, value = self._typed("len", int)
        return len(value) if answer is None else answer

    def __str__(self) -> str:
        answer, value = self._typed("str", str)
        return str(value) if answer is None else answer

    def __iter__(self) -> Any:
        answer, value = self._typed("list", list)
        return iter(value if answer is None else answer)

    def __contains__(self, item: Any) -> bool:
        answer, value = self._typed("contains", bool, i=item)
        return item in value if answer is None else answer

    def __getitem__(self, key: Any) -> Any:
        mine = self._value()
        return mine[key] if not isinstance(mine, Remote) else mine._ask("getitem", i=key)

    def __repr__(self) -> str:
        return f"<{self._label} of the code under test>"


def remote_finder(link: Link, names: set[str]) -> Any:
    """A meta-path finder that makes the top-level modules ``names`` (and their submodules) remote."""
    import importlib.machinery
    import types

    class RemoteModule(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(name)
            return getattr(Remote(link, ["m", self.__name__], None, self.__name__), name)

    class Finder:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
            if fullname.partition(".")[0] not in names:
                return None
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)  # type: ignore[arg-type]

        def create_module(self, spec: Any) -> Any:
            return RemoteModule(spec.name)

        def exec_module(self, module: Any) -> None:
            pass

    return Finder()


def _harden() -> None:
    """Step 1 of the module docstring: a clean path and environment, no bytecode, undumpable, no SIGINT.

    SIGINT is ignored: a subject that sent it would raise KeyboardInterrupt in the judge, and pytest would
    stop as interrupted with only the tests run so far reported.
    """
    import ctypes
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    sys.path[:] = _trusted_path()
    sys.dont_write_bytecode = True
    for key in [k for k in os.environ if k.startswith(("PYTHON", "PYTEST"))]:
        del os.environ[key]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _trusted_path() -> list[str]:
    """``sys.path`` reduced to this interpreter's standard library (no cwd, no site-packages)."""
    import os

    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}
    keep = []
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        inside = any(real == r or real.startswith(r + os.sep) for r in roots)
        if entry and inside and "site-packages" not in real and "dist-packages" not in real:
            keep.append(entry)
    return keep


class Tally:
    """The pytest plugin of the judge: outcomes per test, and the switch from collection to the run."""

    def __init__(self, link: Link, tests: str) -> None:
        self.link = link
        self.tests = tests
        self.outcomes: dict[str, str] = {}
        self.collect_errors = 0
        self.collected = 0

    def pytest_collectreport(self, report: Any) -> None:
        """A file that fails to collect counts as an error."""
        if report.failed:
            self.collect_errors += 1

    def pytest_collection_finish(self, session: Any) -> None:
        """Keep the test sources for tracebacks, delete the files, allow subjects from now on."""
        import linecache
        import os
        import shutil

        for root, _, files in os.walk(self.tests):
            for name in files:
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                linecache.cache[path] = (sum(map(len, lines)), None, lines, path)
        shutil.rmtree(self.tests)
        self.collected = len(session.items)
        self.link.allowed = True

    def pytest_runtest_logreport(self, report: Any) -> None:
        """The worst outcome of a test's phases: error (setup/teardown) > failed > skipped/xfailed > passed.

        ``xfailed`` (an ``xfail`` test that failed, as its author marked it) counts nowhere; ``skipped`` counts
        against the reward (:class:`tirl.envs.scorer.Verdict`). A phase in which the link to the subject failed
        (:meth:`Link.broke`) fails even when the test caught the :class:`RemoteFailure`.
        """
        rank = {"passed": 0, "skipped": 1, "xfailed": 1, "failed": 2, "error": 3}
        outcome: str | None
        if self.link.broken:  # the link failed in this phase, whatever the test made of it (RemoteFailure)
            outcome = "failed" if report.when == "call" else "error"
            self.link.broken = ""
        elif report.passed:
            outcome = "passed" if report.when == "call" else None
        elif report.skipped:
            outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        else:
            outcome = "failed" if report.when == "call" else "error"
        old = self.outcomes.get(report.nodeid)
        if outcome is not None and (old is None or rank[outcome] > rank[old]):
            self.outcomes[report.nodeid] = outcome

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        """A new test: no failure of the link yet."""
        self.link.broken = ""

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        """The test is over: its subject and the subject's process group go."""
        self.link.stop()

    def verdict(self) -> dict[str, Any]:
        """The counts, the deadline flag and up to 10 failing test names.

        A collected test without an outcome (the run stopped early) counts as an error: the verdict
        never shrinks to the tests that happened to run.
        """
        counts = {k: list(self.outcomes.values()).count(k) for k in ("passed", "failed", "skipped")}
        bad = [n.rpartition("::")[2][:80] for n, o in self.outcomes.items() if o in ("failed", "error")]
        unreported = max(self.collected - len(self.outcomes), 0)
        return {
            **counts,
            "errors": list(self.outcomes.values()).count("error") + self.collect_errors + unreported,
            "timed_out": self.link.timed_out,
            "failures": bad[:10],
        }


def judge_main(wire: str, eval_dir: str, budget_s: float, helpers: list[str] | None = None) -> None:
    """Run the hidden tests under ``eval_dir`` against the workspace (the cwd); print the verdict.

    ``wire``: the source of :mod:`tirl.envs.scorer_wire`, from which each subject starts; ``helpers``: the
    top-level modules of the hidden tests' own directory that they import (imported here, never remote).
    """
    import os
    import time

    deadline = time.monotonic() + budget_s
    verdict_fd = os.dup(1)  # not inherited by any subject
    os.dup2(2, 1)  # pytest's report and everything else: standard error
    _harden()
    with open(os.path.join(eval_dir, SECRET_FILE), encoding="ascii") as f:
        secret = f.read().strip()
    os.unlink(os.path.join(eval_dir, SECRET_FILE))
    bundle = BundleImporter(os.path.join(eval_dir, BUNDLE_FILE))
    os.unlink(os.path.join(eval_dir, BUNDLE_FILE))
    sys.meta_path.append(bundle)
    import pytest

    tests = os.path.join(os.path.abspath(eval_dir), TESTS_DIR)
    sources = []
    for root, _, files in os.walk(tests):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    sources.append(f.read())
    link = Link(wire, os.getcwd(), deadline)
    import importlib.util

    local = set(helpers or ())
    remote = {n for n in imported_names(sources) if n not in local and importlib.util.find_spec(n) is None}
    sys.meta_path.append(helper_finder(tests, local))
    sys.meta_path.append(remote_finder(link, remote))
    tally = Tally(link, tests)
    args = [tests, "-q", "-s", "-p", "no:cacheprovider", "-p", "no:faulthandler", "--noconftest"]
    args += ["--import-mode=importlib"]
    args += ["--rootdir", tests, "-c", os.path.join(tests, "pytest.ini"), "--tb=short"]
    try:
        status = pytest.main(args, plugins=[tally])
    finally:
        link.stop()
    import json

    payload = json.dumps(dict(tally.verdict(), status=int(status)))
    os.write(verdict_fd, f"\n{verdict_mac(secret, payload)} {payload}\n".encode())
