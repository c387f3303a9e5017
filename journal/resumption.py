"""Where a journal goes on writing: its directory's log validated (a torn tail cut off) and
its last segment opened for writing, or its first one made."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from journal.errors import JournalTailMissingError
from journal.format import HEADER_SIZE
from journal.reader import recover_tail, scan_log
from journal.scans import RecoveryReport
from journal.segments import create_segment, mark_newest, missing_after, read_newest

__all__ = ["Resumption", "resume"]


@dataclass(frozen=True, slots=True)
class Resumption:
    """The active segment (``fd`` open for writing, its ``offset`` and ``records``), the
    sizes of the sealed segments before it, where each segment's records start, and what
    recovery dropped from a torn tail."""

    fd: int
    segment: int
    offset: int
    records: int
    sealed: dict[int, int]
    starts: dict[int, int]
    report: RecoveryReport | None


def resume(path: Path) -> Resumption:
    """Validate the log in ``path`` (locked by the caller) and open where it goes on.

    A torn tail is truncated; any other damage raises :class:`JournalCorruptError`, and
    segments missing after the last one :class:`JournalTailMissingError`.
    """
    scan = scan_log(path)
    report = recover_tail(scan)
    newest = read_newest(path)
    missing = missing_after(newest, scan.segments[-1].number if scan.segments else None)
    if missing:
        raise JournalTailMissingError(path, missing[0], missing[-1])
    if scan.segments:
        last = scan.segments[-1]
        fd = os.open(last.path, os.O_WRONLY | os.O_CLOEXEC)
        number, offset, records = last.number, last.size, last.records
        sealed = {s.number: s.size for s in scan.segments[:-1]}
        starts = {s.number: s.data_start for s in scan.segments}
        if newest is None or newest < number:  # a journal of an earlier version
            try:
                mark_newest(path, number)
            except BaseException:
                os.close(fd)  # the caller only unlocks the directory
                raise
    else:
        # Keep numbering monotonic if the only segment had a torn header.
        number = report.segment if report is not None else 1
        offset, records, sealed, starts = HEADER_SIZE, 0, {}, {number: HEADER_SIZE}
        fd = create_segment(path, number)
    return Resumption(fd, number, offset, records, sealed, starts, report)
