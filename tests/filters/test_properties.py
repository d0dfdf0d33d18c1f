"""Property tests: detection never crashes, and non-assistant text never changes a verdict."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tirl.parsing import ACTION_RULES, CodeBlock, answer_of, judge_content, judge_messages, judge_text, turn_acts
from tirl.types import Message, Role, ToolCall

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
    from tirl.fences import _scan_fences_general, _single_block

    fast = _single_block(text)
    if fast is not None:
        assert fast == _scan_fences_general(text)


def test_fast_path_is_taken_and_agrees_on_typical_turns() -> None:
    from tirl.fences import _scan_fences_general, _single_block

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


def test_fast_path_takes_inline_backticks_after_the_block_but_not_a_second_fence() -> None:
    from tirl.fences import _scan_fences_general, _single_block

    for text in ["a\n```text\nout\n```\nLet me check `x`, ``y``.", "```py\nx\n```\n`", "```sh\nls\n```\nsee `x` here"]:
        fast = _single_block(text)
        assert fast is not None and fast == _scan_fences_general(text)
    assert _single_block("```sh\nls\n```\nsee `x` here") == ([CodeBlock("sh", "ls\n", 0, 12)], [(0, 12)])
    for text in ["```py\nx\n```\n`y`\n```bash\nls\n```", "```py\nx\n```\n```", "```py\nx\n```\n ```\nopen"]:
        assert _single_block(text) is None  # another fence opens after the block: the general scanner pairs it
        assert len(_scan_fences_general(text)[1]) == 2


@settings(max_examples=600, deadline=None)
@given(texts)
@example("```python\nprint(1)\n")  # unclosed: a region to the end, no block
@example("so\n```python\nprint(1)\nmore ` text")  # a later inline backtick: the general scanner decides
@example("```python\nx\n```\n```bash\nopen")
def test_single_fence_fast_path_agrees_with_general_scanner(text: str) -> None:
    from tirl.fences import _scan_fences_general, _single_fence

    fast = _single_fence(text)
    if fast is not None:
        assert fast == _scan_fences_general(text)


def test_single_fence_takes_an_unclosed_fence() -> None:
    from tirl.fences import _scan_fences_general, _single_fence

    text = "so\n```python\nprint(1)\n"
    assert _single_fence(text) == ([], [(3, len(text))]) == _scan_fences_general(text)
    assert _single_fence("so\n```python\nprint(1)\n`") is None


rule_pieces = st.sampled_from(["<sql>", "</sql>", "<search>", "</search>", "#### 4", "<solution>"])
rule_texts = st.lists(st.one_of(pieces, rule_pieces, st.text(max_size=5)), max_size=30).map("".join)
tool_calls = st.sampled_from(
    [(), (ToolCall(name="python", arguments='{"code": "1"}'),), (ToolCall(name="python", arguments="{bad"),)]
)


@settings(max_examples=600, deadline=None)
@given(st.one_of(texts, rule_texts), tool_calls, st.sampled_from(sorted(ACTION_RULES)))
@example("```python\n\\boxed{1}\n```", (), "tir")  # an answer inside the code block is no answer
@example("```python\nx\n```\n<answer>2</answer>", (), "tir")  # code and an answer: the answer is searched late
@example("let me <sql>SELECT 1</sql>", (), "sql")  # a tagged action
@example("nothing here", (ToolCall(name="f", arguments="{}"),), "tir")  # a well-formed call
def test_turn_acts_agrees_with_judge_content(text: str, calls: tuple[ToolCall, ...], rule: str) -> None:
    """The filter's lean judge (tirl filter) and the full verdict: same void-ness, same answer when asked."""
    rules = ACTION_RULES[rule]
    verdict = judge_content(text, calls, rules)
    acts, answer = turn_acts(text, calls, rules)
    assert acts == (not verdict.is_void)
    if isinstance(answer, tuple):
        assert verdict.code  # left unsearched only where executable code decides the turn
        answer = answer_of(answer, rules)
    assert answer == verdict.answer


def test_turn_acts_leaves_the_answer_of_a_code_turn_unsearched() -> None:
    text = "```python\nprint(1)\n```\nso \\boxed{2}"
    acts, answer = turn_acts(text, (), ACTION_RULES["tir"])
    assert acts and isinstance(answer, tuple)
    assert answer_of(answer, ACTION_RULES["tir"]) == "2" == judge_content(text).answer
