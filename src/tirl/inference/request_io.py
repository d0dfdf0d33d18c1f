"""Reading a ``tirl serve`` request's body, and noticing when its client hangs up.

:func:`read_json` reads the body with a size cap (413: on its ``Content-Length`` before a byte is read, else as
soon as the bytes read pass the cap) and parses it strictly (400; :func:`tirl.jsonl.parse_json`: nesting, long
integers, lone surrogates, ``NaN``, a key repeated in one object, named in the message and ``param``).

:func:`unless_client_leaves` awaits a request's generation and cancels it when the client hangs up first.
Starlette does this for a streamed response (its disconnect listener); the handler of a plain response ran on:
a request for 4,096 samples (256 prompts, ``n`` 16) whose client closed its socket after one second kept the
sampler busy for 106 s, and every other client's request waited behind it (red team, session 45). Cancelling
the generation cancels its ``generate`` calls: the batcher skips the queued ones and the sampler ends the rows
of a running batch at their next token (:mod:`tirl.inference.hf`). Not covered: a client that stays connected
and never reads its response (the answer is written once and buffered by asyncio).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.requests import Request

from tirl.inference.openai_protocol import APIError, bad
from tirl.jsonl import DuplicateKey, JSONProblem, parse_json

T = TypeVar("T")


class ClientGone(Exception):
    """The client hung up before its answer was ready; there is no one to answer."""


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body: 413 over ``limit`` bytes (``tirl serve --max-body-mb``), 400 when it does not parse."""
    too_big = APIError(413, f"the request body is larger than {limit} bytes (tirl serve --max-body-mb)")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and len(declared) < 20 and int(declared) > limit:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    try:
        return parse_json(b"".join(chunks), allow_nan=False, unique_keys=True)
    except DuplicateKey as exc:  # json.loads would keep the last value: {"model": "a", "model": "b"} served "b"
        raise bad(f"the request body is ambiguous: {exc}", exc.key if len(exc.key) <= 40 else None) from None
    except JSONProblem as exc:
        raise bad(f"could not parse the request body as JSON: {exc}") from None


async def _hang_up(request: Request) -> None:
    """Return when the client disconnects (the body has been read: nothing else can arrive)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """``await work``, cancelled (and :class:`ClientGone` raised) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_hang_up(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and watch.exception() is not None:  # the watch itself failed: just wait for the work
            await asyncio.wait({task})
    except BaseException:  # this handler is cancelled (the server stops): so is the work
        task.cancel()
        watch.cancel()
        raise
    watch.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    raise ClientGone
