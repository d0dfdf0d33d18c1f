"""An unexpected failure inside ``tirl serve``: its traceback to the server's log, a JSON 500 to the client.

:class:`InternalErrors` is ASGI middleware around every route: an exception that escapes a handler (a bug,
not the client's fault; the client's own mistakes are :class:`~tirl.inference.openai_protocol.APIError` 4xx)
is answered ``500`` with OpenAI's error body, ``type: "server_error"``, instead of the plain-text ``Internal
Server Error`` of Starlette or uvicorn. :func:`report` logs the exception with its traceback to the
``uvicorn.error`` logger (the server's stderr, at ``--log-level``) under a short reference, and the client's
message carries only that reference: the exception's text (paths, values, internals) is never echoed. Before
session 46 the handlers' catch-all echoed ``describe(exc)`` to the client and logged nothing.

A failure after a streamed response has started cannot change its ``200``: ``tirl serve`` sends an error
event (the same body, the same reference) and ``data: [DONE]`` (:meth:`~tirl.inference.server.ModelServer`'s
stream), and anything that still escapes is logged and ends the response early.

Not covered: a failure inside uvicorn itself or in Starlette's outermost layer (its ``ServerErrorMiddleware``
still answers those in plain text); WebSocket scopes (``tirl serve`` has none).
"""

from __future__ import annotations

import logging
import uuid

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tirl.inference.openai_protocol import APIError

log = logging.getLogger("uvicorn.error")  # the server's log: uvicorn configures its handler and level


def report(exc: BaseException, where: str) -> APIError:
    """Log ``exc`` with its traceback under a new reference; the 500 the client gets instead of its text."""
    ref = uuid.uuid4().hex[:12]
    log.error("internal error %s in %s", ref, where, exc_info=(type(exc), exc, exc.__traceback__))
    return APIError(500, f"internal server error (reference {ref}); the server's log has the details")


class InternalErrors:
    """ASGI middleware: an exception from the app becomes :func:`report`'s JSON 500 (see the module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; answer an escaped exception with a JSON 500 unless a response has started."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            error = report(exc, f"{scope.get('method', '?')} {scope.get('path', '?')}")
            if not started:  # else the status is sent: the response ends early, the log has why
                await JSONResponse(error.body(), status_code=error.status)(scope, receive, send)
