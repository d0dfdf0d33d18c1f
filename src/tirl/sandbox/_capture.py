"""The pool server's capture of a run's output, which leaves none of it in the server's memory.

Standard library only: the fork server runs this source inside the sandbox (put in front of ``_server.py``'s,
see :data:`tirl.sandbox.pool.SERVER_SOURCE`, after :mod:`tirl.sandbox._wire`'s).

A pool server forks its next child after it answered a run, so that child starts with a copy of the server's
memory. Output read with ``os.read`` (new ``bytes`` objects, freed but never overwritten) and the answer built
from it were still there for the next run to find by scanning its own memory (red team, session 49: the next
run on the server found the marker the previous one printed, short or long). Here a run's output goes only
into buffers made for that run: read with ``os.readv`` into a scratch buffer, kept as head and tail
(:class:`Capture`, the same bytes as :class:`~tirl.sandbox._wire.CappedBuffer` keeps), copied into the answer
frame in place (:func:`answer_frame`), and each buffer is overwritten with zeros (:func:`wipe`) before it is
released. Copies go through ``memoryview`` slices, which make no intermediate objects.

Not covered: the kernel's pipe pages (never mapped into the server, freed with the pipe).
"""

import os

if "ANSWER" not in globals():  # imported as a module; inside the sandbox the sources come first
    from tirl.sandbox._wire import ANSWER, FRAME

READ_SIZE = 65536


def wipe(buf, n=None):
    """Overwrite the first ``n`` bytes of ``buf`` (a bytearray; all of it by default) with zeros, in place."""
    n = len(buf) if n is None else n
    if n:
        buf[:n] = bytes(n)  # the same length: copied in place, the bytearray is not reallocated


class Capture:
    """The first and last ``keep`` bytes of one stream and its total, in buffers that :meth:`wipe` clears.

    The read buffer is one for all captures of the process (made once: a fresh one per run cost ~30 us of
    zero-filling); :meth:`wipe` clears what was read into it.
    """

    scratch = bytearray(READ_SIZE)

    def __init__(self, keep):
        self.keep, self.total, self.most = keep, 0, 0  # most: the longest read, the part of scratch to wipe
        self.head, self.nhead = bytearray(keep), 0
        self.tail, self.ntail = bytearray(2 * keep), 0  # what came after the head; its last ``keep`` bytes count
        self.used = 0  # how much of tail was ever written (to wipe)

    def read(self, fd):
        """Read once from ``fd`` (at most :data:`READ_SIZE` bytes) and keep what counts; the bytes read."""
        n = os.readv(fd, [self.scratch])
        data = memoryview(self.scratch)[:n]
        self.total, self.most = self.total + n, max(self.most, n)
        room = min(self.keep - self.nhead, n)
        if room > 0:
            memoryview(self.head)[self.nhead : self.nhead + room] = data[:room]
            self.nhead += room
            data = data[room:]
        if len(data) >= self.keep:
            data = data[len(data) - self.keep :]
        if data:
            tail = memoryview(self.tail)
            if self.ntail + len(data) > len(self.tail):  # keep the last keep - len(data) bytes, at the front
                kept = self.keep - len(data)
                tail[:kept] = tail[self.ntail - kept : self.ntail]  # memmove: no copy in between
                self.ntail = kept
            tail[self.ntail : self.ntail + len(data)] = data
            self.ntail += len(data)
            self.used = max(self.used, self.ntail)
        return n

    def pieces(self):
        """(head, tail) as views of the buffers."""
        return memoryview(self.head)[: self.nhead], memoryview(self.tail)[max(0, self.ntail - self.keep) : self.ntail]

    def wipe(self):
        if self.total:
            wipe(self.scratch, self.most)
            wipe(self.head, self.nhead)
            wipe(self.tail, self.used)
            self.nhead = self.ntail = self.used = self.most = 0


def answer_frame(nonce, exit_code, timed_out, wall_s, out, err, note):
    """The answer to send, built in place: frame length + an :data:`~tirl.sandbox._wire.ANSWER` body.

    ``out`` and ``err`` are :class:`Capture` s, wiped here; wipe the frame once it is written.
    """
    pieces = (*out.pieces(), *err.pieces(), memoryview(note))
    size = ANSWER.size + sum(len(p) for p in pieces)
    buf = bytearray(FRAME.size + size)
    FRAME.pack_into(buf, 0, size)
    ANSWER.pack_into(
        buf, FRAME.size, b"A", nonce, exit_code, timed_out, wall_s, out.total, err.total, *map(len, pieces)
    )
    view, pos = memoryview(buf), FRAME.size + ANSWER.size
    for piece in pieces:
        view[pos : pos + len(piece)] = piece
        pos += len(piece)
    out.wipe()
    err.wipe()
    return buf
