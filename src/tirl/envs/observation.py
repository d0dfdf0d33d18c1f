r"""The fixed format of tool observations shown to the model.

Every execution result becomes one ``tool``-role message whose content is::

    ```output
    <text>
    ```

``<text>`` is, in this order: the program's stdout (trailing newlines
removed); its stderr (with ``compact_errors``, a Python traceback is reduced
to its last line, e.g. ``NameError: name 'prnt' is not defined``); then the
markers ``[timed out]``, ``[memory limit exceeded]``, ``[exit status N]``
(only when ``show_status`` and the status is non-zero and not explained by a
marker) and ``[sandbox error: …]``. When all of that is empty the text is
``[no output]``. Text longer than ``max_chars`` keeps its head and tail
around ``[... N characters cut ...]``. The sandbox has already cut very long
output the same way; this second cut enforces the environment's own budget.

>>> from tirl.sandbox.base import ExecResult
>>> format_observation(ExecResult(stdout="10063\n", stderr="", exit_code=0))
'```output\n10063\n```'
>>> format_observation(ExecResult(stdout="", stderr="", exit_code=0))
'```output\n[no output]\n```'
"""

from __future__ import annotations

from tirl.sandbox.base import ExecResult
from tirl.types import Message, Role

NO_OUTPUT = "[no output]"
CUT_MARKER = "\n[... {n} characters cut ...]\n"


def compact_traceback(stderr: str) -> str:
    """The last non-blank line of a Python traceback; other stderr is returned unchanged."""
    text = stderr.rstrip()
    if "Traceback (most recent call last):" not in text:
        return text
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return text


def clip(text: str, max_chars: int) -> str:
    """Head + marker + tail when ``text`` is longer than ``max_chars`` (the result fits in it)."""
    if len(text) <= max_chars:
        return text
    marker = CUT_MARKER.format(n=len(text) - max_chars)
    keep = max(max_chars - len(marker), 2)
    head = keep // 2
    tail = keep - head
    cut = len(text) - head - tail
    return text[:head] + CUT_MARKER.format(n=cut) + text[len(text) - tail :]


def observation_text(result: ExecResult, *, compact_errors: bool = True, show_status: bool = False) -> str:
    """The ``<text>`` part of the observation (see the module docstring)."""
    parts: list[str] = []
    if result.stdout.strip():
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr.strip():
        parts.append(compact_traceback(result.stderr) if compact_errors else result.stderr.rstrip("\n"))
    if result.timed_out:
        parts.append("[timed out]")
    if result.memory_exceeded:
        parts.append("[memory limit exceeded]")
    explained = result.timed_out or result.memory_exceeded or result.error is not None
    if show_status and result.exit_code not in (0, None) and not explained:
        parts.append(f"[exit status {result.exit_code}]")
    if result.error:
        parts.append(f"[sandbox error: {result.error}]")
    return "\n".join(parts) if parts else NO_OUTPUT


def format_observation(
    result: ExecResult, *, max_chars: int = 2000, compact_errors: bool = True, show_status: bool = False
) -> str:
    """The full observation content: ``observation_text`` clipped and wrapped in an ``output`` fence."""
    return wrap_output(
        clip(observation_text(result, compact_errors=compact_errors, show_status=show_status), max_chars)
    )


def wrap_output(text: str) -> str:
    """Wrap text in the fixed ``output`` fence (``output`` is not an executable language)."""
    return f"```output\n{text}\n```"


def tool_message(content: str) -> Message:
    """A tool-role message."""
    return Message(role=Role.TOOL, content=content)
