"""Chat templates rendered as hostile code: Jinja's sandbox plus limits on size and time.

A chat template comes with a model directory, from whoever made it. transformers renders it in Jinja's
``ImmutableSandboxedEnvironment``, which stops attribute tricks but not arithmetic: a template computing
``'x' * 10**9`` made ``tirl model check`` hold 5.2 GB for 69 s and succeed. :func:`render_chat` renders with
the same sandbox and the same globals transformers gives a template (``raise_exception``, ``strftime_now``,
``namespace``, ``dict``, the ``tojson`` filter, loop controls, ``{% generation %}`` blocks) and these limits:

* **Values.** ``*``, ``+`` and ``**`` are checked before they run: a string or list longer than
  :data:`MAX_VALUE_CHARS`, or an integer power over 4096 bits, is refused. ``range`` is the sandbox's
  (at most 100,000 items).
* **Output.** The rendering is streamed and stopped past :data:`MAX_OUTPUT_CHARS` or 64 x the characters of
  its input (messages and tools), whichever is larger.
* **Time.** A deadline (:data:`TIME_LIMIT_S`) is checked at every call, attribute or item lookup, operator,
  ``range`` item and output chunk; in the main thread a ``SIGALRM`` timer also interrupts code that does
  none of these (e.g. nested loops over a long string); another ``ITIMER_REAL`` timer is paused and
  re-armed, never lost.

Every breach raises :class:`TemplateLimitError` (a :class:`~tirl.errors.InputError` naming the template and
the limit). Rendering is otherwise what ``tokenizer.apply_chat_template(..., tokenize=False)`` gives (the
tokenizer's special tokens are passed as ``bos_token``, ``eos_token``…); tests compare the two.

Not covered: off the main thread, a loop that makes no call, lookup or output (e.g. ``{% for a in s %}{% for
b in s %}{% endfor %}{% endfor %}`` over a long string) runs until its own end (at most 100,000² steps over
``range``; strings are capped at :data:`MAX_VALUE_CHARS`); memory held by the sandbox's own objects.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

from tirl.errors import InputError

MAX_VALUE_CHARS = 1_000_000  # a string or list a template builds with * or +
MAX_OUTPUT_CHARS = 4_000_000  # the rendering, at least (64 x its input, when larger)
MAX_POWER_BITS = 4096
TIME_LIMIT_S = 5.0
_deadline = threading.local()


class TemplateLimitError(InputError):
    """A chat template broke a limit of :func:`render_chat` (or raised): one error line, the template named."""

    def __init__(self, problem: str, where: str = "chat template") -> None:
        super().__init__(
            where,
            None,
            problem,
            "fix chat_template.jinja (or the one in tokenizer_config.json), or use the one `tirl model init` writes",
        )


class _Timeout(BaseException):
    """Raised by the SIGALRM handler; :func:`render_chat` turns it into :class:`TemplateLimitError`."""


def _tick() -> None:
    until = getattr(_deadline, "at", None)
    if until is not None and time.monotonic() > until:
        raise TemplateLimitError(f"rendering took longer than {TIME_LIMIT_S:g} s")


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, str | list | tuple) else None


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}…{% endgeneration %}`` (transformers' assistant-mask tag): the body, unchanged."""

    tags = {"generation"}  # noqa: RUF012  (jinja2.ext.Extension declares it as a plain class attribute)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


class _Namespace(jinja2.utils.Namespace):
    """Jinja's ``namespace`` without underscore names (as transformers does)."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with an underscore")


class _LimitedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with the value and time limits of the module doc."""

    intercepted_binops = frozenset({"*", "+", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _tick()
        ints = isinstance(left, int) and isinstance(right, int)
        if (
            operator == "**"
            and ints
            and right > 0
            and abs(left) > 1
            and abs(left).bit_length() * right > MAX_POWER_BITS
        ):
            raise TemplateLimitError(f"the chat template computes a power over {MAX_POWER_BITS} bits")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                size = _size(seq)
                if size is not None and isinstance(n, int) and size * n > MAX_VALUE_CHARS:
                    raise TemplateLimitError(f"the chat template builds a value of {size * n:,} items")
        if operator == "+":
            a, b = _size(left), _size(right)
            if a is not None and b is not None and a + b > MAX_VALUE_CHARS:
                raise TemplateLimitError(f"the chat template builds a value of {a + b:,} items")
        return super().call_binop(context, operator, left, right)

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _tick()
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        _tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _tick()
        return super().getitem(obj, argument)


def _range(*args: int) -> Iterator[int]:
    for i in safe_range(*args):
        if not i & 1023:
            _tick()
        yield i


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _Dict:
    """``dict(...)`` and ``dict.fromkeys`` for templates, nothing else of the type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args)


@lru_cache(maxsize=16)
def _compile(source: str) -> jinja2.Template:
    env = _LimitedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(
        raise_exception=_raise,
        strftime_now=lambda fmt: datetime.now().strftime(fmt),
        namespace=_Namespace,
        dict=_Dict(),
        range=_range,
    )
    return env.from_string(source)


@contextmanager
def _time_limit() -> Iterator[None]:
    """The deadline for :func:`_tick`, and in the main thread a SIGALRM that raises at it.

    A timer someone else armed (pytest-timeout, a caller's own ``setitimer``) is kept: when it would fire
    first, ours is not armed; otherwise it is paused while we render and re-armed after with the time it
    had left, under its own handler.
    """
    start = time.monotonic()
    _deadline.at = start + TIME_LIMIT_S
    ours = TIME_LIMIT_S + 0.2
    theirs = signal.getitimer(signal.ITIMER_REAL) if threading.current_thread() is threading.main_thread() else None
    arm = theirs is not None and not 0 < theirs[0] <= ours
    old: Any = None
    live = [arm]  # the handler raises only while this holds: a late alarm during the clean-up is ignored

    def _alarm(signum: int, frame: Any) -> None:
        if live[0]:
            raise _Timeout  # a BaseException: no ``except Exception`` inside Jinja or a filter can swallow it

    if arm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, ours, 0.2)  # and again every 0.2 s until cleared
    try:
        yield
    finally:
        while True:  # an alarm that lands before ``live`` is cleared interrupts the clean-up: run it again
            try:
                live[0] = False
                _deadline.at = None
                if arm and theirs is not None:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, old if old is not None else signal.SIG_DFL)
                    if theirs[0] > 0:  # re-arm the timer we paused with what it had left (at least 1 ms)
                        left = max(theirs[0] - (time.monotonic() - start), 0.001)
                        signal.setitimer(signal.ITIMER_REAL, left, theirs[1])
                break
            except _Timeout:
                continue


def pick_template(template: Any, tools: Any = None) -> str:
    """The template text: ``template`` itself, or from a named set (transformers' ``tool_use``/``default``)."""
    if isinstance(template, dict):
        name = "tool_use" if tools and "tool_use" in template else "default"
        template = template.get(name)
    if not isinstance(template, str) or not template:
        raise TemplateLimitError("there is no chat template to render (none given, none in the tokenizer)")
    return template


def render_chat(
    source: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    special_tokens: dict[str, Any] | None = None,
) -> str:
    """Render ``messages`` with the template ``source`` under the limits; raises :class:`TemplateLimitError`."""
    budget = max(MAX_OUTPUT_CHARS, 64 * len(json.dumps([messages, tools], default=str)))
    try:
        template = _compile(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise TemplateLimitError(f"the chat template is not valid Jinja (line {exc.lineno}: {exc.message})") from None
    except (RecursionError, MemoryError, jinja2.exceptions.TemplateError) as exc:  # nesting beyond the parser
        raise TemplateLimitError(f"the chat template cannot be compiled ({type(exc).__name__})") from None
    out: list[str] = []
    size = 0
    try:
        with _time_limit():
            stream = template.generate(
                **(special_tokens or {}), messages=messages, tools=tools, documents=None,
                add_generation_prompt=add_generation_prompt,
            )  # fmt: skip
            for chunk in stream:
                size += len(chunk)
                if size > budget:
                    raise TemplateLimitError(f"the chat template renders more than {budget:,} characters")
                _tick()
                out.append(chunk)
    except _Timeout:
        raise TemplateLimitError(f"rendering took longer than {TIME_LIMIT_S:g} s") from None
    except TemplateLimitError:
        raise
    except (jinja2.exceptions.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError,
            ArithmeticError, RecursionError, MemoryError) as exc:  # fmt: skip
        raise TemplateLimitError(f"the chat template raised {type(exc).__name__}: {str(exc)[:200]}") from None
    return "".join(out)
