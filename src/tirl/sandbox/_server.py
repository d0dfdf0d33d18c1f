"""The fork server of the warm pool. Standard library only: it runs *inside* the sandbox.

Started as ``python -I -c BOOT <source> MODE KIND WORK DIR...`` (MODE ``isolated`` inside bwrap, where it
also removes SysV IPC objects between runs, or ``plain``; KIND ``pool`` or ``session``; every DIR is
emptied between runs); the source is that of :mod:`tirl.sandbox._tree`, :mod:`tirl.sandbox._wire`,
:mod:`tirl.sandbox._leftovers` and this file, compiled by :data:`tirl.sandbox.pool.BOOT` (not run as the
``-c`` program itself, whose parse tree would stay in every fork).
It imports the usual modules once, then serves requests (``OP_RUN``) arriving on fd 0 and answers on fd 1,
one at a time, in the frames of :mod:`tirl.sandbox._wire` (exit status, timed out, wall seconds, the head
and tail of stdout and stderr).

``pool``: a pre-forked child (its own session and process group, rlimits, cwd WORK) takes the request from fd 0
itself, reports its nonce, timeout and output cap to the server on its status pipe, closes fd 0,
runs the code and exits. It is forked right after the previous run's cleanup, so a run's latency
excludes the fork, and it waits with everything that does not depend on the request done
(descriptors, signal handler). The server never runs code of a request itself,
and a child runs exactly one request: each execution starts from the state the server had before
any request (the standard streams are created once, on pipes, before the first fork; :mod:`random`
is re-seeded by the server right before each fork; the child registers its fork hook).

``session``: the server reads the request and runs it in the session's long-lived kernel process,
which keeps its globals across runs.

Every request carries a nonce that its answer repeats, and the server writes a ready frame when it
starts and after the cleanup that follows every answer: only then is the next request read (the
host may already have sent it), and the host replaces a server whose ready frame does not come in
time (stopped, stuck, or gone).

After every run the server kills every process it did not start as a kernel and empties WORK and
TMP (:mod:`tirl.sandbox._tree`: any depth, no recursion), so nothing of one execution is visible
to the next. In ``isolated`` mode the server is the PID namespace's init (bwrap ``--as-pid-1``): no
process of the sandbox can signal it (the kernel drops signals from inside the namespace to an init
without a handler), and ``kill(-1)`` reaches every other process of the namespace. It is never
dumpable, so no process can ptrace it or open its descriptors through ``/proc`` (and the seccomp
filter denies ``ptrace`` anyway). A tree too large to empty within the budget makes the server exit;
the host then starts a fresh one.
"""

import bisect
import builtins
import cmath
import collections
import copy
import ctypes
import datetime
import decimal
import fractions
import functools
import gc
import heapq
import io
import itertools
import json
import math
import operator
import os
import re
import resource
import select
import signal
import stat
import string
import struct
import sys
import textwrap
import time
import traceback
import typing

# random's own fork hook re-seeds it in every forked child, from 2.5 kB of urandom (~0.05 ms of CPU a run): it is
# kept out; the server re-seeds before each of its forks instead, and its children register the hook themselves.
_register_at_fork, os.register_at_fork = os.register_at_fork, lambda **_: None
import random  # noqa: E402
import statistics  # noqa: E402 (imports random)

os.register_at_fork = _register_at_fork

# The usual modules, imported once so that a forked child pays nothing for them. Not dataclasses (~1 MB with
# inspect, ast, dis) or socket (no network): each MB held costs every run's fork and exit ~30 us of CPU.
PREIMPORTED = [bisect, cmath, collections, copy, datetime, decimal, fractions, functools]
PREIMPORTED += [heapq, itertools, math, operator, re, statistics, string, textwrap, typing, json, random]

if "empty_dir" not in globals():  # imported as a module; inside the sandbox the sources come first
    from tirl.sandbox._capture import Capture, answer_frame, wipe
    from tirl.sandbox._leftovers import EMPTY_TMPFS_DIR, descendants, remove_sysv_ipc, sized_mounts, unix_sockets_freed
    from tirl.sandbox._tree import TreeTooLarge, empty_dir
    from tirl.sandbox._wire import READY, decode_request, frame

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
# Without use_errno: nothing reads errno, and ctypes' errno swap costs a fresh child ~65 page faults.
LIBC = ctypes.CDLL(None)
PRCTL = LIBC.prctl  # looked up once, before any fork
DRAIN_GRACE_S = 0.1
MB = 1024 * 1024
CLEAN_BUDGET = 200_000  # entries; past it the server exits and the host starts a fresh one
LOST = b"[session restarted: its state was lost]"  # the note of a turn whose session kernel was gone or died
UNIX_FREE_S = 2.0  # how long the cleanup waits for the unix sockets a run left in flight to be freed
# A child's report that it took a request: nonce, timeout, bytes kept, when (monotonic clock, the host's too).
TAKEN = struct.Struct(">8sdId")


def read_frame(fd):
    """One frame's body from ``fd``; None at end of input."""
    head = read_exact(fd, 4)
    if head is None:
        return None
    return read_exact(fd, struct.unpack(">I", head)[0])


def read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def set_limits(req, cpu=True):
    """The rlimits of a decoded request (see ``decode_request``) on the calling process."""
    timeout_s, memory_mb, nproc, fsize_mb = req[2:6]
    pairs = [
        (resource.RLIMIT_AS, memory_mb * MB),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_FSIZE, fsize_mb * MB),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_CORE, 1),  # not 0: a pipe core_pattern gets the dump anyway (tirl.sandbox._common.CORE_LIMIT)
    ]
    if cpu:
        pairs.append((resource.RLIMIT_CPU, int(timeout_s + 1)))
    for which, value in pairs:
        resource.setrlimit(which, (value, value))


def fresh_stdio():
    """New ``sys.stdin/stdout/stderr`` on fds 0, 1 and 2 (unbuffered writes)."""
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", write_through=True)


def exec_python(code, env):
    """Run ``code`` in ``env``; return the exit status a ``python -c`` would have."""
    try:
        exec(compile(code, "<string>", "exec"), env)
        status = 0
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif isinstance(exc.code, int):  # as python -c exits: the code as a C long, its low byte; else 255
            status = exc.code & 0xFF if -(1 << 63) <= exc.code < 1 << 63 else 0xFF
        else:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException as exc:
        # Drop this function's own frame: the traceback starts at the user's code.
        tb = exc.__traceback__
        traceback.print_exception(type(exc), exc, tb.tb_next if tb else None)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return status


def first_to_kill():
    """Make this process the OOM killer's first choice in the sandbox's memory cgroup, before the server.

    The code may lower it again (not below 0): the OOM killer then may take the server instead, which
    the host reports the same way (``memory_exceeded``) and replaces.
    """
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, b"1000")
        finally:
            os.close(fd)
    except OSError:
        pass


def new_globals():
    return {"__name__": "__main__", "__builtins__": builtins}


def zygote_main(ctrl_in, done_w, out_w, err_w):
    """The pre-forked child: do all that does not depend on the request, take it, run it. Never returns.

    It reads its request from the host's pipe itself (one hop less than through the server), writes
    ``S`` + :data:`TAKEN` (nonce, timeout, bytes kept, time) to the server on fd 4 and closes the host's
    pipe before any code runs: the code never holds it. At end of input it writes ``Q`` (the host
    closed the pool) and exits.

    Everything before the request (descriptors, signal handler) happens while the server is idle. No
    warm-up ``exec``: it moved some copy-on-write faults off a run's latency (p50 ~0.02 ms) but added
    ~15 faults and ~3% of the CPU per run (docs/sandbox.md). The working directory,
    ``sys.argv`` and the standard streams (on pipes, never written by the server) are the server's. At
    the end the child closes its output, writes its status on fd 4 and exits, so the server answers
    without waiting for the exit's teardown (the code could write a status itself: it only ends its run).
    """
    status = 1
    try:
        # Its own session, not only its own group: a session has its own scheduler autogroup, whose nice value
        # any member may set (/proc/self/autogroup), and the server's would carry to every later run.
        os.setsid()
        PRCTL(PR_SET_DUMPABLE, 1, 0, 0, 0)
        first_to_kill()
        null = os.open(os.devnull, os.O_RDONLY)
        for src, dst in ((null, 0), (out_w, 1), (err_w, 2), (ctrl_in, 3), (done_w, 4)):
            os.dup2(src, dst)
        os.closerange(5, 65536)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.register_at_fork(after_in_child=random.seed)  # forks of the code re-seed, as in any Python
        body = read_frame(3)
        os.close(3)
        if body is None:  # the host closed the pool
            os.write(4, b"Q")
            os._exit(0)
        req = decode_request(body)
        os.write(4, b"S" + TAKEN.pack(req[7], req[2], req[6], time.monotonic()))
        set_limits(req)
        code = req[9].decode("utf-8", "surrogatepass")
        if req[1] == "bash":
            os.close(4)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.execve("/bin/bash", ["bash", "-c", code], os.environ)
        status = exec_python(code, new_globals())
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    try:
        os.close(1)
        os.close(2)
        os.write(4, struct.pack(">i", status))
    except BaseException:
        pass
    os._exit(status & 0xFF)


def kernel_main(sock, work, req):
    """A session kernel: keep one set of globals, run each request's code in it."""
    import socket  # see Server.kernel

    os.setsid()  # see zygote_main
    PRCTL(PR_SET_DUMPABLE, 1, 0, 0, 0)
    first_to_kill()
    os.register_at_fork(after_in_child=random.seed)  # see zygote_main
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)
    os.chdir(work)
    set_limits(req, cpu=False)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = ["-c"]
    env = new_globals()
    null = os.open(os.devnull, os.O_RDWR)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
        except OSError:
            os._exit(0)
        if not data or len(fds) != 2:
            os._exit(0)
        msg = decode_request(data)
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = int(used.ru_utime + used.ru_stime + msg[2] + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, resource.RLIM_INFINITY))
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        os.close(fds[0])
        os.close(fds[1])
        fresh_stdio()
        status = exec_python(msg[9].decode("utf-8", "surrogatepass"), env)
        os.dup2(null, 1)
        os.dup2(null, 2)
        sock.sendall(msg[7] + struct.pack(">i", status))  # this turn's nonce: a queued forgery answers no later turn


class Server:
    def __init__(self, isolated, pool, work, scratch):
        self.isolated, self.work, self.scratch = isolated, work, scratch
        self.pool = pool  # a pool server's children take their requests; a session server reads them
        self.kernels = {}  # session -> (pid, socket)
        self.zygote = None  # (pid, pidfd, stdout pipe, stderr pipe, status pipe) of the next child
        self.ctrl_in = os.dup(0)
        self.ctrl_out = os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        # The children's standard streams, made once: on a pipe (as a child's are) whose reader is gone,
        # so a stray write of the server fails instead of blocking, and nothing is ever buffered in them.
        sink_r, sink_w = os.pipe()
        os.close(sink_r)
        for fd in (1, 2):
            os.dup2(sink_w, fd)
        os.close(sink_w)
        fresh_stdio()
        os.chdir(work)  # what a child inherits; the server itself uses absolute paths
        sys.argv = ["-c"]
        PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Not dumpable: a child (same uid) cannot ptrace the server, read its memory or open its fds.
        PRCTL(PR_SET_DUMPABLE, 0, 0, 0, 0)
        self.me = os.getpid()
        # As the namespace's init, a signal without a handler cannot reach us from inside: drop Python's.
        self.init = isolated and self.me == 1
        self.tmpfs = sized_mounts({work, *scratch}) if isolated else set()
        self.times = {root: (os.stat(root).st_atime_ns, os.stat(root).st_mtime_ns) for root in (work, *scratch)}
        if self.init:
            signal.signal(signal.SIGINT, signal.SIG_DFL)

    def serve(self):
        if self.pool:
            self.zygote = self.make_zygote()
        write_all(self.ctrl_out, frame(READY))
        while True:
            if self.pool:
                answer = self.run_taken()
            else:
                body = read_frame(self.ctrl_in)
                answer = None if body is None else self.run_session(body, decode_request(body))
            if answer is None:  # end of input: the host closed the pool
                self.shutdown()
                return
            write_all(self.ctrl_out, answer)
            wipe(answer)  # the next child is forked from our memory: nothing of this run's output may be in it
            # Clean up after answering; the next request is read only after the ready frame.
            self.sweep()
            if self.pool:
                self.clean()
                self.zygote = self.make_zygote()
            write_all(self.ctrl_out, frame(READY))

    def make_zygote(self):
        """Fork the next child now, off the critical path; it waits for its request on the host's pipe."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        done_r, done_w = os.pipe()
        random.seed()  # the child's own random state (the server has no fork hook for it)
        pid = os.fork()
        if pid == 0:
            zygote_main(self.ctrl_in, done_w, out_w, err_w)
        for fd in (out_w, err_w, done_w):
            os.close(fd)
        return pid, os.pidfd_open(pid), out_r, err_r, done_r

    def run_taken(self):
        """The answer to the request the pre-forked child takes (None at end of input)."""
        pid, done, out_r, err_r, status_r = self.zygote or self.make_zygote()
        self.zygote = None
        kind = read_exact(status_r, 1)  # no code runs before this report
        taken = read_exact(status_r, TAKEN.size) if kind == b"S" else None
        if taken is None:
            reap(pid)
            if kind == b"Q":
                return None
            os._exit(3)  # died holding part of a request, perhaps: the host replaces this server
        nonce, timeout_s, keep, start = TAKEN.unpack(taken)  # written before the code ran
        out, err = Capture(keep), Capture(keep)  # see tirl.sandbox._capture
        finished, reply = self.wait(done, out_r, err_r, out, err, start + timeout_s, status_r)
        if not finished:
            kill_group(pid)
        # The child's own status report, else its exit status (it is then reaped later, by the sweep).
        status = struct.unpack(">i", reply)[0] if reply else reap(pid)
        os.close(done)
        return answer_frame(nonce, status, not finished, time.monotonic() - start, out, err, b"")

    def run_session(self, body, req):
        """Run one request (``body`` as received, ``req`` decoded) in its session's kernel; the answer body."""
        import socket  # see Server.kernel

        start = time.monotonic()
        note = b""
        timeout_s, keep, nonce, session = req[2], req[6], req[7], req[8]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid, done = self.kernel(session, req)
        try:
            socket.send_fds(done, [body], [out_w, err_w])
        except OSError:
            # The kernel ended after its last turn (that turn's code did it, e.g. a thread calling os._exit):
            # the episode's doing, so its state is lost and this turn runs in a fresh kernel. Before, the server
            # died here and the turn was a sandbox error, an infrastructure failure left out of the update.
            self.end(session)
            pid, done = self.kernel(session, req)
            socket.send_fds(done, [body], [out_w, err_w])
            note = LOST
        os.close(out_w)
        os.close(err_w)
        out, err = Capture(keep), Capture(keep)  # see tirl.sandbox._capture
        finished, reply = self.wait(done, out_r, err_r, out, err, start + timeout_s, nonce=nonce)
        if not finished:
            kill_group(pid)
        if finished and len(reply or b"") == 4:
            status = struct.unpack(">i", reply)[0]
        else:  # the kernel hit the deadline or died: its state is gone
            kill_group(pid)
            del self.kernels[session]
            done.close()
            status = reap(pid)
            note = LOST
        return answer_frame(nonce, status, not finished, time.monotonic() - start, out, err, note)

    def wait(self, done, out_r, err_r, out, err, deadline, status_r=None, nonce=None):
        """Pump output until the program ends and its pipes close; (finished in time, kernel reply or status).

        A session kernel's reply is its turn's ``nonce`` + status. The turn's code runs in the kernel and can
        write on its socket too: a message that does not carry this turn's nonce (queued by an earlier turn,
        or malformed) is dropped, so it can end no turn but the one that wrote it.
        """
        streams = {out_r: out, err_r: err}
        finished, reply, end = False, None, deadline
        while True:
            now = time.monotonic()
            watch = [*streams, *([] if finished else [done])]
            if status_r is not None and not finished:
                watch.append(status_r)
            if now >= end or not watch:
                break
            ready, _, _ = select.select(watch, [], [], end - now)
            for fd in ready:
                if fd is status_r:
                    data = os.read(fd, 4)
                    os.close(fd)
                    status_r = None
                    if len(data) == 4 and not finished:
                        finished, reply = True, data
                        end = time.monotonic() + DRAIN_GRACE_S
                    continue
                if fd is done:
                    reply = None if isinstance(done, int) else done.recv(4096)
                    if reply and (len(reply) != 12 or reply[:8] != nonce):
                        reply = None
                        continue
                    finished = True
                    reply = reply[8:] if reply else None
                    end = time.monotonic() + DRAIN_GRACE_S  # a background child may hold the pipes
                    continue
                if not streams[fd].read(fd):
                    os.close(fd)
                    del streams[fd]
        for fd in streams:
            os.close(fd)
        if status_r is not None:
            os.close(status_r)
        return finished, reply

    def kernel(self, session, req):
        """The session's kernel (pid, socket), started with ``req``'s limits on first use."""
        import socket  # here, in session servers only: see PREIMPORTED

        if session in self.kernels:
            return self.kernels[session]
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        random.seed()
        pid = os.fork()
        if pid == 0:
            parent.close()
            try:
                kernel_main(child, self.work, req)
            finally:
                os._exit(1)
        child.close()
        self.kernels[session] = (pid, parent)
        return pid, parent

    def end(self, session):
        entry = self.kernels.pop(session, None)
        if entry is not None:
            kill_group(entry[0])
            entry[1].close()
            self.sweep()

    def sweep(self):
        """Kill every process below the server except the session kernels; reap them."""
        if self.init and not self.kernels and self.zygote is None:
            # Init of the namespace: kill(-1) reaches every other process in it, escaped or not; all descend
            # from us and are dying, so a blocking wait returns (no polling during an exit's teardown).
            for _ in range(10000):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    pass
            self.reap_all()
            return
        for _ in range(1000):
            keep = {self.me, *(pid for pid, _ in self.kernels.values())}
            if self.zygote is not None:
                keep.add(self.zygote[0])
            victims = [p for p in descendants(self.me) if p not in keep]
            if not victims:
                break
            for p in victims:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            self.reap_all()
            time.sleep(0.001)
        self.reap_all()

    def reap_all(self):
        """Reap dead children; forget a kernel that died. Whether any was reaped."""
        reaped = False
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return reaped
            if pid == 0:
                return reaped
            reaped = True
            for session, (kpid, sock) in list(self.kernels.items()):
                if kpid == pid:
                    sock.close()
                    del self.kernels[session]

    def clean(self):
        """Empty WORK and TMP and reset their roots (not in a session); isolated, SysV IPC and in-flight sockets too."""
        if self.isolated:
            remove_sysv_ipc()
        try:
            for root in (self.work, *self.scratch):
                self.clean_root(root)
        except (OSError, TreeTooLarge):
            # Cannot empty it (in budget): the host replaces this server, and its tmpfs goes with it.
            os._exit(3)
        if self.isolated and not unix_sockets_freed(UNIX_FREE_S):
            os._exit(3)  # still held: the host replaces this server, and its memory cgroup goes with it

    def clean_root(self, root):
        """Empty ``root`` and reset what a run could leave in the root itself: mode, extended attributes, times."""
        st = os.stat(root)
        if stat.S_IMODE(st.st_mode) != 0o755:
            try:
                os.chmod(root, 0o755)  # a run may have taken its own permissions away
            except OSError:
                pass
        for name in os.listxattr(root):  # user.* attributes and ACLs could carry data to the next run
            os.removexattr(root, name)
        # A tmpfs directory's size counts its entries: one stat tells an empty one (the usual case).
        if root not in self.tmpfs or st.st_size != EMPTY_TMPFS_DIR:
            with os.scandir(root) as entries:
                if next(entries, None) is not None:
                    empty_dir(root, CLEAN_BUDGET)
        os.utime(root, ns=self.times[root])  # so do its access and modification times

    def shutdown(self):
        if self.zygote is not None:
            kill_group(self.zygote[0])  # it waits on the host's pipe, which stays open until we exit
            for fd in self.zygote[1:]:
                os.close(fd)
            reap(self.zygote[0])
            self.zygote = None
        for session in list(self.kernels):
            self.end(session)
        self.sweep()


def kill_group(pid):
    for f in (os.killpg, os.kill):
        try:
            f(pid, signal.SIGKILL)
        except OSError:
            pass


def reap(pid):
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    SERVER = Server(sys.argv[1] == "isolated", sys.argv[2] == "pool", sys.argv[3], sys.argv[4:])
    # Move everything made so far out of the collector's view, so forked children do not touch (and
    # copy) those pages when they collect, and hand the freed heap back: a fork copies fewer pages.
    gc.collect()
    LIBC.malloc_trim(0)
    gc.freeze()
    SERVER.serve()
