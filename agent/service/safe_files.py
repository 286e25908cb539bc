"""One rule for the files the agent reads from, or writes into, places other users can write
(a 1777 jobs_dir, a 0777 Kubernetes emptyDir as the state directory).

Reading: opened without following a symlink and without blocking (``O_NOFOLLOW|O_NONBLOCK``:
a FIFO with no writer opens at once, a symlink to /dev/zero is refused), then the opened file's
fstat must say a regular file, owned by a user the caller trusts, of at most ``limit`` bytes;
at most ``limit + 1`` bytes are ever read (a file that grows while read is refused too). What
is refused raises :class:`Refused` with one line naming the file, its owner and why.

Writing (replace a file whole): the new content goes to a temporary file created exclusively
(``O_CREAT|O_EXCL|O_NOFOLLOW``, a random name: tempfile.mkstemp) in the target's directory,
which is renamed over the target. A symlink planted at the target or at a guessable temporary
name is never followed: rename replaces the link itself. A directory writable by others (a
0777 emptyDir, 1777) is fine when root or the agent's user owns it: what others plant there is
refused by readers (owned by them, not the agent). One of another user's is fine only where no
one else may write in it (root's `gpuagent health` writing into the unit's DynamicUser state
directory, mode 0700); another user's directory that others may write too is refused.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path

from gpuagent.service.ownership import OTHERS_WRITE, describe, owner_name

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


class Refused(ValueError):
    """A file the rule refuses; ``str()`` is one line naming it and why."""


def trusted_owners() -> frozenset[int]:
    """Root and the agent's own user: the owners whose files the agent trusts."""
    return frozenset({0, os.geteuid()})


def read_bounded(path: str | Path, limit: int, owners: Collection[int] | None = None) -> tuple[bytes, os.stat_result]:
    """(the file's bytes, its fstat), or Refused. ``owners``: the uids allowed to own it (None:
    any user's file, the caller judges by the owner it gets back). FileNotFoundError passes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{_lstat_described(path)} is a symlink (not followed)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise Refused(f"{describe(Path(path), st)} is {kind}, not a regular file")
        if owners is not None and st.st_uid not in owners:
            trusted = " or ".join(owner_name(u) for u in sorted(owners))
            raise Refused(f"{describe(Path(path), st)} is owned by another user than {trusted}")
        if st.st_size > limit:
            raise Refused(f"{describe(Path(path), st)} is over {limit} bytes")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise Refused(f"{describe(Path(path), st)} is over {limit} bytes (grew while read)")
        return data, st
    finally:
        os.close(fd)


def _lstat_described(path) -> str:
    try:
        return describe(Path(path), os.lstat(path))
    except OSError:
        return str(path)


def directory_problem(directory: str | Path) -> str | None:
    """Why the agent must not create files in ``directory`` (followed: the unit's state
    directory is a symlink into /var/lib/private), or None."""
    try:
        st = os.stat(directory)
    except OSError as exc:
        return f"cannot read {directory}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{describe(Path(directory), st)} is not a directory"
    if st.st_uid not in trusted_owners() and st.st_mode & OTHERS_WRITE:
        return f"{describe(Path(directory), st)} is another user's and writable by others"
    return None


def _umask() -> int:
    try:  # read, not set: os.umask() changes it for every thread while it is read
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def write_replace(path: str | Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` whole with ``data``, through an exclusively created temporary file in
    its directory; OSError (with the refusal as its strerror) when the directory is not the agent's."""
    path = Path(path)
    problem = directory_problem(path.parent)
    if problem:
        raise OSError(errno.EPERM, problem)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # O_EXCL|O_NOFOLLOW
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode & ~_umask())  # as open() would have made it (mkstemp: 0600)
            fh.write(data)
        os.replace(tmp, path)  # a symlink at path is replaced, never followed
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
