"""The report's files: where one cannot be written is found before the run, and each is
written whole or not at all.

Every output flag (--json, --exclude-file, --prom, --plot, --html, on every sub-command and
`netcheck report --html`) is checked by `problem` before anything runs (config.check_writable)
and written by `write_file` at the end (cli.emit). A regular file is written beside its target
under a temporary name and renamed over it, so a reader never sees half a report, and the
temporary file is removed whatever fails; a target that exists and is not a regular file
(/dev/null, /dev/stdout, a pipe) is written where it is, never replaced.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
import tempfile

TEMP_PREFIX = ".netcheck-"
TEMP_SUFFIX = ".tmp"
# chattr's flags (linux/fs.h): a file that is immutable or append-only cannot be replaced.
FS_IOC_GETFLAGS = 0x80086601   # _IOR('f', 1, long)
FS_IMMUTABLE_FL = 0x10
FS_APPEND_FL = 0x20
# A nameless file in the folder (open(2)'s O_TMPFILE) tries its write without leaving a name
# there; a file system without them answers one of these, and a named file is tried instead.
NO_TMPFILE = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)


def problem(path: str) -> str | None:
    """Why write_file could not write `path`, in words that follow the path, or None.

    Leaves nothing behind: whether the folder takes a new file is tried with a nameless one
    where the file system has them (it never appears in the folder), else with a temporary
    file removed at once. An existing target is checked as the rename will find it."""
    if not path:
        return "the path is empty"
    if path.endswith(os.sep) or os.path.isdir(path):
        return "is a folder: give the path of a file"
    folder = os.path.dirname(os.path.abspath(path))
    try:
        if not stat.S_ISDIR(os.stat(folder).st_mode):
            return f"{folder} is not a folder"
    except FileNotFoundError:
        return f"the folder {folder} does not exist"
    except OSError as e:
        return f"the folder {folder} cannot be reached ({_words(e)})"
    if _in_place(path):
        return None if os.access(path, os.W_OK) else "is not writable"
    trouble = _create_trouble(folder)
    if trouble is not None:
        return f"the folder {folder} takes no new file ({trouble})"
    return _replace_trouble(path, folder)


def write_file(path: str, data: str | bytes) -> None:
    """Write all or nothing: a half-written report is worse than none, and no temporary file
    stays beside the target after a failure (the OSError is the caller's to report)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data   # JSON and Prometheus' text are UTF-8
    if _in_place(path):
        _write_in_place(path, payload)
        return
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as out:
            # mkstemp makes the file private; a report is read by others (the node exporter).
            os.fchmod(out.fileno(), 0o666 & ~_umask())
            out.write(payload)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _in_place(path: str) -> bool:
    """A target that exists and is neither a regular file nor a folder (a device, a pipe,
    /dev/stdout): renaming over it would replace /dev/null itself."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _write_in_place(path: str, payload: bytes) -> None:
    # Non-blocking to open: a pipe nobody reads is an error (ENXIO), not a wait without end.
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(payload)
    finally:
        os.close(fd)


def _create_trouble(folder: str) -> str | None:
    """The OS's words for why `folder` takes no new file, or None; nothing is left in it."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        try:
            os.close(os.open(folder, tmpfile | os.O_WRONLY, 0o600))
            return None
        except OSError as e:
            if e.errno not in NO_TMPFILE:
                return _words(e)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX)
    except OSError as e:
        return _words(e)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    return None


def _replace_trouble(path: str, folder: str) -> str | None:
    """What stops the rename over an existing target: a sticky folder (/tmp) where the target
    is another user's, or a target made immutable or append-only (chattr +i, +a)."""
    try:
        target = os.lstat(path)
    except OSError:
        return None   # nothing there: the folder's test above speaks for it
    euid = os.geteuid()
    owner = os.stat(folder)
    if owner.st_mode & stat.S_ISVTX and euid not in (0, target.st_uid, owner.st_uid):
        return (f"it belongs to another user (uid {target.st_uid}) in the sticky folder {folder}, "
                "where only its owner may replace it")
    if stat.S_ISREG(target.st_mode) and _chattr_flags(path) & (FS_IMMUTABLE_FL | FS_APPEND_FL):
        return "it is immutable or append-only (lsattr shows i or a; chattr -i -a clears them)"
    return None


def _chattr_flags(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return 0   # unreadable: the write at the end will say
    try:
        flags = fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8))
        return int(struct.unpack("i", flags[:4])[0])
    except OSError:
        return 0   # a file system without these flags
    finally:
        os.close(fd)


def _words(error: OSError) -> str:
    return error.strerror or str(error)
