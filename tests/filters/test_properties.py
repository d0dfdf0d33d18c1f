"""Property tests: detection never crashes, and non-assistant text never changes a verdict."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.parsing import judge_messages, judge_text
from tirl.types import Message, Role

pieces = st.sampled_from(
    [
        "```",
        "```python\n",
        "```bash\n",
        "~~~",
        "\n",
        "{",
        "}",
        "\\boxed",
        "\\boxed{",
        "<answer>",
        "</answer>",
        "\\{",
        "\\}",
        "print(1)",
        " ",
        "`",
        "é",
        "你好",
        "\x00",
        "\ud7ff",
        "🙂",
    ]
)
texts = st.one_of(st.text(), st.lists(st.one_of(pieces, st.text(max_size=5)), max_size=30).map("".join))


@settings(max_examples=400, deadline=None)
@given(texts)
def test_detection_never_crashes(text: str) -> None:
    verdict = judge_text(text)
    assert verdict.kind.value in ("answer", "code", "tool_call", "void")
    if verdict.answer is not None:
        assert verdict.answer.strip()


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=4), st.lists(texts, min_size=1, max_size=6))
def test_non_assistant_text_never_changes_verdict(assistant: list[str], others: list[str]) -> None:
    base = [Message(role=Role.ASSISTANT, content=t) for t in assistant]
    expected = judge_messages(base)
    mixed: list[Message] = [Message(role=Role.SYSTEM, content=others[0])]
    roles = [Role.USER, Role.TOOL]
    for i, m in enumerate(base):
        mixed.append(m)
        mixed.append(Message(role=roles[i % 2], content=others[i % len(others)]))
    got = judge_messages(mixed)
    assert (got.void, got.void_turns) == (expected.void, expected.void_turns)
    assert [t.kind for t in got.turns] == [t.kind for t in expected.turns]


@settings(max_examples=600, deadline=None)
@given(texts)
def test_single_block_fast_path_agrees_with_general_scanner(text: str) -> None:
    from tirl.parsing import _scan_fences_general, _single_block

    fast = _single_block(text)
    if fast is not None:
        assert fast == _scan_fences_general(text)


def test_fast_path_is_taken_and_agrees_on_typical_turns() -> None:
    from tirl.parsing import _scan_fences_general, _single_block

    for text in [
        "think\n```python\nprint(1)\n```\nmore",
        "```bash\nls\n```",
        "a\n```\n\n```",
        "x\n```py  extra info\nbody\n```   \ntail",
    ]:
        fast = _single_block(text)
        assert fast is not None
        assert fast == _scan_fences_general(text)
    for text in ["  ```python\nx\n```", "```python\nx\n````", "```python\nx\n", "```python ``` \nx\n```"]:
        assert _single_block(text) is None
