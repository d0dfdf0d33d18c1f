"""The one way tirl writes an output file: atomically, through links and devices, never over an input.

:func:`atomic_write` is a context manager that yields a text (or binary)
file object. What the block writes appears at the target only if the block
finishes without an exception:

* a regular file (or a new path) is written to a uniquely named temporary
  file beside it, flushed, fsynced and renamed over the target; the directory
  is fsynced after the rename. The temporary name comes from
  :func:`tempfile.mkstemp`, so a user's ``X.tmp`` is never touched. An
  existing file keeps its permission bits; a new one gets ``0o666 & ~umask``.
* a symbolic link is followed: the file it points to is replaced (the link
  stays a link). A dangling link is written to its target path.
* a FIFO, character or block device (``/dev/null``, ``/dev/full``) is
  written into, never replaced; ``/dev/stdout``, ``/dev/stderr``,
  ``/dev/fd/N`` and ``/proc/self/fd/N`` are written to that descriptor
  (whatever it is: a pipe, a terminal, a redirected file): the text is collected in
  memory and written in one go when the block succeeds, so a failing command
  writes nothing there either. A device that refuses the write
  (``/dev/full``: no space) raises :class:`~tirl.errors.OutputError`.
* a directory, a socket, or a path whose parent is a file (``file.txt/out``)
  is refused with :class:`~tirl.errors.OutputError` before anything runs.

:func:`check_output` runs the same checks without writing (call it before a
long job, so that a bad ``--out`` fails in the first second, not after
training), and :func:`refuse_overwrite` refuses an output that is one of the
command's inputs (``tirl filter X --kept X``).

:func:`staged_dir` is the same for a directory (a saved model, an export): the
block fills a new hidden directory beside the target, and only a block that
finishes is renamed into place, so an interrupted write leaves no partial
directory. An existing one is replaced by one atomic exchange on Linux (see
its doc for the fallback elsewhere); :func:`clean_staged` tidies what a killed
process left beside the target.

Leftovers of a killed writer: every hidden entry tirl stages beside ``OUT`` carries its writer in its name
(``.OUT.w<pid>-<host>.XXXXXXXX``, ``.OUT.old.w<pid>-<host>.XXXXXXXX``, ``.OUT.w<pid>-<host>.XXXXXXXX.tmp``; the
host part hashes the machine's name and pid namespace). The next write of the same ``OUT``
(:func:`sweep_dead_writers`, from :func:`atomic_write` and :func:`staged_dir`) removes only such entries for
that name whose writer is provably dead (same host part, no process with that pid), puts a set-aside old
``OUT`` back when ``OUT`` is missing, and says on stderr what it did. Anything else beside ``OUT`` is never
touched: a user's ``.OUT.bak``, an entry of a writer still running (or of a reused pid) or written on
another machine (a ``note:`` names these two, with the command that removes them), and one left by a tirl
before this naming (``.OUT.XXXXXXXX``: it cannot be told from a user's file, so it is not named either).

Not covered: writes to network file systems without rename atomicity, and
outputs larger than memory for device targets.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import os
import re
import shlex
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tirl.errors import OutputError, describe, one_line


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _refuse(path: Path, problem: str, fix: str) -> OutputError:
    return OutputError(str(path), None, problem, fix)


def _existing_parent(path: Path, shown: Path | None = None) -> None:
    """Refuse a path whose nearest existing ancestor is not a directory, or is one this process cannot write in.

    The write creates its file (or its missing directories) there: a read-only directory or file system
    failed only when the output was written, after the work (a whole ``tirl sft``, a paid ``tirl review``).
    """
    for parent in path.parents:
        try:
            st = parent.stat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise _refuse(
                shown or path, f"its directory {parent} cannot be used ({exc.strerror})", "choose another path"
            ) from None
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse(shown or path, f"{parent} is a file, not a directory", "choose a path inside a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            why = "a read-only file system" if _read_only(parent) else "no permission to write there"
            raise _refuse(shown or path, f"cannot write in {parent} ({why})", "choose a writable directory")
        return


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


#: The fix of an output given as ``-`` where standard output takes the stream (:func:`check_output`).
STREAM_FIX = "give /dev/stdout to write it to standard output (the command's own lines go there too), or a file path"


def check_output(path: str | Path, *, option: str = "", dash_fix: str = STREAM_FIX) -> Path:
    """The path a write to ``path`` goes to (links followed), or :class:`OutputError` if it cannot be written.

    ``-`` is refused with ``dash_fix``: tirl reads no ``-`` as standard input and writes none as standard output
    (a file named ``-`` appeared in the current directory); ``/dev/stdout`` is written to the descriptor.
    ``option`` (``--out``) is named in that error, where ``-`` alone would not say which output it is.
    """
    target = Path(path)
    if str(path) == "":
        raise _refuse(target, "the output path is empty", "give a file path")
    if str(path) == "-":
        shown = f"{option} -" if option else "-"
        raise OutputError(shown, None, "is no file (tirl does not write '-' as standard output)", dash_fix)
    if str(path).endswith(os.sep):  # Path() drops the slash: "out/" was written as a file named out
        raise _refuse(target, "ends with '/', so it names a directory", f"give a file path, e.g. {path}out.jsonl")
    fd = fd_alias(target)
    if fd is not None:
        try:
            os.fstat(fd)
        except OSError:
            raise _refuse(target, f"file descriptor {fd} is not open", "open it in the shell, or give a file") from None
        return target
    real = Path(os.path.realpath(target))  # through symbolic links (dangling ones too)
    try:
        st = real.stat()
    except FileNotFoundError:
        _existing_parent(real, target)
        return real
    except OSError as exc:
        raise _refuse(target, f"cannot be written ({exc.strerror})", "choose another path") from None
    if stat.S_ISDIR(st.st_mode):
        raise _refuse(target, "is a directory", "give a file path, e.g. DIR/out.jsonl")
    if stat.S_ISSOCK(st.st_mode):
        raise _refuse(target, "is a socket", "give a file path")
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        if not os.access(real, os.W_OK):  # written into, not replaced: its own permission counts
            raise _refuse(target, "cannot be written (no permission)", "choose another path")
        return real
    _existing_parent(real, target)  # a regular file is replaced by a rename in its directory
    return real


def _refuse_dash_dir(target: Path) -> None:
    """A directory output given as ``-`` (it made a directory named ``-``): no stream takes a directory."""
    if str(target) == "-":
        raise _refuse(target, "is no directory (tirl does not write '-' as standard output, and a directory "
                      "output cannot go to a stream)", "give a directory path")  # fmt: skip


def check_output_dir(path: str | Path, *, staged: bool = False) -> Path:
    """A directory tirl may write into (existing or creatable), or :class:`OutputError` — checked before a long job.

    An existing directory must take new entries (files are written into it); a missing one, or any with
    ``staged`` (written by :func:`staged_dir`: built beside it and renamed in), needs a writable parent.
    """
    target = Path(path)
    if str(path) == "":  # Path("") is the current directory
        raise _refuse(target, "the output directory is empty", "give a directory path")
    _refuse_dash_dir(target)
    real = Path(os.path.realpath(target))
    if real.exists() and not real.is_dir():
        raise _refuse(target, "exists and is not a directory", "give a directory path (it is created if missing)")
    if real.is_dir() and not staged:
        _existing_parent(real / "x", target)  # real itself: the files go in there
    else:
        _existing_parent(real, target)
    return real


def refuse_overwrite(output: str | Path | None, inputs: Iterable[str | Path | None], *, option: str = "") -> None:
    """Refuse an output path that is (or links to) one of the inputs; tirl never overwrites its input."""
    if output is None:
        return
    out = Path(os.path.realpath(output))
    for given in inputs:
        if given is None:
            continue
        if out == Path(os.path.realpath(given)):
            what = f"{option} " if option else ""
            raise _refuse(Path(output), f"{what}is also an input of this command", "write the output to another path")


_STD_STREAMS = {"/dev/stdout": 1, "/dev/stderr": 2}


def fd_alias(path: str | Path) -> int | None:
    """The descriptor that ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` or ``/proc/self/fd/N`` names, else None.

    Writes to these go to the descriptor itself (sharing its offset with ``print``), never to a reopened file.
    """
    text = os.path.abspath(path)
    if text in _STD_STREAMS:
        return _STD_STREAMS[text]
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        if text.startswith(prefix) and text[len(prefix) :].isdigit():
            return int(text[len(prefix) :])
    return None


def _is_special(real: Path) -> bool:
    try:
        mode = real.stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def _write_special(real: Path, data: bytes, shown: Path) -> None:
    alias = fd_alias(shown)
    try:
        if alias is not None:
            sys.stdout.flush()
            sys.stderr.flush()
        fd = alias if alias is not None else os.open(real, os.O_WRONLY)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            if alias is None:
                os.close(fd)
    except OSError as exc:
        raise _refuse(shown, f"could not be written ({exc.strerror or exc})", "choose another output path") from None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not sync directories; the rename is still atomic
    finally:
        os.close(fd)


def _make_parent(real: Path, shown: Path) -> None:
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refuse(shown, f"its directory cannot be created ({exc.strerror})", "choose another path") from None


@contextmanager
def atomic_write(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A file object whose contents appear at ``path`` only if the block succeeds (see the module doc)."""
    shown = Path(path)
    real = check_output(shown)
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', not {mode!r}")
    binary = mode == "wb"
    if fd_alias(shown) is not None or _is_special(real):
        buf: io.BytesIO | io.StringIO = io.BytesIO() if binary else io.StringIO()
        yield buf
        value = buf.getvalue()
        _write_special(real, value if isinstance(value, bytes) else value.encode("utf-8"), shown)
        return
    _make_parent(real, shown)
    try:
        old_mode = stat.S_IMODE(real.stat().st_mode)
    except OSError:
        old_mode = 0o666 & ~_umask()
    sweep_dead_writers(real)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_stage_prefix(real.name), suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise _refuse(
            shown, f"cannot create a file beside it ({exc.strerror})", "choose a writable directory"
        ) from None
    try:
        fh: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, old_mode)
        os.replace(tmp, real)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            raise _refuse(
                shown, f"could not be written ({exc.strerror})", "free space or choose another path"
            ) from None
        raise
    _fsync_dir(real.parent)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # linux/fs.h
# Errors that say "this kernel, C library or file system cannot exchange" (EPERM: a seccomp filter's answer).
_NO_EXCHANGE = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM}


def _exchange(a: Path, b: Path) -> bool:
    """Swap the entries ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``).

    False, with nothing changed, where this system or file system cannot (not Linux, a C library without
    ``renameat2``, a file system that refuses the flag: NFS, some FUSE ones); any other failure raises
    :class:`OSError`. Through ctypes: the standard library has no ``renameat2`` (nor any well-kept package).
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # only here: the module is imported by every command

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _remove(path: Path) -> None:
    """Remove ``path`` whatever it is (a link or a file is unlinked, never followed); errors are ignored."""
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _swap_in(tmp: Path, final: Path) -> None:
    """Put ``tmp`` at ``final`` and remove what was there, so that ``final`` is always one of them, whole.

    One ``renameat2(RENAME_EXCHANGE)`` where the system has it (the old one then sits at ``tmp``); elsewhere
    two renames (the old one into a new ``.NAME.old.*`` beside it, ``tmp`` onto ``final``), and when the
    second fails the old one is renamed back before the error is raised.
    """
    if _exchange(tmp, final):
        _remove(tmp)  # the old one: a kill before this leaves it as a hidden ``.NAME.*`` (clean_staged)
        return
    old = Path(tempfile.mkdtemp(prefix=_stage_prefix(final.name, old=True), dir=final.parent))
    try:
        os.replace(final, old / final.name)  # the old one moves into the empty directory, whole
    except BaseException:
        os.rmdir(old)
        raise
    try:
        os.replace(tmp, final)  # a kill before this returns leaves no final: clean_staged puts the old one back
    except BaseException as exc:
        if not os.path.lexists(tmp):  # it did move (an interrupt right after the rename): the new one is in place
            _remove(old)
            raise
        try:
            os.replace(old / final.name, final)
        except OSError as again:
            exc.add_note(f"the old {final.name} could not be put back ({again.strerror}): it is in {old}")
            raise
        os.rmdir(old)
        raise
    _remove(old)


@functools.cache
def host_tag() -> str:
    """8 hex digits naming this machine and pid namespace: a pid in a staged name is only checked where it ran."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}\0{namespace}".encode()).hexdigest()[:8]


def _stage_prefix(name: str, *, old: bool = False) -> str:
    """How a hidden entry tirl makes beside ``name`` starts: ``.NAME.w<pid>-<host>.`` (``.NAME.old.w…``)."""
    return f".{name}.{'old.' if old else ''}w{os.getpid()}-{host_tag()}."


# The rest of a staged name after ".NAME": tempfile's 8 random characters, ".tmp" for atomic_write's files.
_STAGED_TAIL = r"\.(?P<old>old\.)?w(?P<pid>[1-9][0-9]{0,8})-(?P<host>[0-9a-f]{8})\.[a-z0-9_]{8}(?:\.tmp)?"


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists here (one of another user, or a zombie, counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process, or no such pid to ask about: never judged dead
    return True


def _note(text: str) -> None:
    print(f"note: {one_line(text)}", file=sys.stderr)


def sweep_dead_writers(target: str | Path) -> None:
    """Remove what killed tirl writers of ``target`` left beside it; one ``note:`` line on stderr per entry.

    Only entries named ``.NAME.[old.]w<pid>-<host>.XXXXXXXX[.tmp]`` for ``target``'s own name are judged, and
    only where ``<host>`` is this machine and pid namespace and no process has that pid: a half-written
    staging directory or file is removed, and so is an old ``target`` swapped out but not yet removed; one
    set aside by a killed two-rename swap (``.NAME.old.*/NAME``) is put back when ``target`` is missing (the
    newest), else removed. Entries of a live pid (a writer running now, or a reused pid) and of another
    machine are left, with a note naming the command that removes them. Not covered: leftovers named before
    the writer was (``.NAME.XXXXXXXX``, as a user's file may be: left, unnamed); two machines with the same
    host name and pid namespace writing into one shared directory (the other's live writer looks dead here).
    """
    final = Path(target)
    ours = re.compile(re.escape(f".{final.name}") + _STAGED_TAIL)
    try:
        names = [n for n in os.listdir(final.parent) if n.startswith(f".{final.name}.")]
    except OSError:
        return  # no parent yet (or unreadable): the write itself says what is wrong
    found = [(m, final.parent / n) for n in names if (m := ours.fullmatch(n))]
    found.sort(key=lambda item: (item[0]["old"] is None, -_mtime(item[1])))  # set-aside olds first, newest first
    for match, path in found:
        pid, here = int(match["pid"]), match["host"] == host_tag()
        remove = f"once no tirl writes {final}, remove it: rm -r {shlex.quote(str(path))}"
        if not here or process_alive(pid):
            if pid != os.getpid():  # this process's own entry is a write under way (another thread)
                who = f"process {pid} is running" if here else "it was written on another machine or container"
                _note(f"left {path}: {who}; {remove}")
            continue
        aside = path / final.name
        if match["old"] and not os.path.lexists(final) and os.path.lexists(aside):
            try:
                os.rename(aside, final)
                os.rmdir(path)
            except OSError as exc:
                move = f"mv {shlex.quote(str(aside))} {shlex.quote(str(final))}"
                _note(f"{final} is missing: tirl process {pid}, killed, left the old one in {path}, which could "
                      f"not be put back ({exc.strerror}): {move}")  # fmt: skip
                continue
            _note(f"put back {final} from {path}: tirl process {pid} was killed after moving it aside")
            continue
        _remove(path)
        if os.path.lexists(path):
            _note(f"could not remove {path}, left by tirl process {pid} (killed): {remove}")
        else:
            _note(f"removed {path}: left by tirl process {pid}, killed while writing {final}")


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _publish_tree(root: Path) -> None:
    """Give every file and directory under ``root`` (and ``root``) a user's mode, and flush it to disk.

    The mode is what a new file of the user's gets: ``0o666 & ~umask`` (``0o777 & ~umask`` for a directory
    and for a file its owner may execute). Writers that stage through a temporary file leave ``0o600``
    (safetensors 0.8's ``save_file``: ``model.safetensors``, ``optimizer.safetensors``), ``mkdtemp`` ``0o700``;
    nothing tirl stages in a directory is meant to be private. Links are not followed.
    """
    umask = _umask()
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                fsync_file(path)  # first: a umask without the owner's read bit leaves a file it cannot open
                os.chmod(path, (0o777 if st.st_mode & stat.S_IXUSR else 0o666) & ~umask)
        _fsync_dir(Path(dirpath))
        os.chmod(dirpath, 0o777 & ~umask)


def clean_staged(target: str | Path, *, restore_only: bool = False) -> bool:
    """Tidy what a killed :func:`staged_dir` left beside ``target``; True when the old ``target`` was put back.

    A ``target`` that is missing while a ``.NAME.old.*/NAME`` is beside it (a kill between the two renames
    of the swap where the system cannot exchange) gets that one back, the newest if several. Then, unless
    ``restore_only``, every ``.NAME.*`` beside it is removed: half-filled staging directories and old ones
    swapped out but not yet removed. Only for ``target``'s one writer (under a lock): a :func:`staged_dir`
    block running in another process now would lose its directory.
    """
    final = Path(target)
    prefix = f".{final.name}."
    hidden = [p for p in final.parent.iterdir() if p.name.startswith(prefix)] if final.parent.is_dir() else []
    restored = False
    if not os.path.lexists(final):
        aside = [p / final.name for p in hidden if p.name.startswith(f"{prefix}old.")]
        aside = [p for p in aside if os.path.lexists(p)]
        if aside:
            back = max(aside, key=lambda p: p.parent.stat().st_mtime)
            os.rename(back, final)
            _fsync_dir(final.parent)
            back.parent.rmdir()  # empty now
            restored = True
    if not restore_only:
        for left in hidden:
            _remove(left)
    return restored


@contextmanager
def staged_dir(
    target: str | Path, *, replace: bool, fix: str = "give a path in a writable directory"
) -> Iterator[Path]:
    """A new directory beside ``target`` for the block to fill; it becomes ``target`` only if the block succeeds.

    The directory is a hidden sibling (``.NAME.*``, from :func:`tempfile.mkdtemp`: the same parent, so the
    same file system, and private while it is filled); on success every directory in it gets ``0o777 & ~umask``
    and every file ``0o666 & ~umask`` (``0o777 & ~umask`` if its owner may execute it), as a user's new files
    do, whatever mode the writer left (safetensors' ``0o600``); it is renamed to ``target`` and the parent is
    fsynced. An exception in the block removes it and leaves ``target`` as it
    was. The parent must exist (create it first if wanted); one that takes no new entry (read-only, ``/proc``,
    permissions) is an :class:`OutputError` that names ``target`` and ends with ``fix``.

    * ``replace=False`` (create-only): ``target`` must be missing or an empty directory (else
      :class:`OutputError` before the block runs); the rename onto it is one atomic step. A ``target`` that
      someone fills while the block runs makes the rename fail (:class:`OSError`), nothing is overwritten.
    * ``replace=True``: an existing ``target`` (whatever it is: a directory, a file, a link, which is
      replaced, never followed) is swapped with the new directory in one atomic step on Linux
      (``renameat2(RENAME_EXCHANGE)``: ext4, XFS, Btrfs, tmpfs, overlayfs), and the old one removed from its
      hidden name. At every instant ``target`` is the whole old directory or the whole new one, and a kill
      at any moment leaves one of them there (plus a hidden ``.NAME.*`` for :func:`clean_staged`).
      Where the exchange is refused (not Linux, NFS, some FUSE file systems) it is two renames: the old one
      moves whole into a new ``.NAME.old.*`` beside it, then the new one is renamed in. If that second
      rename fails, the old one is renamed back and the error raised (``target`` as it was); a *kill*
      between the two leaves no ``target`` and the old one as ``.NAME.old.*/NAME``, which
      :func:`clean_staged` puts back.

    Every file and directory the block wrote is fsynced before the rename (links are not followed), so what
    the rename publishes is on disk.

    Covered: exceptions (``KeyboardInterrupt`` too) and ``kill -9`` at any moment, as above. Not covered:
    power loss or a kernel crash before the parent's fsync may undo the swap (on a journaling file system
    such as ext4 or XFS it is not torn; elsewhere, no promise); a ``target`` on another file system than its
    parent (a mount point) cannot be renamed onto; two writers of the same ``target`` at once (with
    ``replace``, the later swap wins). A killed writer's leftovers are removed by the next write of ``target``
    once that writer is provably dead (:func:`sweep_dead_writers`), or by :func:`clean_staged`.
    """
    final = Path(target)
    _refuse_dash_dir(final)
    sweep_dead_writers(final)  # first: an old target set aside by a killed swap comes back before the check
    if not replace and final.exists() and (not final.is_dir() or any(final.iterdir())):
        raise _refuse(final, "exists and is not an empty directory", "give a new or empty directory")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=_stage_prefix(final.name), dir=final.parent))
    except OSError as exc:  # the parent is missing, or exists but takes no new entry
        problem = f"cannot write in {final.parent} ({exc.strerror or describe(exc)})"
        raise OutputError(str(final), None, problem, fix) from None
    try:
        yield tmp
        _publish_tree(tmp)  # mkdtemp's 0700 (and a writer's 0600) is for the build only
        if replace and os.path.lexists(final):
            _swap_in(tmp, final)
        else:
            os.rename(tmp, final)  # onto a missing or empty directory: atomic
    except BaseException:
        _remove(tmp)  # the new one (or, after an exchange, the old one: the new one is in place)
        raise
    _fsync_dir(final.parent)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` with :func:`atomic_write`."""
    with atomic_write(path) as fh:
        fh.write(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with :func:`atomic_write`."""
    with atomic_write(path, "wb") as fh:
        fh.write(data)


def fsync_file(path: str | Path) -> None:
    """Flush to disk a file that another library wrote (checkpoint shards) before it is renamed into place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = _fsync_dir
