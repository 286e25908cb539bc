"""Whether a path the agent writes through is its own: no other user may plant or swap what it opens.

The spool replays what it finds with the sink's credentials and the file sink appends as the
agent's user (root, for a hand-made install): a spool planted by another user, or a symlink
planted where the file sink's file should be, must not be used. The rules:

- a directory the agent keeps files in (the spool's) is the agent's own: owned by its user,
  not a symlink, writable by nobody else (or only with the sticky bit, a tmpfs's 1777: then
  others may add files, never remove or rename the agent's, and each file is checked);
- a file the agent writes to is a regular file owned by its user, not a symlink (the file
  sink's ``follow_symlinks = true`` is the operator saying a symlink is meant), checked on
  the path and again on what was opened (a swap in between). Its directory may be writable
  by others (a Kubernetes emptyDir is 0777): whatever they rename or plant, what the agent
  writes to is its own file.

The shipped unit's ``/var/lib/gpuagent`` is a symlink into ``/var/lib/private``: only the
last component of each path is checked with lstat, so a symlinked state directory above the
agent's own directories is fine.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH  # group or others may write


def owner_name(uid: int) -> str:
    """A uid as a log line names it: "alice (uid 1000)", or "uid 1000" when it has no name."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def describe(path: Path, st: os.stat_result) -> str:
    return f"{path} (owner {owner_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o})"


def own_directory_problem(path: Path) -> str | None:
    """Why ``path`` (an existing directory the agent keeps files in) is not the agent's own, or None."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return f"{describe(path, st)} is a symlink, not a directory of the agent's own"
    if not stat.S_ISDIR(st.st_mode):
        return f"{describe(path, st)} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{describe(path, st)} is owned by another user than the agent's ({owner_name(os.geteuid())})"
    if st.st_mode & OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
        return f"{describe(path, st)} is writable by other users without the sticky bit"
    return None


def own_file_problem(path: Path, follow_symlinks: bool = False) -> str | None:
    """Why an existing ``path`` is not a regular file of the agent's own, or None (None too when absent)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        if not follow_symlinks:
            return f"{describe(path, st)} is a symlink (not followed)"
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"cannot read {path}: {exc.strerror or exc}"
    return opened_file_problem(path, st)


def opened_file_problem(path: Path, st: os.stat_result) -> str | None:
    """Why the file opened at ``path`` (its fstat) is not a regular file of the agent's own, or None.
    A character device (``/dev/null``, a terminal) is fine: no other user can make one."""
    if stat.S_ISCHR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        return f"{describe(path, st)} is not a regular file"
    if st.st_uid != os.geteuid():
        return f"{describe(path, st)} is owned by another user than the agent's ({owner_name(os.geteuid())})"
    return None
