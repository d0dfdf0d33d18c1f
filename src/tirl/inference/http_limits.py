"""Request limits of ``tirl serve``: a head over a cap is 431 before it is buffered; a slow request is 408.

uvicorn's default HTTP parser (httptools) keeps every header a client sends: four 100 MB headers were
answered 200 and grew the server by 434 MB. :func:`capped_protocol` returns uvicorn's h11 protocol with a
byte count in front of the parser: while a request's head (request line and headers, up to the blank line)
is arriving, at most ``max_total`` bytes of it are held, and no line may exceed ``max_line`` bytes. A head
over either cap is answered at once with ``431 Request Header Fields Too Large``, an OpenAI-shaped error
body (``{"error": {message, type, param, code}}``) and ``Connection: close``, and the connection is closed:
nothing more of it is read.

Covered: the request line, every header, many small headers or one huge one, a head split over any number
of TCP reads. h11's own ``max_incomplete_event_size`` (set a little above ``max_total``) stays as a backstop
for a head that arrives pipelined behind another request's body in the same read; it answers 400.
Slow clients (a slow-loris): uvicorn's keep-alive timeout applies only between requests, so a connection
that opened and sent nothing, or dribbled its head a byte at a time, was held for ever (each one a file
descriptor: the server stops accepting at the process's limit). Here a request must arrive whole — its head
and its body — within ``request_timeout_s`` of the connection opening (or, on a kept-alive connection, of its
first byte). Past that it is answered ``408 Request Timeout`` (OpenAI-shaped body, ``Connection: close``) and
the connection is closed; the app sees a client disconnect. The clock stops when h11 has the whole request,
so generation time never counts. Not covered: a client that reads its response slowly (the response is
written as fast as the socket takes it; asyncio buffers the rest), and the HTTP/1.1 chunk-extension lines of
a chunked body (h11 bounds them).

A request h11 cannot parse (a negative, huge or doubled ``Content-Length``, a ``Transfer-Encoding`` other
than chunked, a bad chunk size, bytes that are not HTTP) was answered by uvicorn with a plain-text 400
(``Invalid HTTP request received.``); here it is a 400 with the OpenAI-shaped body and ``Connection: close``
(unless a response had already begun: then the connection is only closed). The server has no WebSocket
endpoint, so an ``Upgrade: websocket`` request is served as the plain HTTP request it also is
(``ws="none"``), not answered with an empty 403.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from tirl.inference.openai_protocol import APIError

MAX_HEADER_BYTES = 32 * 1024  # the whole head: request line + headers (nginx's default is 4 x 8 KB buffers)
MAX_HEADER_LINE_BYTES = 8 * 1024  # one header line, or the request line
REQUEST_TIMEOUT_S = 30.0  # a whole request (head and body) must arrive within this (nginx: 60 s each)
_END = b"\r\n\r\n"


def error_response(status: str, message: str) -> bytes:
    """The raw HTTP/1.1 response: ``status`` (``"431 ..."``), an OpenAI-shaped JSON body, ``Connection: close``."""
    code = int(status.split(" ", 1)[0])
    body = json.dumps(APIError(code, message, type_="invalid_request_error").body()).encode()
    head = (
        f"HTTP/1.1 {status}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def error_431(message: str) -> bytes:
    """The 431 answer to a head over a cap."""
    return error_response("431 Request Header Fields Too Large", message)


class HeadMeter:
    r"""Holds one request head as it arrives, never more than ``max_total`` + 4 bytes of it.

    :meth:`feed` names a problem, or returns ``None``.

    >>> m = HeadMeter(max_total=64, max_line=16)
    >>> m.feed(b"GET / HTTP/1.1\r\nHost: x\r\n"), m.feed(b"\r\nbody"), m.done
    (None, None, True)
    >>> HeadMeter(max_total=64, max_line=16).feed(b"GET / HTTP/1.1\r\nX: " + b"a" * 20)
    'a header line is longer than 16 bytes'
    """

    def __init__(self, max_total: int, max_line: int) -> None:
        self.max_total, self.max_line = max_total, max_line
        self.buf = bytearray()
        self.line_start = 0  # where the current, unfinished line begins in buf
        self.done = False

    def feed(self, data: bytes) -> str | None:
        """Account for ``data``, the head's next bytes (bytes after the head's end are not looked at)."""
        if self.done:
            return None
        old = len(self.buf)
        self.buf += data[: self.max_total + len(_END) - old]
        end = self.buf.find(_END, max(0, old - len(_END) + 1))
        limit = end + 2 if end >= 0 else len(self.buf)  # through the last header line's CRLF
        while (pos := self.buf.find(b"\r\n", self.line_start, limit)) >= 0:
            if pos - self.line_start > self.max_line:
                return f"a header line is longer than {self.max_line} bytes"
            self.line_start = pos + 2
        partial = len(self.buf) - self.line_start - self.buf.endswith(b"\r")  # a CRLF may be split over reads
        if end < 0 and partial > self.max_line:
            return f"a header line is longer than {self.max_line} bytes"
        if (end + len(_END) if end >= 0 else len(self.buf)) > self.max_total:
            return f"the request head (request line and headers) is larger than {self.max_total} bytes"
        self.done = end >= 0
        return None


def capped_protocol(
    max_total: int = MAX_HEADER_BYTES,
    max_line: int = MAX_HEADER_LINE_BYTES,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> type[H11Protocol]:
    """The h11 protocol of uvicorn with the head caps and the request deadline in front (``Config(http=...)``)."""

    class CappedH11Protocol(H11Protocol):
        _meter: HeadMeter | None = None
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()  # the first request's clock runs from the connection, not from its first byte

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(request_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.transport.is_closing() or self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                return
            if self.cycle is None or not self.cycle.response_started:
                message = f"the request did not arrive within {request_timeout_s:g} s: send it whole, faster"
                self.transport.write(error_response("408 Request Timeout", message))
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # a kept-alive connection's next request: its clock starts at its first byte
                if self._meter is None or self._meter.done:
                    self._meter = HeadMeter(max_total, max_line)
                problem = self._meter.feed(data)
                if problem is not None:
                    self._disarm()
                    self.transport.write(error_431(f"{problem}: send fewer or shorter headers"))
                    self.transport.close()
                    return
            super().data_received(data)
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()  # the whole request is in: generation time never counts

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            """h11 could not parse the request: an OpenAI-shaped 400 (uvicorn's own is plain text)."""
            self._disarm()
            if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # else a response has begun: only close
                why = "the request is not valid HTTP/1.1 (check Content-Length, Transfer-Encoding and the request line)"
                self.transport.write(error_response("400 Bad Request", why))
            self.transport.close()

    return CappedH11Protocol


def uvicorn_limits(request_timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
    """The ``uvicorn.Config`` keywords that apply the caps and the deadline (the protocol, and h11's backstop)."""
    return {
        "http": capped_protocol(request_timeout_s=request_timeout_s),
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES + 1024,
        "ws": "none",  # no WebSocket endpoint: an upgrade request is served as plain HTTP
    }
