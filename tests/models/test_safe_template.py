"""``render_chat``: the same text as ``apply_chat_template``, within limits of size and time.

Covered: tirl's template and the fallback template render identically to transformers' renderer (tools,
tool calls, tool results, generation prompt, special tokens); ``{% generation %}``, ``namespace`` and loop
controls work; each limit (a long string or list by ``*`` or ``+``, a big power, the output budget, the time
limit in the main thread and off it) raises :class:`TemplateLimitError` quickly.
Not covered: templates of other model families (none are vendored here).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tirl.models.chat_format import FALLBACK_TEMPLATE
from tirl.models.safe_template import TemplateLimitError, render_chat
from tirl.models.template import _PROBE_TOOL, CHAT_TEMPLATE, probe_messages
from tirl.models.tiny import build_tiny_model


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tiny_model(seed=0)[1]


CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}],
    probe_messages(),
    probe_messages(string_arguments=False),
]


@pytest.mark.parametrize("template", [CHAT_TEMPLATE, FALLBACK_TEMPLATE], ids=["tirl", "fallback"])
@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("tools", [None, [_PROBE_TOOL]])
def test_same_text_as_transformers(tokenizer: Any, template: str, gen: bool, tools: Any) -> None:
    for messages in CONVERSATIONS:
        want = tokenizer.apply_chat_template(
            messages, tools=tools, chat_template=template, tokenize=False, add_generation_prompt=gen
        )
        got = render_chat(
            template, messages, tools=tools, add_generation_prompt=gen, special_tokens=tokenizer.special_tokens_map
        )
        assert got == want


def test_transformers_extras_work() -> None:
    text = (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% set ns.n = ns.n + 1 %}{% generation %}{{ m['content'] }}{% endgeneration %}{% endfor %}"
        "{{ ns.n }}{{ dict(a=1) | tojson }}"
    )
    messages = [{"role": "user", "content": c} for c in "abc"]
    assert render_chat(text, messages) == 'ab2{"a": 1}'
    with pytest.raises(TemplateLimitError, match="underscore"):
        render_chat("{% set ns = namespace(_x=1) %}", messages)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{{ 'x' * 2000000 }}", "2,000,000 items"),
        ("{{ [0] * 2000000 }}", "2,000,000 items"),
        ("{% set s = 'y' * 900000 %}{{ s + s }}", "1,800,000 items"),
        ("{{ 3 ** 10000 }}", "power over 4096 bits"),
        ("{% for i in range(100000) %}{{ 'z' * 100 }}{% endfor %}", "renders more than 4,000,000 characters"),
    ],
)
def test_limits(text: str, needle: str) -> None:
    start = time.monotonic()
    with pytest.raises(TemplateLimitError, match=needle):
        render_chat(text, [{"role": "user", "content": "hi"}])
    assert time.monotonic() - start < 3


SLOW = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@pytest.fixture
def short_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import tirl.models.safe_template as safe

    assert safe.TIME_LIMIT_S == 5.0  # the shipped limit; these tests run under 0.5 s of it
    monkeypatch.setattr(safe, "TIME_LIMIT_S", 0.5)


@pytest.mark.usefixtures("short_limit")
def test_time_limit_in_the_main_thread() -> None:
    start = time.monotonic()
    with pytest.raises(TemplateLimitError, match=r"longer than 0\.5 s"):
        render_chat(SLOW, [])
    assert time.monotonic() - start < 3


@pytest.mark.usefixtures("short_limit")
def test_time_limit_off_the_main_thread() -> None:
    caught: list[BaseException] = []

    def run() -> None:
        try:
            render_chat(SLOW, [])
        except BaseException as exc:
            caught.append(exc)

    start = time.monotonic()
    worker = threading.Thread(target=run)
    worker.start()
    worker.join(20)
    assert not worker.is_alive() and time.monotonic() - start < 3
    assert len(caught) == 1 and isinstance(caught[0], TemplateLimitError)


@pytest.mark.usefixtures("short_limit")
def test_the_alarm_stops_a_loop_that_makes_no_call() -> None:
    """Nested loops over a string make no call, lookup or range step: only SIGALRM (main thread) stops them."""
    text = "{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}"
    start = time.monotonic()
    with pytest.raises(TemplateLimitError, match="longer than"):
        render_chat(text, [])
    assert time.monotonic() - start < 3


@pytest.mark.usefixtures("short_limit")
def test_a_timer_someone_else_armed_is_kept() -> None:
    import signal

    fired: list[int] = []
    old = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    before = signal.getitimer(signal.ITIMER_REAL)
    try:
        signal.setitimer(signal.ITIMER_REAL, 2.0)  # theirs: later than ours (0.7 s), paused and re-armed
        with pytest.raises(TemplateLimitError):
            render_chat(SLOW, [])
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 0.5 < left < 1.6, left
        time.sleep(left + 0.2)
        assert fired == [signal.SIGALRM]  # their handler ran, once, at their time
    finally:
        signal.setitimer(signal.ITIMER_REAL, *before)  # pytest-timeout's own timer, as it was
        signal.signal(signal.SIGALRM, old)
