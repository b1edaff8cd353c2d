"""Content hashes of --hash paths (files or whole folders), bounded in bytes and time.

"sha256 HEX (N files, SIZE)" when done; "incomplete: over 1 GiB after 812 files (1 GiB
read)" when a bound is hit; "unreadable: ..." when the path cannot be read. Two nodes
holding the same tree get the same value, wherever the tree lies.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Iterator

from netcheck.core.bwtext import size_words
from netcheck.core.constants import HASH_MAX_BYTES, HASH_MAX_SECONDS
from netcheck.core.envfacts import UNREADABLE
from netcheck.core.errors import NetcheckError

CHUNK = 1 << 20
HASH_SKIP = ("__pycache__", ".git")   # differ between identical checkouts


def unreadable(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}"
    return f"{UNREADABLE}{error}"



class _BoundHit(NetcheckError):
    """Hashing stopped at the byte or time bound; the message says which."""


class _Budget:
    def __init__(self, max_bytes: int, max_seconds: float):
        self.max_bytes, self.max_seconds = max_bytes, max_seconds
        self.deadline = time.monotonic() + max_seconds
        self.read = 0
        self.files = 0

    def spend(self, n: int) -> None:
        self.read += n
        if self.read > self.max_bytes:
            raise _BoundHit(f"over {size_words(self.max_bytes)}")
        self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise _BoundHit(f"over {self.max_seconds:g} s")


def hash_path(path: str, max_bytes: int = HASH_MAX_BYTES,
              max_seconds: float = HASH_MAX_SECONDS) -> str:
    """sha256 of a file, or of a folder's sorted relative paths and their contents.

    "sha256 HEX (N files, SIZE)"; "incomplete: over 1 GiB after 812 files (1 GiB read)"
    when a bound is hit; "unreadable: ..." when the path cannot be read.
    """
    budget = _Budget(max_bytes, max_seconds)
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            return _folder_value(path, budget)
        if not stat.S_ISREG(st.st_mode):
            return unreadable(f"{path} is neither a regular file nor a folder")
        if st.st_size > max_bytes:
            size, limit = size_words(st.st_size), size_words(max_bytes)
            return f"incomplete: over {limit}: the file is {size}"
        digest = _hash_file(path, budget)
    except _BoundHit as bound:
        return f"incomplete: {bound} after {size_words(budget.read)} of the file"
    except OSError as e:
        return unreadable(e)
    return f"sha256 {digest} (1 file, {size_words(budget.read)})"


def _folder_value(path: str, budget: _Budget) -> str:
    os.scandir(path).close()   # an unlistable top folder is unreadable, not an empty hash
    try:
        digest, unread = _hash_folder(path, budget)
    except _BoundHit as bound:
        return f"incomplete: {bound} after {budget.files} files ({size_words(budget.read)} read)"
    tail = f"; {unread} unreadable" if unread else ""
    return f"sha256 {digest} ({budget.files} files, {size_words(budget.read)}{tail})"


def _hash_file(path: str, budget: _Budget) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            budget.spend(len(chunk))
            digest.update(chunk)
    return digest.hexdigest()


def _hash_folder(root: str, budget: _Budget) -> tuple[str, int]:
    """One line per entry (relative path, kind, content hash), in sorted walk order, hashed.

    Symbolic links are recorded by target, not followed; sockets, FIFOs and devices by
    kind only (reading a FIFO would block); HASH_SKIP folders are left out.
    """
    digest, unread = hashlib.sha256(), 0
    for rel, full in _walk(root, budget):
        entry = _entry(full, budget)
        unread += entry.startswith("unreadable")
        digest.update(f"{rel}\0{entry}\n".encode(errors="surrogateescape"))
    return digest.hexdigest(), unread


def _walk(root: str, budget: _Budget) -> Iterator[tuple[str, str | None]]:
    errors: list[OSError] = []
    for top, dirs, files in os.walk(root, onerror=errors.append):
        budget.check_time()
        dirs[:] = sorted(d for d in dirs if d not in HASH_SKIP)
        rel_top = os.path.relpath(top, root)
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(top, d))]):
            yield os.path.normpath(os.path.join(rel_top, name)), os.path.join(top, name)
        if not files and not dirs:
            yield rel_top + "/", top
    for e in errors:   # folders that could not be listed
        yield os.path.relpath(e.filename or root, root) + "/", None


def _entry(full: str | None, budget: _Budget) -> str:
    if full is None:
        return "unreadable folder"
    try:
        st = os.lstat(full)
        if stat.S_ISLNK(st.st_mode):
            return f"link {os.readlink(full)}"
        if stat.S_ISDIR(st.st_mode):
            return "empty folder"
        if not stat.S_ISREG(st.st_mode):
            return "special file"
        digest = _hash_file(full, budget)
        budget.files += 1   # whole files only: the bound message counts those
        return f"file {digest}"
    except OSError as e:
        return f"unreadable {type(e).__name__}"
