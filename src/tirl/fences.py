"""CommonMark fenced blocks in a message: :func:`scan_fences` finds the closed blocks and the fenced regions.

A fence is a line that starts, after at most three spaces, with three or more backticks or tildes; it is
closed by a line with at least as many of the same character and nothing else (a backtick fence's info string
holds no backtick). An unclosed fence runs to the end of the text: a region, no block. Which blocks count as
executable code, and what an answer outside the regions is, is :mod:`tirl.parsing`'s rule; this module only
pairs fences. Fast paths: one backtick fence of exactly three (:func:`_single_fence`), checked against the
general pairing by property tests (tests/filters/test_properties.py). Not covered: indented code blocks (four
spaces, no fence) and fences inside block quotes or list items are not recognised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(slots=True)
class CodeBlock:
    """One closed fenced block (any language). Treat as read-only (not frozen: judging is a hot path)."""

    lang: str
    body: str
    start: int
    end: int


# Written with a literal prefix ("```+", not "`{3,}") so that the regex engine scans for it at C speed.
_FENCE_RUNS = {"`": re.compile(r"(```+)([^\n]*)"), "~": re.compile(r"(~~~+)([^\n]*)")}


def _fence_lines(text: str, ch: str) -> list[tuple[int, int, int, str, str]]:
    """Fence lines made of ``ch``: (line start, line end, run length, info string, fence char)."""
    out: list[tuple[int, int, int, str, str]] = []
    for m in _FENCE_RUNS[ch].finditer(text):
        pos = m.start()
        if pos and text[pos - 1] != "\n":  # not at line start: allow at most three leading spaces
            ls = text.rfind("\n", 0, pos) + 1
            if pos - ls > 3 or text[ls:pos].strip(" "):
                continue
            pos = ls
        run, info = m.groups()
        out.append((pos, m.end(), len(run), info, ch))
    return out


def _single_fence(text: str) -> tuple[list[CodeBlock], list[tuple[int, int]]] | None:
    """Fast path for the common turn: one backtick fence at line start, a run of exactly 3, closed or not.

    Mostly one-character searches (``str.find`` of one character is a
    ``memchr``; a three-character search is several times slower). Covers an
    opening fence with no backtick before it that is either closed by the
    next backtick's line, with no backtick fence after the block (inline
    backticks may follow), or never closed (no backtick after it at all: a
    fenced region to the end, no block). Returns ``None`` for anything else —
    leading spaces, longer runs, a second fence — so the general scanner
    decides (property tests check the two agree).
    """
    i = text.find("`")
    if i < 0 or (i and text[i - 1] != "\n"):
        return None
    eol = text.find("\n", i)
    if eol < 0:
        return None
    head = text[i:eol]  # the opening fence line
    if head[:3] != "```" or "`" in head[3:]:  # a longer run, or a backtick in the info string
        return None
    j = text.find("`", eol)
    if j < 0:
        return [], [(i, len(text))]  # never closed: it runs to the end of the message
    if text[j - 1] != "\n" or text[j : j + 3] != "```":
        return None
    end = text.find("\n", j)
    if end < 0:
        end = len(text)
    if end != j + 3 and text[j + 3 : end].strip():
        return None
    if text.find("`", end) >= 0 and text.find("```", end) >= 0:  # another fence may open after this block
        return None
    lang = head[3:].strip()
    if not lang.isalnum():  # alphanumeric: one word, no whitespace to split at (the common case)
        lang = lang.split(None, 1)[0] if lang else ""
    return [CodeBlock(lang, text[eol + 1 : j], i, end)], [(i, end)]


def _single_block(text: str) -> tuple[list[CodeBlock], list[tuple[int, int]]] | None:
    """:func:`_single_fence` for a closed block only (``None`` for an unclosed fence)."""
    fast = _single_fence(text)
    return fast if fast is None or fast[0] else None


def scan_fences(text: str) -> tuple[list[CodeBlock], list[tuple[int, int]]]:
    """All closed fenced blocks and all fenced regions (closed, or unclosed and running to the end)."""
    if "~" not in text or "~~~" not in text:
        fast = _single_fence(text)
        if fast is not None:
            return fast
    return _scan_fences_general(text)


def _scan_fences_general(text: str) -> tuple[list[CodeBlock], list[tuple[int, int]]]:
    """The CommonMark fence pairing for any text (``_single_fence`` is its fast path)."""
    lines = _fence_lines(text, "`") if "```" in text else []
    if "~~~" in text:
        tildes = _fence_lines(text, "~")
        lines = sorted(lines + tildes) if lines else tildes
    blocks: list[CodeBlock] = []
    regions: list[tuple[int, int]] = []
    i, n = 0, len(lines)
    while i < n:
        start, open_end, run, info, ch = lines[i]
        if ch == "`" and "`" in info:  # CommonMark: a backtick fence's info string has no backticks
            i += 1
            continue
        j = i + 1
        while j < n:
            c_run, c_info, c_ch = lines[j][2:]
            if c_run >= run and c_ch == ch and not c_info.strip():
                break
            j += 1
        if j == n:
            regions.append((start, len(text)))
            break
        c_start, c_end = lines[j][0], lines[j][1]
        body = text[open_end + 1 : c_start] if c_start > open_end + 1 else ""
        info = info.strip()
        blocks.append(CodeBlock(lang=info.split(None, 1)[0] if info else "", body=body, start=start, end=c_end))
        regions.append((start, c_end))
        i = j + 1
    return blocks, regions


__all__ = ["CodeBlock", "scan_fences"]
