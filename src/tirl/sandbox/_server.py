"""The fork server of the warm pool. Standard library only: it runs *inside* the sandbox.

Started as ``python -I -c <this file> MODE WORK DIR...`` (MODE ``isolated`` inside bwrap, where
it also removes SysV IPC objects between runs, or ``plain``; every DIR is emptied between runs).
It imports the usual modules once, then serves requests read from fd 0 (4-byte big-endian length + JSON)
and answers on fd 1, one request at a time:

``{"op": "run", "code", "lang", "timeout_s", "memory_mb", "nproc", "fsize_mb", "keep", "session"}``
    Fork a fresh child (its own process group, rlimits, cwd WORK) that runs the
    code and exits; with ``session``, run it instead in that session's
    long-lived kernel process, which keeps its globals across runs. Answer
    ``{"out": [head_b64, tail_b64, total], "err": [...], "exit", "timed_out", "wall", "note"}``.
``{"op": "end", "session"}``
    Kill that session's kernel.

Every request carries a ``nonce`` that its answer repeats, and the server writes ``{"ready": true}``
when it starts and after the cleanup that follows every answer: the host sends a request only after
a ready frame, and replaces a server that does not send one in time (stopped, stuck, or gone).

After every run the server kills every process it did not start as a kernel and empties WORK and
TMP (:mod:`tirl.sandbox._tree`, whose source is put in front of this one: any depth, no recursion),
so nothing of one execution is visible to the next. In ``isolated`` mode the server is the PID
namespace's init (bwrap ``--as-pid-1``): no process of the sandbox can signal it (the kernel drops
signals from inside the namespace to an init without a handler), and ``kill(-1)`` reaches every
other process of the namespace. It is never dumpable, so no process can ptrace it or open its
descriptors through ``/proc`` (and the seccomp filter denies ``ptrace`` anyway). A tree too large to
empty within the budget makes the server exit; the host then starts a fresh one.
"""

import base64
import bisect
import builtins
import cmath
import collections
import copy
import ctypes
import dataclasses
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
import random
import re
import resource
import select
import signal
import socket
import statistics
import string
import struct
import sys
import textwrap
import time
import traceback
import typing

# The usual modules, imported once so that a forked child pays nothing for them.
PREIMPORTED = [bisect, cmath, collections, copy, dataclasses, datetime, decimal, fractions, functools]
PREIMPORTED += [heapq, itertools, math, operator, re, statistics, string, textwrap, typing, json, random]

if "empty_dir" not in globals():  # imported as a module; inside the sandbox _tree.py's source comes first
    from tirl.sandbox._tree import TreeTooLarge, empty_dir

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
LIBC = ctypes.CDLL(None, use_errno=True)
DRAIN_GRACE_S = 0.1
MB = 1024 * 1024
CLEAN_BUDGET = 200_000  # entries; past it the server exits and the host starts a fresh one
READY = {"ready": True}
WARMUP = "print(end='')\nx = [i * i for i in range(8)]\n"


class Capped:
    """First and last ``keep`` bytes of a stream, and its total length."""

    def __init__(self, keep):
        self.keep, self.head, self.tail, self.total = keep, b"", bytearray(), 0

    def feed(self, data):
        self.total += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    def wire(self):
        return [base64.b64encode(self.head).decode(), base64.b64encode(bytes(self.tail)).decode(), self.total]


def read_msg(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    body = read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def write_msg(fd, obj):
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def set_limits(req, cpu=True):
    pairs = [
        (resource.RLIMIT_AS, req["memory_mb"] * MB),
        (resource.RLIMIT_NPROC, req["nproc"]),
        (resource.RLIMIT_FSIZE, req["fsize_mb"] * MB),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_CORE, 0),
    ]
    if cpu:
        pairs.append((resource.RLIMIT_CPU, int(req["timeout_s"] + 1)))
    for which, value in pairs:
        resource.setrlimit(which, (value, value))


def fresh_stdio():
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
        elif isinstance(exc.code, int):
            status = exc.code
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


def new_globals():
    return {"__name__": "__main__", "__builtins__": builtins}


def zygote_main(req_r, done_w, out_w, err_w, work):
    """The pre-forked child: do all that does not depend on the request, wait for it, run it. Never returns.

    Everything before the request (descriptors, directory, stdio, a warm-up ``exec`` that takes the
    copy-on-write faults of the common paths) happens while the server is idle. At the end the
    child closes its output, writes its status on fd 4 and exits, so the server answers without
    waiting for the exit's memory teardown (the code could write a status there itself: it only
    ends its own run early).
    """
    status = 1
    try:
        os.setpgid(0, 0)
        LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        for src, dst in ((null, 0), (out_w, 1), (err_w, 2), (req_r, 3), (done_w, 4)):
            os.dup2(src, dst)
        os.closerange(5, 65536)
        os.chdir(work)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        random.seed()  # (the random module re-seeds at fork too; explicit, in case that hook changes)
        sys.argv = ["-c"]
        fresh_stdio()
        exec(compile(WARMUP, "<string>", "exec"), new_globals())
        chunks = []
        while chunk := os.read(3, 1 << 16):
            chunks.append(chunk)
        os.close(3)
        if not chunks:  # the server went away without a request
            os._exit(0)
        req = json.loads(b"".join(chunks))
        set_limits(req)
        if req["lang"] == "bash":
            os.close(4)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.execve("/bin/bash", ["bash", "-c", req["code"]], os.environ)
        status = exec_python(req["code"], new_globals())
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
    os.setpgid(0, 0)
    LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
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
        if not data:
            os._exit(0)
        msg = json.loads(data)
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = int(used.ru_utime + used.ru_stime + msg["timeout_s"] + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, resource.RLIM_INFINITY))
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        os.close(fds[0])
        os.close(fds[1])
        fresh_stdio()
        status = exec_python(msg["code"], env)
        os.dup2(null, 1)
        os.dup2(null, 2)
        sock.sendall(json.dumps({"exit": status}).encode())


class Server:
    def __init__(self, isolated, work, scratch):
        self.isolated, self.work, self.scratch = isolated, work, scratch
        self.kernels = {}  # session -> (pid, socket)
        self.zygote = None  # (pid, pidfd, request pipe, stdout pipe, stderr pipe) of the pre-forked child
        self.ctrl_in = os.dup(0)
        self.ctrl_out = os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(null, fd)
        LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Not dumpable: a child (same uid) cannot ptrace the server, read its memory or open its fds.
        LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        self.me = os.getpid()
        # As the namespace's init, a signal without a handler cannot reach us from inside: drop Python's.
        self.init = isolated and self.me == 1
        if self.init:
            signal.signal(signal.SIGINT, signal.SIG_DFL)

    def serve(self):
        write_msg(self.ctrl_out, READY)
        while True:
            req = read_msg(self.ctrl_in)
            if req is None:
                self.shutdown()
                return
            if req["op"] == "end":
                self.end(req["session"])
                write_msg(self.ctrl_out, {"ok": True, "nonce": req.get("nonce")})
            elif req["op"] == "run":
                session = req.get("session")
                reply = self.run(req)
                reply["nonce"] = req.get("nonce")
                write_msg(self.ctrl_out, reply)
                # Clean up after answering; the host sends the next request once it reads READY.
                self.sweep()
                if session is None:
                    self.clean()
                    self.zygote = self.make_zygote()
            write_msg(self.ctrl_out, READY)

    def make_zygote(self):
        """Fork the next child now, off the critical path; it waits for its request on a pipe."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        req_r, req_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            zygote_main(req_r, done_w, out_w, err_w, self.work)
        for fd in (out_w, err_w, req_r, done_w):
            os.close(fd)
        return pid, os.pidfd_open(pid), req_w, out_r, err_r, done_r

    def run(self, req):
        start = time.monotonic()
        note = ""
        session = req.get("session")
        done: typing.Any  # a pidfd (int) for a forked child, the kernel's socket in a session
        status_r = None
        if session is None:
            pid, done, req_w, out_r, err_r, status_r = self.zygote or self.make_zygote()
            self.zygote = None
            data = json.dumps(req).encode()
            while data:
                data = data[os.write(req_w, data) :]
            os.close(req_w)
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            pid, done = self.kernel(session, req)
            socket.send_fds(done, [json.dumps(req).encode()], [out_w, err_w])
            os.close(out_w)
            os.close(err_w)
        out, err = Capped(req["keep"]), Capped(req["keep"])
        finished, reply = self.wait(done, out_r, err_r, out, err, start + req["timeout_s"], status_r)
        if not finished:
            kill_group(pid)
        if session is None:
            # The child's own status report, else its exit status (it is then reaped later, by the sweep).
            status = struct.unpack(">i", reply)[0] if reply else reap(pid)
            os.close(done)
        elif finished and reply:
            status = json.loads(reply)["exit"]
        else:  # the kernel hit the deadline or died: its state is gone
            kill_group(pid)
            del self.kernels[session]
            done.close()
            status = reap(pid)
            note = "[session restarted: its state was lost]"
        return {
            "out": out.wire(),
            "err": err.wire(),
            "exit": status,
            "timed_out": not finished,
            "wall": time.monotonic() - start,
            "note": note,
        }

    def wait(self, done, out_r, err_r, out, err, deadline, status_r=None):
        """Pump output until the program ends and its pipes close; (finished in time, kernel reply or status)."""
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
                    finished = True
                    reply = done.recv(4096) if isinstance(done, socket.socket) else None
                    end = time.monotonic() + DRAIN_GRACE_S  # a background child may hold the pipes
                    continue
                chunk = os.read(fd, 65536)
                if chunk:
                    streams[fd].feed(chunk)
                else:
                    os.close(fd)
                    del streams[fd]
        for fd in streams:
            os.close(fd)
        if status_r is not None:
            os.close(status_r)
        return finished, reply

    def kernel(self, session, req):
        if session in self.kernels:
            return self.kernels[session]
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
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
            # Init of the namespace: kill(-1) reaches every other process in it, escaped or not.
            for _ in range(10000):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
                if not self.reap_all():
                    time.sleep(0.0002)  # still exiting (its memory is being torn down)
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
        """Empty WORK and TMP (not in a session: there they are the session's files)."""
        if self.isolated:
            remove_sysv_ipc()
        try:
            for root in (self.work, *self.scratch):
                empty_dir(root, CLEAN_BUDGET)
        except (OSError, TreeTooLarge):
            # Cannot empty it (in budget): the host replaces this server, and its tmpfs goes with it.
            os._exit(3)

    def shutdown(self):
        if self.zygote is not None:
            os.close(self.zygote[2])  # EOF: the waiting child exits
            os.close(self.zygote[5])
            reap(self.zygote[0])
            self.zygote = None
        for session in list(self.kernels):
            self.end(session)
        self.sweep()


def remove_sysv_ipc():
    """Remove the SysV shared memory, queues and semaphores of this IPC namespace (all are ours)."""
    for kind, func in (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl")):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                ids = [int(line.split()[1]) for line in f.readlines()[1:] if line.strip()]
        except OSError:
            continue
        for ident in ids:
            if kind == "sem":
                LIBC.semctl(ident, 0, 0)  # IPC_RMID
            else:
                getattr(LIBC, func)(ident, 0, None)


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


def descendants(root):
    """Pids whose parent chain reaches ``root`` (live, non-zombie), from /proc."""
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        parent[int(name)] = int(fields[1])
    found = []
    for pid in parent:
        p, seen = pid, 0
        while p in parent and seen < 4096:
            p = parent[p]
            seen += 1
            if p == root:
                found.append(pid)
                break
    return found


if __name__ == "__main__":
    # Move everything imported so far out of the collector's view, so forked children do not
    # touch (and copy) those pages when they collect.
    gc.collect()
    gc.freeze()
    Server(sys.argv[1] == "isolated", sys.argv[2], sys.argv[3:]).serve()
