"""Walk a directory tree that an attacker built, without recursion and with two descriptors open.

Standard library only: the warm pool's fork server (``_server.py``) runs this very source inside the
sandbox (its text is put in front of the server's), and the host uses it for workspaces.

:func:`empty_dir` removes everything below a directory; :func:`restore_tree` hands a tree back to
its owner and strips set-id, sticky and group/world-write bits. Both work on a tree of any depth (a
3000-level tree breaks ``shutil.rmtree`` and ``os.walk`` with RecursionError, and a path that long
exceeds PATH_MAX): every step is relative to the directory descriptor of the level above, and going
back up opens ``..``. Symbolic links are never followed, by a chmod either: each one goes through an
``O_PATH | O_NOFOLLOW`` descriptor of the entry and only if it is still the inode that was lstat-ed
(:func:`_chmod_entry`), so an entry swapped for a link to a host file after its lstat leaves that file
alone (the hand-back of a workspace runs as root). Directories without read or search permission are
opened after a chmod (the walker owns them, or is root).

Not covered: a tree that changes while it is walked beyond that (an entry swapped after its lstat is
skipped or stops the walk with an ``OSError``, not walked). The callers first kill every process that
could change it (the run is over).
"""

import os
import stat

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_ENTRY = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class TreeTooLarge(Exception):
    """The walk met more entries than its budget allowed."""


def _chmod_entry(fd, name, mode, st=None):
    """Set the mode of entry ``name`` of directory ``fd``, never through a link; False when left alone.

    ``os.chmod`` by name follows a link (Python 3.11 has no no-follow chmod on Linux), so the entry is
    opened with ``O_PATH | O_NOFOLLOW`` and changed through ``/proc/self/fd`` only if it is not a link
    and, given ``st`` (its earlier lstat), still that inode.
    """
    entry = os.open(name, _O_ENTRY, dir_fd=fd)
    try:
        now = os.fstat(entry)
        if stat.S_ISLNK(now.st_mode) or (st is not None and (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)):
            return False
        os.chmod(f"/proc/self/fd/{entry}", mode)
        return True
    finally:
        os.close(entry)


def _open_sub(fd, name):
    try:
        return os.open(name, _O_DIR, dir_fd=fd)
    except PermissionError:
        _chmod_entry(fd, name, 0o700)  # not through a link; a link then fails the open (O_NOFOLLOW)
        return os.open(name, _O_DIR, dir_fd=fd)


def _scan(fd, visit, budget):
    """Call ``visit(fd, name, lstat)`` for each entry; return the directories to descend into."""
    subdirs = []
    for entry in list(os.scandir(fd)):
        budget[0] -= 1
        if budget[0] < 0:
            raise TreeTooLarge(f"more than {budget[1]} entries")
        st = entry.stat(follow_symlinks=False)
        if visit(fd, entry.name, st):
            subdirs.append(entry.name)
    return subdirs


def walk(path, visit, leave=None, max_entries=10_000_000):
    """Depth first below ``path``, iteratively.

    ``visit(dir_fd, name, lstat)`` for every entry, a directory before its content (return True to
    descend into it); ``leave(dir_fd, name)`` after a directory's content. Raises
    :class:`TreeTooLarge` past ``max_entries`` entries.
    """
    budget = [max_entries, max_entries]
    cur = os.open(path, _O_DIR)
    try:
        frames = [(None, _scan(cur, visit, budget))]
        while frames:
            name, pending = frames[-1]
            if pending:
                sub = pending.pop()
                child = _open_sub(cur, sub)
                os.close(cur)
                cur = child
                frames.append((sub, _scan(cur, visit, budget)))
                continue
            frames.pop()
            if not frames:
                break
            parent = os.open("..", _O_DIR, dir_fd=cur)
            os.close(cur)
            cur = parent
            if leave is not None:
                leave(cur, name)
    finally:
        os.close(cur)


def empty_dir(path, max_entries=10_000_000):
    """Remove everything below ``path`` (``path`` itself stays)."""

    def visit(fd, name, st):
        if stat.S_ISDIR(st.st_mode):
            if st.st_mode & 0o700 != 0o700:
                _chmod_entry(fd, name, 0o700, st)  # swapped for a link since: the descent's open refuses it
            return True
        os.unlink(name, dir_fd=fd)
        return False

    def leave(fd, name):
        os.rmdir(name, dir_fd=fd)

    try:
        os.chmod(path, 0o755)
    except OSError:
        pass
    walk(path, visit, leave, max_entries)


_STRIP = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH


def restore_tree(path, owner=None, strip=True, max_entries=10_000_000):
    """Give ``path`` and everything below it to ``owner`` (uid, gid; None: leave the owner).

    With ``strip``, also clear the set-id, sticky and group/world-write bits of every file and directory.
    """

    def fix(fd, name, st):
        if owner is not None and (st.st_uid, st.st_gid) != owner:
            os.chown(name, owner[0], owner[1], dir_fd=fd, follow_symlinks=False)
        if strip and not stat.S_ISLNK(st.st_mode) and st.st_mode & _STRIP:
            _chmod_entry(fd, name, stat.S_IMODE(st.st_mode) & ~_STRIP, st)
        return stat.S_ISDIR(st.st_mode)

    top = os.lstat(path)
    if owner is not None:
        os.lchown(path, owner[0], owner[1])
    if strip and top.st_mode & _STRIP:
        os.chmod(path, stat.S_IMODE(top.st_mode) & ~_STRIP)
    walk(path, fix, None, max_entries)
