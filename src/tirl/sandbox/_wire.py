"""The warm pool's wire format and output buffer, shared by the host and the fork server.

Standard library only: the fork server (``_server.py``) runs inside the sandbox, where ``tirl`` cannot be
imported, so its source is put after this one's (and :mod:`tirl.sandbox._tree`'s); the host imports
this module. One definition serves both ends.

Every message is a frame: a 4-byte big-endian length, then the body. Bodies are fixed ``struct``
headers followed by raw bytes, so neither end encodes JSON or base64 per execution:

- request (host -> server, and passed unchanged to the child that runs it): :data:`REQUEST`
  (op: :data:`OP_RUN`, lang, timeout, memory, process count, file size, bytes of output to keep, nonce, session
  length), then the session key and the code, both UTF-8;
- answer (server -> host): :data:`ANSWER` (kind ``A``, nonce, exit status, timed out, wall seconds,
  total bytes of stdout and stderr, the lengths of the kept pieces), then stdout's head and tail,
  stderr's head and tail and a note;
- :data:`READY`: the server is clean and reads the next request.

Not covered here: who may send what (the server and :mod:`tirl.sandbox.pool` check it).
"""

import struct

TRUNCATION_MARKER = "\n[... {n} characters cut ...]\n"
BYTES_MARKER = "\n[... output cut, {n} bytes in all ...]\n"
OP_RUN = 1
LANGS = ("python", "bash")
REQUEST = struct.Struct(">BBdIIII8sH")
ANSWER = struct.Struct(">c8siBdQQIIIIH")
READY = b"R"
FRAME = struct.Struct(">I")


def frame(body: bytes) -> bytes:
    """``body`` with its length in front."""
    return FRAME.pack(len(body)) + body


def encode_request(
    op: int,
    code: str,
    lang: str,
    timeout_s: float,
    memory_mb: int,
    nproc: int,
    fsize_mb: int,
    keep: int,
    nonce: bytes,
    session: str | None = None,
) -> bytes:
    """A request body (see the module docstring); ``nonce`` is 8 bytes."""
    key = (session or "").encode()
    head = REQUEST.pack(op, LANGS.index(lang), timeout_s, memory_mb, nproc, fsize_mb, keep, nonce, len(key))
    return head + key + code.encode("utf-8", "surrogatepass")


def decode_request(body: bytes) -> tuple:  # type: ignore[type-arg]
    """(op, lang, timeout_s, memory_mb, nproc, fsize_mb, keep, nonce, session or None, code bytes)."""
    op, lang, timeout_s, memory_mb, nproc, fsize_mb, keep, nonce, n = REQUEST.unpack_from(body)
    start = REQUEST.size
    session = body[start : start + n].decode() if n else None
    code = body[start + n :]
    return op, LANGS[lang], timeout_s, memory_mb, nproc, fsize_mb, keep, nonce, session, code


class CappedBuffer:
    """Collects a byte stream, keeping only its first and last ``keep`` bytes.

    >>> b = CappedBuffer(4)
    >>> b.feed(b"0123456789")
    >>> (b.head, bytes(b.tail), b.total)
    (b'0123', b'6789', 10)
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head = b""
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    @property
    def dropped(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self, max_chars: int) -> tuple[str, bool]:
        """Decoded text (invalid UTF-8 becomes U+FFFD) cut to ``max_chars``; (text, truncated)."""
        head = self.head.decode("utf-8", errors="replace")
        if not self.dropped:
            return cut_text(head + self.tail.decode("utf-8", errors="replace"), max_chars)
        tail = self.tail.decode("utf-8", errors="replace")
        half = max_chars // 2
        marker = BYTES_MARKER.format(n=self.total)
        return head[:half] + marker + tail[-half:], True


def cut_text(text: str, max_chars: int) -> tuple[str, bool]:
    r"""``text`` if it fits in ``max_chars``, else head + marker + tail; (text, truncated).

    >>> cut_text("a" * 10 + "b" * 10, 8)[0]
    'aaaa\n[... 12 characters cut ...]\nbbbb'
    """
    if len(text) <= max_chars:
        return text, False
    half = max_chars // 2
    return text[:half] + TRUNCATION_MARKER.format(n=len(text) - 2 * half) + text[-half:], True


def decode_answer(body: bytes, keep: int) -> tuple[bytes, int, bool, float, CappedBuffer, CappedBuffer, bytes]:
    """(nonce, exit, timed_out, wall_s, out, err, note) from an answer body; ValueError if malformed.

    The pieces must add up to the body and fit ``keep``, and the totals must cover them.
    """
    if len(body) < ANSWER.size or body[:1] != b"A":
        raise ValueError("not an answer frame")
    _, nonce, exit_code, timed_out, wall_s, out_total, err_total, *sizes = ANSWER.unpack_from(body)
    if ANSWER.size + sum(sizes) != len(body) or max(sizes[:4]) > keep:
        raise ValueError("an answer whose pieces do not add up")
    pos = ANSWER.size
    pieces: list[bytes] = []
    for size in sizes:
        pieces.append(body[pos : pos + size])
        pos += size
    out, err = CappedBuffer(keep), CappedBuffer(keep)
    for buf, (head, tail), total in ((out, pieces[0:2], out_total), (err, pieces[2:4], err_total)):
        if total < len(head) + len(tail):
            raise ValueError("an answer whose totals do not cover its pieces")
        buf.head, buf.tail, buf.total = head, bytearray(tail), total
    return nonce, exit_code, bool(timed_out), wall_s, out, err, pieces[4]
