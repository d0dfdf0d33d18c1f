"""The void-turn rule of DESIGN.md, case by case."""

from __future__ import annotations

import pytest

from tirl.parsing import (
    ActionKind,
    ParseRules,
    extract_code_blocks,
    extract_final_answer,
    judge_message,
    judge_messages,
    judge_text,
)
from tirl.types import Message, Role, ToolCall

FENCE = "```"


@pytest.mark.parametrize("lang", ["python", "py", "python3", "bash", "sh", "shell", "Python", "BASH", "PY"])
def test_executable_languages_case_insensitive(lang: str) -> None:
    v = judge_text(f"Let me compute.\n{FENCE}{lang}\nprint(1)\n{FENCE}\n")
    assert v.kind is ActionKind.CODE
    assert v.code[0].body == "print(1)\n"


@pytest.mark.parametrize(
    "text",
    [
        "use `print(1)` inline",
        f"{FENCE}python\nprint(1)\n",  # unclosed
        f"{FENCE}python\n   \n\n{FENCE}",  # blank body
        f"{FENCE}text\nprint(1)\n{FENCE}",
        f"{FENCE}output\n42\n{FENCE}",
        f"{FENCE}json\n{{}}\n{FENCE}",
        f"{FENCE}\nprint(1)\n{FENCE}",  # no language
        "let me double-check",
        "我再确认一下",
        "\\boxed",
        "\\boxed{}",
        "\\boxed{   }",
        "\\boxed{...}",
        "<answer></answer>",
        "<answer>  </answer>",
        "<answer>your answer here</answer>",
        "\\boxed{12",  # unbalanced
        "",
    ],
)
def test_void_turns(text: str) -> None:
    assert judge_text(text).is_void


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so \\boxed{42}", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed {7}", "7"),
        ("<answer> 3.5 </answer>", "3.5"),
        ("<ANSWER>x</ANSWER> then \\boxed{9}", "9"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{} and then \\boxed{5}", "5"),
    ],
)
def test_final_answers(text: str, answer: str) -> None:
    assert extract_final_answer(text) == answer
    assert judge_text(text).kind is ActionKind.ANSWER


def test_answer_inside_fence_does_not_count() -> None:
    text = f"{FENCE}text\n\\boxed{{42}}\n{FENCE}\nstill thinking"
    assert extract_final_answer(text) is None
    assert judge_text(text).is_void


def test_answer_after_unclosed_fence_is_inside_code() -> None:
    assert extract_final_answer(f"{FENCE}python\nx = 1\n\\boxed{{1}}") is None


def test_answer_wins_over_code() -> None:
    v = judge_text(f"{FENCE}python\nprint(2)\n{FENCE}\nThe answer is \\boxed{{2}}")
    assert v.kind is ActionKind.ANSWER
    assert v.code and v.answer == "2"


def test_tilde_fence_and_longer_backtick_runs() -> None:
    assert judge_text("~~~python\nprint(1)\n~~~").kind is ActionKind.CODE
    blocks = extract_code_blocks("````python\nprint('```')\n````")
    assert len(blocks) == 1 and "```" in blocks[0].body


def test_indented_fence_up_to_three_spaces() -> None:
    assert judge_text("   ```python\n   print(1)\n   ```").kind is ActionKind.CODE
    assert judge_text("    ```python\n    print(1)\n    ```").is_void


def test_custom_exec_langs() -> None:
    rules = ParseRules(exec_langs=frozenset({"lean"}))
    assert judge_text("```lean\n#eval 1\n```", rules).kind is ActionKind.CODE
    assert judge_text("```python\nprint(1)\n```", rules).is_void


def test_answer_sources_can_be_disabled() -> None:
    assert judge_text("\\boxed{1}", ParseRules(boxed=False)).is_void
    assert judge_text("<answer>1</answer>", ParseRules(answer_tags=False)).is_void


def test_tool_calls() -> None:
    good = ToolCall(name="python", arguments='{"code": "print(1)"}')
    bad_json = ToolCall(name="python", arguments="{code: print(1)")
    no_name = ToolCall(name=None, arguments="{}")
    msg = Message(role=Role.ASSISTANT, content=None, tool_calls=(good,))
    assert judge_message(msg).kind is ActionKind.TOOL_CALL
    for calls in [(bad_json,), (no_name,), (good, bad_json)]:
        assert judge_message(Message(role=Role.ASSISTANT, content="", tool_calls=calls)).is_void
    # a malformed call does not void a message that acts through its content
    mixed = Message(role=Role.ASSISTANT, content="```python\nprint(1)\n```", tool_calls=(bad_json,))
    assert judge_message(mixed).kind is ActionKind.CODE


def test_only_assistant_messages_are_judged() -> None:
    with pytest.raises(ValueError, match="only assistant"):
        judge_message(Message(role=Role.TOOL, content="x"))
    msgs = [
        Message(role=Role.SYSTEM, content="garbage"),
        Message(role=Role.USER, content="garbage"),
        Message(role=Role.ASSISTANT, content="```python\nprint(1)\n```"),
        Message(role=Role.TOOL, content="```python\nprint(1)\n```"),
        Message(role=Role.ASSISTANT, content="hmm"),
        Message(role=Role.ASSISTANT, content="\\boxed{1}"),
    ]
    v = judge_messages(msgs)
    assert v.void and v.void_turns == (1,)
    assert v.final_answer == "1"
