"""The seccomp filter every bubblewrap sandbox runs under (passed to ``bwrap --seccomp FD``).

Built with libseccomp through ``pyseccomp`` (a ctypes binding, API-compatible with libseccomp's own
Python module, that loads the system's ``libseccomp.so.2``; Debian's ``python3-seccomp`` only serves
the system interpreter, not a virtual environment). The filter is compiled once to classic BPF with
``seccomp_export_bpf`` and handed to bwrap, which loads it right before it executes the sandboxed
program, so everything the program starts is filtered too.

Default action: allow. Denied with ``EPERM`` (the call fails, the program goes on):

- ``ptrace``, ``process_vm_readv``, ``process_vm_writev``: no process may read, write or steer
  another one (the takeover of the sandbox's init or of the warm pool's server);
- ``keyctl``, ``add_key``, ``request_key``: the kernel keyring would carry secrets between runs;
- ``bpf``, ``perf_event_open``, ``userfaultfd``: large kernel attack surface, no use for a program;
- ``mount``, ``umount2``, ``pivot_root``, ``chroot``, the new mount API (``fsopen``, ``fsconfig``,
  ``fsmount``, ``fspick``, ``move_mount``, ``open_tree``, ``mount_setattr``);
- ``unshare``, ``setns``, and ``clone`` with any namespace flag (``CLONE_NEWNS``, ``NEWUTS``,
  ``NEWIPC``, ``NEWUSER``, ``NEWPID``, ``NEWNET``, ``NEWCGROUP``, ``NEWTIME``);
- ``io_uring_setup``/``enter``/``register`` (its operations bypass this filter), ``open_by_handle_at``
  and ``name_to_handle_at``, ``kexec_load``, ``kexec_file_load``, ``init_module``,
  ``finit_module``, ``delete_module``, ``acct``, ``swapon``, ``swapoff``, ``reboot``, ``syslog``,
  ``quotactl``, ``lookup_dcookie``, ``personality``.

Only where the sandbox has no memory cgroup (:mod:`tirl.sandbox._cgroup`; ``filter_fd(cgroup=False)``),
``memfd_create``, ``memfd_secret`` and ``shmget`` fail with ``ENOMEM`` (reported as ``memory_exceeded``
when the program dies of it): memory held in a memfd filled with ``write()``, or in SysV segments
attached a piece at a time, is in no process's address space, so the address-space rlimit cannot count
it, and without a cgroup nothing else would. With a cgroup the three stay allowed: it charges them.

**PID 1 keeps its scheduling and limits** (red team, session 45). A call that acts on another process
by pid only checks that the caller has the same uid, and the warm pool's server (the namespace's PID 1,
which outlives every run) does: the code could lower its hard rlimits (every later run's child then
failed to set its own: ``not allowed to raise maximum limit``), renice it, pin it to one CPU or give it
the idle I/O class, and every later run on that server inherited it. Denied with ``EPERM`` when the
target is pid 1 (compared on the low 32 bits, as the kernel reads a ``pid_t``): ``prlimit64``,
``sched_setaffinity``, ``sched_setscheduler``, ``sched_setparam``, ``sched_setattr``, ``setpriority``
(and with ``PRIO_PGRP`` or ``PRIO_USER`` at all, which reach it by group or uid), ``ioprio_set`` (likewise
with ``IOPRIO_WHO_PGRP`` or ``IOPRIO_WHO_USER``). On one's own processes these calls still work.

**Socket families**: only ``AF_UNIX``, ``AF_INET``, ``AF_INET6`` and ``AF_NETLINK`` (each scoped by the
sandbox's network namespace); ``socket`` and ``socketpair`` with any other family fail with
``EAFNOSUPPORT``. ``AF_VSOCK`` is the reason (red team, session 45): its sockets are not scoped by
a network namespace on the kernels we run (6.18 here), so in a VM with a virtio-vsock device the code
could open one and connect to the hypervisor's services (CID 2) around the empty network namespace.

``clone3`` fails with ``ENOSYS``: its flags sit in memory, where a filter cannot read them, and C
libraries then fall back to ``clone``, whose flags are checked. Calls of another architecture's ABI
(e.g. 32-bit ``int 0x80`` on x86-64) kill the process (libseccomp's default for a foreign
architecture).

Not covered: kernel bugs in the calls that stay allowed; the filter narrows the kernel's surface, it is
not a VM boundary.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile
from typing import Any

DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "unshare",
    "setns",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "name_to_handle_at",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "quotactl",
    "lookup_dcookie",
    "personality",
)

# Memory that no rlimit counts; refused only where no memory cgroup counts it either.
MEMORY_DENIED = ("memfd_create", "memfd_secret", "shmget")

# Calls whose first argument is a target pid: none may act on pid 1 (the pool's server outlives every run).
PID1_DENIED = ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr")
# setpriority/ioprio_set: (which, who, ...); by group or user they reach pid 1 too, so those are denied at all.
PRIO_DENIED_WHICH = {"setpriority": (1, 2), "ioprio_set": (2, 3)}  # PRIO_PGRP, PRIO_USER; IOPRIO_WHO_PGRP, _USER
# Socket families the sandbox may open (all scoped by its network namespace); any other is EAFNOSUPPORT.
SOCKET_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
LOW32 = 0xFFFFFFFF  # the kernel reads an int argument from the low 32 bits of its register

# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
CLONE_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)


@functools.cache
def filter_bpf(cgroup: bool = True) -> bytes:
    """The compiled filter (classic BPF, as ``bwrap --seccomp`` reads it); raises OSError/ImportError if unbuildable.

    ``cgroup``: the sandbox runs in a memory cgroup; without one, :data:`MEMORY_DENIED` fail with ENOMEM.
    """
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED:
        f.add_rule(sc.ERRNO(errno.EPERM), name)
    if not cgroup:
        for name in MEMORY_DENIED:
            f.add_rule(sc.ERRNO(errno.ENOMEM), name)
    for flag in CLONE_NS_FLAGS:
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    _protect_pid1(sc, f)
    _socket_families(sc, f)
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        return tmp.read()


def _protect_pid1(sc: Any, f: Any) -> None:
    """No call may change pid 1's rlimits, priority, CPUs or I/O class (see the module docstring)."""
    deny = sc.ERRNO(errno.EPERM)
    for name in PID1_DENIED:
        f.add_rule(deny, name, sc.Arg(0, sc.MASKED_EQ, LOW32, 1))
    for name, whiches in PRIO_DENIED_WHICH.items():
        f.add_rule(deny, name, sc.Arg(1, sc.MASKED_EQ, LOW32, 1))
        for which in whiches:
            f.add_rule(deny, name, sc.Arg(0, sc.MASKED_EQ, LOW32, which))


def _socket_families(sc: Any, f: Any) -> None:
    """``socket``/``socketpair`` of a family outside :data:`SOCKET_FAMILIES`: EAFNOSUPPORT.

    Families below the largest allowed one are refused one by one; the rest by ``>=``, compared on all 64
    bits, so a value whose high bits are set (the kernel would read only the low 32) is refused too.
    """
    refuse = sc.ERRNO(errno.EAFNOSUPPORT)
    top = max(SOCKET_FAMILIES)
    for name in ("socket", "socketpair"):
        for family in range(top):
            if family not in SOCKET_FAMILIES:
                f.add_rule(refuse, name, sc.Arg(0, sc.EQ, family))
        f.add_rule(refuse, name, sc.Arg(0, sc.GT, top))


def seccomp_problem() -> str | None:
    """None when the filter can be built here, else why not."""
    try:
        filter_bpf(cgroup=False)
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        return f"the seccomp filter cannot be built ({exc}); pip install pyseccomp and apt-get install libseccomp2"
    return None


def filter_fd(cgroup: bool = True) -> int:
    """A fresh memfd holding the filter, positioned at its start (the caller passes it to bwrap, then closes it)."""
    fd = os.memfd_create("tirl-seccomp", os.MFD_CLOEXEC)
    data = filter_bpf(cgroup)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
