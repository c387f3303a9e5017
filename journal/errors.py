"""Exceptions raised by the journal log layer.

The journal package is self-contained; mqstore may subclass or re-export these.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "JournalClosedError",
    "JournalCorruptError",
    "JournalDecodeError",
    "JournalError",
    "JournalFullError",
    "JournalLockedError",
    "JournalPositionError",
    "JournalRecordTooLargeError",
    "JournalSegmentGoneError",
    "JournalTailMissingError",
]


class JournalError(Exception):
    """Base class of every journal error."""


class JournalCorruptError(JournalError):
    """A record or segment that cannot be a torn tail is damaged.

    The journal refuses to open: acknowledged writes may be behind the damage, so
    silently dropping them is not allowed. ``repair`` cuts the damage out.
    """

    def __init__(self, segment: Path | str, offset: int, reason: str) -> None:
        self.segment = Path(segment)
        self.offset = offset
        self.reason = reason
        directory = self.segment.parent
        super().__init__(
            f"journal segment {self.segment} is corrupt at offset {offset}: {reason}. "
            f"The journal refuses to start. See what would be lost with "
            f"`mqstore journal repair --dry-run {directory}`, then, after reading it, run "
            f"`mqstore journal repair {directory}` to cut the damage out (the records after "
            f"it are kept where they can be read)."
        )

    def __reduce__(self) -> tuple[type[JournalCorruptError], tuple[Path, int, str]]:
        return (type(self), (self.segment, self.offset, self.reason))


class JournalDecodeError(JournalError, ValueError):
    """A payload (with a valid CRC) does not decode as a batch of operations."""


class JournalClosedError(JournalError):
    """The journal was closed (or failed) and cannot accept appends."""


class JournalFullError(JournalError):
    """The file system holding the journal is out of space; the record was not written."""


class JournalLockedError(JournalError):
    """Another process (or another open in this process) holds the journal directory lock."""


class JournalPositionError(JournalError):
    """A position to read after is not where a record of this journal ends."""


class JournalRecordTooLargeError(JournalError, ValueError):
    """A single record exceeds the hard size limit of the format."""


class JournalSegmentGoneError(JournalError):
    """A segment listed in the journal directory was gone when it was to be read."""

    def __init__(self, segment: Path | str) -> None:
        self.segment = Path(segment)
        super().__init__(
            f"journal segment {self.segment} was deleted while the journal was read (a "
            "broker running on the journal deletes segments behind each checkpoint; read "
            "again). If no broker runs on it, restore the file: the records after it cannot "
            "be replayed without it"
        )

    def __reduce__(self) -> tuple[type[JournalSegmentGoneError], tuple[Path]]:
        return (type(self), (self.segment,))


class JournalTailMissingError(JournalError):
    """The newest segment(s) the directory recorded creating are gone: the acknowledged
    writes they held cannot be replayed, and the segments left cannot show it."""

    def __init__(self, directory: Path | str, first: int, newest: int) -> None:
        self.directory = Path(directory)
        self.first = first
        self.newest = newest
        one = first == newest
        which = f"segment {first}" if one else f"segments {first} to {newest}"
        it = "it" if one else "them"
        super().__init__(
            f"journal {self.directory} is missing its newest {which} (its file "
            f"'newest' records that segment {newest} was made): the last writes the broker "
            f"acknowledged were in {it}, and the journal refuses to start without {it}. "
            f"Restore {it} into {self.directory}; or, accepting the loss, run "
            f"`mqstore journal repair {self.directory}`, which creates {it} again, empty."
        )

    def __reduce__(self) -> tuple[type[JournalTailMissingError], tuple[Path, int, int]]:
        return (type(self), (self.directory, self.first, self.newest))
