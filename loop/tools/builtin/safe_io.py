"""How the file tools open files: regular files only, checked before opening, never blocking.

``lstat`` before ``open``, ``O_NONBLOCK | O_NOFOLLOW``, then ``fstat`` must match the checked file
(no swap between check and open); reads are bounded whatever ``st_size`` says; writes refuse
files with several hard links.

Details: docs/internals/loop-tools.md
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from loop.tools.base import ToolError

MAX_FILE_BYTES = 5 * 1024 * 1024
OPEN_FLAGS = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1024 * 1024

_ERRNO_REASONS = {
    errno.ENOENT: "file not found",
    errno.ENOTDIR: "a parent of the path is not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ELOOP: "symbolic link loop (or a symbolic link swapped in)",
    errno.ENXIO: "not a regular file (no such device or address)",
    errno.EISDIR: "is a directory",
    errno.ENAMETOOLONG: "path too long",
    errno.ENOSPC: "no space left on device",
    errno.EROFS: "read-only file system",
    errno.EEXIST: "the file appeared while it was being created; try again",
}


def kind(mode: int) -> str:
    """What a ``st_mode`` names, in words."""
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symbolic link that does not resolve (a loop or too many levels)"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "special file"


def os_error(exc: OSError, shown: str) -> ToolError:
    """An ``OSError`` as a ``ToolError`` naming the workspace-relative path (never the real one)."""
    reason = _ERRNO_REASONS.get(exc.errno or 0) or exc.strerror or type(exc).__name__
    return ToolError(f"{reason}: {shown}")


def lstat(path: str, shown: str) -> os.stat_result | None:
    """``os.lstat(path)``, ``None`` if nothing is there."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_error(exc, shown) from None


def require_regular(st: os.stat_result, shown: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(
            f"not a regular file: {shown} is a {kind(st.st_mode)}; the file tools only read and "
            "write regular files"
        )


def require_single_link(st: os.stat_result, shown: str) -> None:
    if st.st_nlink > 1:
        raise ToolError(
            f"refused: {shown} has {st.st_nlink} hard links, and writing through one name changes "
            "the file under every other name, which may be outside the workspace"
        )


def require_size(size: int, shown: str) -> None:
    if size > MAX_FILE_BYTES:
        raise ToolError(f"file too large ({size} bytes, limit {MAX_FILE_BYTES}): {shown}")


@contextmanager
def opened(path: str, shown: str, flags: int, checked: os.stat_result | None) -> Iterator[int]:
    """A descriptor on ``path`` that is the regular file ``checked`` described (``None``: a file
    just created with ``O_CREAT | O_EXCL``)."""
    try:
        fd = os.open(path, flags | OPEN_FLAGS, 0o666)
    except OSError as exc:
        raise os_error(exc, shown) from None
    try:
        st = os.fstat(fd)
        require_regular(st, shown)
        if checked is not None and (st.st_dev, st.st_ino) != (checked.st_dev, checked.st_ino):
            raise ToolError(f"refused: {shown} was replaced while it was being opened; try again")
        if flags & (os.O_WRONLY | os.O_RDWR):
            require_single_link(st, shown)
        yield fd
    finally:
        os.close(fd)


def read_fd(fd: int, shown: str) -> bytes:
    """At most ``MAX_FILE_BYTES`` from ``fd`` (``ToolError`` if there is more)."""
    chunks: list[bytes] = []
    total = 0
    while total <= MAX_FILE_BYTES:
        try:
            chunk = os.read(fd, min(_CHUNK, MAX_FILE_BYTES + 1 - total))
        except OSError as exc:
            raise os_error(exc, shown) from None
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    require_size(total, shown)
    return b"".join(chunks)


def write_fd(fd: int, data: bytes, shown: str) -> None:
    """Replace the whole content of the file open on ``fd`` with ``data``."""
    try:
        os.ftruncate(fd, 0)
        view = memoryview(data)
        offset = 0
        while offset < len(view):
            offset += os.pwrite(fd, view[offset:], offset)
    except OSError as exc:
        raise os_error(exc, shown) from None


def read_regular(path: str, shown: str, st: os.stat_result) -> bytes:
    """The bytes of the regular file ``st`` describes (already checked by the caller)."""
    require_size(st.st_size, shown)
    with opened(path, shown, os.O_RDONLY, st) as fd:
        return read_fd(fd, shown)


def encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(f"{what} is not valid Unicode text (it holds a lone surrogate)") from None
