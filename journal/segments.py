"""Segment files and the journal directory: naming, creation, lock, removal/archival.

Besides its segments the directory holds ``newest``: the number of the newest segment ever
created in it, written durably once that segment is. A segment of that number or below
that is missing at the end of the log was lost after it held acknowledged writes, which
the segments that remain cannot show.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from pathlib import Path
from types import TracebackType

from journal.errors import JournalFullError, JournalLockedError
from journal.format import (
    FLAG_SEALS_PREVIOUS,
    SEGMENT_NAME_RE,
    Seal,
    encode_header,
    encode_seal,
    segment_file_name,
)

__all__ = [
    "LOCK_FILE_NAME",
    "NEWEST_FILE_NAME",
    "DirectoryLock",
    "create_segment",
    "fsync_directory",
    "list_segments",
    "mark_newest",
    "missing_after",
    "read_newest",
    "remove_segments",
    "segment_path",
]

LOCK_FILE_NAME = "lock"
NEWEST_FILE_NAME = "newest"
#: The highest segment number a file name (16 digits) can hold.
MAX_SEGMENT = 10**16 - 1


def segment_path(directory: Path, number: int) -> Path:
    """Path of segment ``number`` in ``directory``."""
    return directory / segment_file_name(number)


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """Segments in ``directory`` as ``(number, path)``, oldest first; other files ignored."""
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            match = SEGMENT_NAME_RE.match(entry.name)
            if match and entry.is_file():
                found.append((int(match.group(1)), Path(entry.path)))
    found.sort()
    return found


def fsync_directory(directory: Path) -> None:
    """Make file creations, renames and removals in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_newest(directory: Path) -> int | None:
    """The newest segment number ``mark_newest`` recorded, or None (none recorded yet, as
    in a journal of an earlier version, or the file does not hold a segment number)."""
    try:
        text = (directory / NEWEST_FILE_NAME).read_text(encoding="ascii").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    if not text.isdigit() or len(text.lstrip("0")) > len(str(MAX_SEGMENT)):
        return None  # not a number, or not one a segment's file name could hold
    return int(text)


def missing_after(newest: int | None, last: int | None) -> range:
    """The segment numbers up to ``newest`` (as ``read_newest`` gives it) missing after
    ``last``, the newest segment left (None: none is left); empty when none is."""
    if newest is None or (last is not None and newest <= last):
        return range(0)
    return range(newest if last is None else last + 1, newest + 1)


def mark_newest(directory: Path, number: int) -> None:
    """Record durably that segment ``number`` exists (write, fsync, rename, fsync)."""
    tmp = directory / f"{NEWEST_FILE_NAME}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        data = f"{number}\n".encode("ascii")
        if os.write(fd, data) != len(data):
            raise OSError(errno.EIO, f"short write of {tmp}")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / NEWEST_FILE_NAME)
    fsync_directory(directory)


def create_segment(directory: Path, number: int, seal: Seal | None = None) -> int:
    """Create segment ``number`` with its header, durably; return a write descriptor.

    ``seal``, the seal of the segment before it, is written with the header (flagged
    ``FLAG_SEALS_PREVIOUS``) in the same write and sync. The header and the directory
    entry are fsynced before returning, so a segment that holds records always has a valid
    header (and its seal) after a crash; then ``newest`` records it.
    """
    path = segment_path(directory, number)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        if seal is None:
            header = encode_header(number)
        else:
            header = encode_header(number, FLAG_SEALS_PREVIOUS) + encode_seal(seal)
        if os.pwrite(fd, header, 0) != len(header):
            raise OSError(errno.EIO, f"short write of the header of {path}")
        os.fsync(fd)
        fsync_directory(directory)
        if (read_newest(directory) or 0) < number:
            mark_newest(directory, number)
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        if exc.errno == errno.ENOSPC:
            raise JournalFullError(f"no space left to create journal segment {path}") from exc
        raise
    return fd


def remove_segments(paths: list[Path], archive_dir: Path | None = None) -> None:
    """Delete segment files, or move them into ``archive_dir`` when it is given."""
    if not paths:
        return
    if archive_dir is not None:
        archive_dir.mkdir(parents=True, exist_ok=True)
        for path in paths:
            shutil.move(path, archive_dir / path.name)
        fsync_directory(archive_dir)
    else:
        for path in paths:
            path.unlink(missing_ok=True)
    fsync_directory(paths[0].parent)


class DirectoryLock:
    """Exclusive ``flock`` on ``DIR/lock``: one writer (or repair) per journal directory.

    ``flock`` locks belong to the open file description, so a second open in the same
    process conflicts too. The holder's pid is written into the file for the error message.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None

    def acquire(self) -> DirectoryLock:
        """Take the lock or raise :class:`JournalLockedError` naming the directory."""
        path = self.directory / LOCK_FILE_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise JournalLockedError(
                f"journal directory {self.directory} is locked by another process "
                f"(pid {holder}) or another open journal in this process; stop it first, "
                f"two writers must never share a journal"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock (closing the descriptor releases the flock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
