"""Shared fixtures."""

from __future__ import annotations

from tirl.types import Message, Role


def asst(text: str | None, **kw: object) -> Message:
    return Message(role=Role.ASSISTANT, content=text, **kw)  # type: ignore[arg-type]
