"""The wire between the swe-lite judge and the subject, and the subject itself (standard library only).

The subject is the untrusted side of :mod:`tirl.envs.scorer_runner`: a fresh ``python -I`` per
hidden test that puts the workspace first on ``sys.path`` and answers the judge's requests (one JSON
object per line each way, on two pipes that only the two processes hold). :func:`encode` and
:func:`decode` are the value format both sides use: values of exactly ``None``, ``bool``, ``int``,
``float``, ``str`` as JSON, ``list``/``tuple``/``set``/``frozenset``/``dict``/``bytes``/``complex``
tagged (``{"l": [...]}``...), anything else as a reference (``{"h": [id, type name]}`` from the
subject; ``{"h": id}`` or ``{"p": attribute path}`` from the judge). A subclass of a built-in value
type is sent as its base type's value (its methods, ``__eq__`` included, stay behind). A call's reply
also carries what the call left in its container arguments (:func:`changed_args`), which the judge writes
into the test's own objects (:func:`sync`), as if the call had run in the judge.

The subject imports the workspace's modules from their source only (:func:`source_only`: no cached or
sourceless bytecode, no extension modules from the workspace).

The host sends this module's source to the sandbox as text (with the judge's); nothing in it may
import tirl. What the subject does is untrusted by construction: the judge checks every reply.
"""

from __future__ import annotations

import sys
from typing import Any

MAX_LINE = 16 << 20  # bytes in one message of the wire
MAX_DEPTH = 100  # nesting of one encoded value
#: the parts of a call's reply besides its value or exception (:func:`apply_effects`)
EFFECTS = frozenset({"m", "o", "w"})
MAX_OUTPUT = 1 << 20  # bytes of one call's stdout (and of its stderr) sent back
_SCALARS = (type(None), bool, int, float, str)
_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "f"}
_BUILDERS: dict[str, Any] = {"l": list, "t": tuple, "s": set, "f": frozenset}


# --- the codec (both processes) -----------------------------------------------------------------


class WireError(Exception):
    """A message that the protocol does not allow (the call fails; the subject is not trusted further)."""


_BASES = (int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def encode(value: Any, ref: Any, depth: int = 0) -> Any:
    """``value`` as JSON-ready data: built-in value types by value, anything else as ``ref(value)``.

    A subclass of a built-in value type (an ``IntEnum``, a named tuple, an ``OrderedDict``, a ``float``
    whose ``__eq__`` always answers True) is sent as its base type's value: its methods stay behind.
    """
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    kind = type(value)
    if kind not in _SCALARS and kind not in _BASES:
        base = next((b for b in _BASES if isinstance(value, b)), None)
        if base is not None:
            value = base(value)
            if type(value) is not base:
                raise WireError(f"{kind.__name__} did not convert to {base.__name__}")
            kind = base
    if kind in _SCALARS:
        return value
    if kind in _TAGS:
        return {_TAGS[kind]: [encode(v, ref, depth + 1) for v in value]}
    if kind is dict:
        return {"d": [[encode(k, ref, depth + 1), encode(v, ref, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    return ref(value)


def decode(data: Any, ref: Any, depth: int = 0) -> Any:
    """The value :func:`encode` wrote; a tag of no built-in type goes to ``ref(tag, payload)``."""
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    kind = type(data)
    if kind in _SCALARS:
        return data
    if kind is not dict or len(data) != 1:
        raise WireError(f"not an encoded value: {kind.__name__}")
    ((tag, payload),) = data.items()
    if tag in _BUILDERS and type(payload) is list:
        return _BUILDERS[tag](decode(v, ref, depth + 1) for v in payload)
    if tag == "d" and type(payload) is list:
        if not all(type(p) is list and len(p) == 2 for p in payload):
            raise WireError("malformed dict")
        return {decode(k, ref, depth + 1): decode(v, ref, depth + 1) for k, v in payload}
    if tag == "b" and type(payload) is str:
        return bytes.fromhex(payload)
    if tag == "c" and type(payload) is list and len(payload) == 2 and all(type(x) is float for x in payload):
        return complex(payload[0], payload[1])
    return ref(tag, payload)


#: the argument types whose contents a call can change (a tuple: the containers inside it)
_CONTAINERS = (list, dict, set, tuple)


def changed_args(args: tuple[Any, ...], kwargs: dict[str, Any], ref: Any) -> list[Any]:
    """What a call left in its container arguments, encoded: ``[[position or keyword, value], ...]``."""
    given = [*enumerate(args), *kwargs.items()]
    return [[key, encode(value, ref)] for key, value in given if type(value) in _CONTAINERS]


def sync(local: Any, new: Any, depth: int = 0) -> None:
    """Make the judge's argument ``local`` hold ``new`` (the subject's copy of it after the call), in place.

    The judge's own containers are kept wherever the new value has the same type at the same place, so the
    test's other names for them see the change too, as they would if the call had run in the judge. A
    tuple's items cannot be replaced: only the containers inside it change. ``WireError`` when ``new`` is
    not something the call could have left there (another type, a tuple of another length).
    """
    if depth > MAX_DEPTH or type(new) is not type(local) or type(local) not in _CONTAINERS:
        raise WireError("an argument came back as something no call can make of it")

    def keep(old: Any, value: Any) -> Any:
        if type(old) is type(value) and type(old) in (list, dict, set):
            sync(old, value, depth + 1)
            return old
        return value

    if type(local) is list:
        local[:] = [keep(a, b) for a, b in zip(local, new, strict=False)] + new[len(local) :]
    elif type(local) is dict:
        merged = {k: keep(local[k], v) if k in local else v for k, v in new.items()}
        local.clear()
        local.update(merged)
    elif type(local) is set:
        local.clear()
        local.update(new)
    else:
        if len(new) != len(local):
            raise WireError("a tuple argument came back with another length")
        for a, b in zip(local, new, strict=True):
            if type(a) in _CONTAINERS:
                sync(a, b, depth + 1)


def apply_effects(reply: dict[str, Any], fields: dict[str, Any], ref: Any) -> None:
    """Replay in the judge what a call did besides its answer: its changes to its arguments, and its output.

    ``reply["m"]``: the arguments' new state (:func:`sync`); ``reply["o"]``: what the call wrote to
    ``sys.stdout`` and ``sys.stderr``, written to the judge's own (so ``capsys`` sees it, as it would if
    the call had run in the judge); ``reply["w"]``: the warnings it emitted, warned again in the judge (so
    ``pytest.warns`` and the ``filterwarnings("error")`` of a test see them). ``WireError`` for anything
    malformed; a warning that the judge's filters turn into an error is raised.
    """
    for key, data in reply.get("m", []):
        args = fields["a"] if type(key) is int and 0 <= key < len(fields["a"]) else fields["k"]
        sync(args[key], decode(data, ref))
    for names, message in reply.get("w", []):  # a warning: as its nearest built-in class, through the filters
        import builtins
        import warnings

        kinds = [getattr(builtins, n, None) for n in names if type(n) is str] + [UserWarning]
        kind = next(k for k in kinds if isinstance(k, type) and issubclass(k, Warning))
        warnings.warn_explicit(str(message), kind, "<code under test>", 0)
    printed = reply.get("o", ["", ""])
    if type(printed) is not list or len(printed) != 2 or not all(type(t) is str for t in printed):
        raise WireError("malformed output")
    for stream, text in zip((sys.stdout, sys.stderr), printed, strict=True):
        if text:
            stream.write(text)
            stream.flush()


# --- the subject (untrusted: it imports the workspace) ------------------------------------------


def source_only(workspace: str) -> None:
    """Import modules under ``workspace`` from their ``.py`` source only, in this process, from now on.

    No cached bytecode (``__pycache__/*.pyc``: a forged one whose header matched the buggy source's mtime and
    size ran the fixed code while the source kept the bug, and got reward 1.0), no sourceless ``.pyc`` and no
    extension module is loaded from there: the code under test is what the repository's source says. Paths
    outside the workspace (the standard library) keep the default finder and their caches.
    """
    import importlib.machinery as machinery
    import os

    root = os.path.realpath(workspace)

    class SourceLoader(machinery.SourceFileLoader):
        def get_code(self, fullname: str) -> Any:
            return self.source_to_code(self.get_data(self.path), self.path)

    def hook(path: str) -> Any:
        real = os.path.realpath(path or ".")
        if real != root and not real.startswith(root + os.sep):
            raise ImportError("not the workspace")
        return machinery.FileFinder(path, (SourceLoader, machinery.SOURCE_SUFFIXES))

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()
    sys.dont_write_bytecode = True


def captured_call(fn: Any, args: list[Any], kwargs: dict[str, Any], effects: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)``; its output and warnings go to ``effects``, whether it returns or raises.

    ``effects["o"]``: what it wrote to ``sys.stdout`` and ``sys.stderr``; ``effects["w"]``: the warnings it
    emitted, as class names and message (see :func:`apply_effects`).
    """
    import contextlib
    import io
    import warnings

    # a text stream with a .buffer, as pytest's own capture has (code that writes bytes to sys.stdout.buffer works)
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="", write_through=True) for _ in "oe")
    caught: list[Any] = []
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(record=True) as w,
        ):
            caught = w
            warnings.simplefilter("always")  # the judge's filters decide, as if the call had run there
            return fn(*args, **kwargs)
    finally:
        effects["o"] = [f.buffer.getvalue()[:MAX_OUTPUT].decode("utf-8", "replace") for f in (out, err)]
        effects["w"] = [[[c.__name__ for c in x.category.__mro__], str(x.message)[:4000]] for x in caught[:100]]


def subject_main(rfd: int, wfd: int, workspace: str) -> None:
    """Answer the judge's requests until end of file (one JSON object per line each way)."""
    import builtins
    import importlib
    import json
    import os

    requests, replies = os.fdopen(rfd, "rb"), os.fdopen(wfd, "wb")
    source_only(workspace)
    sys.path.insert(0, workspace)  # the repository, as ``python -m pytest`` run at its root would see it
    handles: dict[int, Any] = {}

    def ref(obj: Any) -> Any:
        handles[id(obj)] = obj
        return {"h": [id(obj), f"{type(obj).__module__}.{type(obj).__qualname__}"[:200]]}

    def resolve(target: Any) -> Any:
        if target[0] == "m":
            return importlib.import_module(target[1])
        if target[0] == "a":
            return getattr(resolve(target[1]), target[2])
        return handles[target[1]]

    def arg(data: Any) -> Any:
        return decode(data, lambda tag, payload: resolve(payload) if tag == "p" else handles[payload])

    given: list[Any] = []  # the arguments of the call being answered: what it left in them goes back, raised or not
    effects: dict[str, Any] = {}  # what it printed and warned (captured_call)

    def call(obj: Any, req: Any) -> dict[str, Any]:
        given[:] = [arg(req["a"]), arg(req["k"])]
        value = captured_call(obj, given[0], given[1], effects)
        return {"v": encode(value, ref), "m": changed_args(given[0], given[1], ref), **effects}

    ops = {
        "get": lambda obj, req: obj,
        "setattr": lambda obj, req: setattr(obj, req["n"], arg(req["v"])),
        "len": lambda obj, req: len(obj),
        "bool": lambda obj, req: bool(obj),
        "str": lambda obj, req: str(obj),
        "list": lambda obj, req: list(obj),
        "getitem": lambda obj, req: obj[arg(req["i"])],
        "contains": lambda obj, req: arg(req["i"]) in obj,
        "eq": lambda obj, req: bool(obj == arg(req["o"])),
    }
    while line := requests.readline(MAX_LINE):
        req = json.loads(line)
        given.clear()
        effects.clear()
        try:
            if req["op"] == "call":
                reply = json.dumps(call(resolve(req["t"]), req))
            else:
                reply = json.dumps({"v": encode(ops[req["op"]](resolve(req["t"]), req), ref)})
        except BaseException as exc:
            names = [c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c]
            try:
                message = str(exc)[:4000]
            except BaseException:
                message = ""
            out: dict[str, Any] = {"x": {"bases": names, "type": type(exc).__qualname__[:200], "msg": message}}
            try:
                out.update({"m": changed_args(given[0], given[1], ref), **effects} if given else {})
            except BaseException:
                pass
            reply = json.dumps(out)
        replies.write(reply.encode() + b"\n")
        replies.flush()
    os._exit(0)
