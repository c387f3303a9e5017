"""Reading the log: whole-log validation, torn-tail recovery and replay of its records.

Torn tail vs. corruption: only the end of the *last* segment can hold a record that was
being written when the process or machine stopped, and such a record was never
acknowledged. In the last segment these are a torn tail and are truncated on open:

* a frame that fits but has a bad CRC (or type), only zero bytes, if any, after it, and one
  of the 512-byte sectors it spans (aligned on file offsets) all zeros: a write a power loss
  or OS crash cut short, never synced. Without a zero sector it is a complete record damaged
  since (a process killed even with SIGKILL leaves its writes whole in the page cache), so
  it may have been acknowledged: corruption, refused and kept;
* zero bytes (preallocated or zero-filled space) up to the end of the file;
* a last segment shorter than its header or with an all-zero header, or flagged to start
  with a seal and holding no valid record at all (crash while creating it).

The first only when no valid record follows: a damaged length field makes a record in
the middle look like one that runs on, and the records after it were acknowledged.

A file ending inside a record (its header or its length running past the end) is never a
torn tail: the writer writes records only into space it zero-filled and synced first, so
no crash leaves that shape; the file was cut short since, and what was cut may have been
acknowledged. (A journal the sync policy ``never`` wrote, or an earlier build without that
rule, can show it after a crash too; ``repair`` cuts it.)

Anything else (a bad frame with valid-looking data after it, any bad frame in an earlier
segment, a bad segment header, a gap in segment numbers, an earlier segment holding no
record at all, a segment shorter than the seal the next segment starts with says it was,
or longer: bytes past its sealed end, written after the writer moved on or by another copy
of the file, are out of the log's order and are not replayed) is corruption: acknowledged
records may be affected, so :class:`~journal.errors.JournalCorruptError` is raised.

What seals cannot tell:

* The newest segment is sealed by nothing, so records cut away from its end at a record
  boundary go unnoticed, down to all of them: cut back to its header and seal, it is the
  same bytes a crash leaves right after the writer made it (header and seal are synced,
  then ``newest`` names it, before the record that did not fit in the segment before is
  written), and it opens as an empty newest segment. Only a position stored elsewhere
  shows such a loss: ``journal.store`` refuses a checkpoint position stored in the
  database that lies past the end of the log (the journal is behind the database);
  records acknowledged after the last checkpoint cannot be told lost.
* A segment followed by one not flagged to carry its seal (as builds before seals wrote
  every segment, and as repair creates its stand-ins) is sealed by nothing either: cut at
  a record boundary, it goes unnoticed, as before seals. A segment of an earlier build
  that this build wrote on and then moved on from is sealed by the one it made next.
  Journals mixing such segments with sealed ones open and replay as a whole.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from journal.errors import (
    JournalCorruptError,
    JournalDecodeError,
    JournalError,
    JournalPositionError,
    JournalSegmentGoneError,
)
from journal.format import (
    HEADER_SIZE,
    RECORD_PADDING,
    Position,
    UnsupportedFormatError,
    decode_header,
)
from journal.frames import Frame, FrameWalker, all_zero, resync
from journal.records import Op, decode_batch
from journal.scans import Damage, LogScan, RecoveryReport, SegmentScan
from journal.seals import (
    UNSEALED,
    UNSEALED_CUT,
    cut_short,
    next_seal,
    ran_on,
    read_seal,
    runs_on,
    unsealed,
)
from journal.segments import list_segments, read_newest

__all__ = [
    "Damage",
    "Frame",
    "FrameWalker",
    "LogScan",
    "RecoveryReport",
    "SegmentScan",
    "check_header",
    "cut_short",
    "next_seal",
    "ran_on",
    "read_records",
    "read_seal",
    "recover_tail",
    "resync",
    "runs_on",
    "scan_log",
    "unsealed",
]

log = logging.getLogger(__name__)

#: Why a segment with a header and no record is damage when later segments follow: the
#: writer moves on to a new segment only once the active one holds a record, and ``repair``
#: puts a padding record into the segments it leaves empty.
EMPTY_SEGMENT = (
    "it holds no records, yet later segments follow (the writer never leaves a segment "
    "empty): its records were cut away, or an earlier repair left it empty"
)


def _read(path: Path) -> memoryview:
    try:
        with open(path, "rb") as f:
            return memoryview(f.read())
    except FileNotFoundError:
        raise JournalSegmentGoneError(path) from None


def _released(directory: Path, number: int) -> bool:
    """Whether segment ``number``, gone while the log was read, was released by a writer
    running on it: segments after it remain and none before it."""
    try:
        left = [n for n, _ in list_segments(directory)]
    except FileNotFoundError:  # the directory itself is gone
        return False
    return bool(left) and left[0] > number


def scan_log(directory: Path, on_frame: Callable[[int, Frame], None] | None = None) -> LogScan:
    """Validate every segment of ``directory``, oldest first, stopping at the first damage.

    ``on_frame(segment_number, frame)`` is called for each valid record. Raises
    :class:`JournalError` for a segment written by an unsupported format version.
    """
    scan = LogScan()
    segments = list_segments(directory)
    prev: int | None = None
    for i, (number, path) in enumerate(segments):
        last = i == len(segments) - 1
        try:
            view = _read(path)
        except JournalSegmentGoneError:
            if not _released(directory, number):
                raise
            scan.segments.clear()  # released too: the log now starts after this one
            prev = None
            continue
        seg = SegmentScan(number, path, len(view))
        scan.segments.append(seg)
        if prev is not None and number != prev + 1:
            reason = f"gap in segment numbers: segment {prev} is followed by {number}"
            seg.damage = Damage(number, path, 0, len(view), reason, torn=False, header=True)
        else:
            seg.damage = check_header(number, path, view, last)
        if seg.damage is None and last and unsealed(view):
            if (read_newest(directory) or 0) < number:
                seg.damage = Damage(number, path, 0, len(view), UNSEALED, torn=True, header=True)
            else:
                seg.damage = Damage(number, path, HEADER_SIZE, len(view), UNSEALED_CUT, False)
        elif seg.damage is None:
            seg.seal = read_seal(view)
            before = scan.segments[-2] if len(scan.segments) > 1 else None
            cut = cut_short(before, seg.seal) if before and seg.seal else None
            if before is not None and cut is not None:  # the damage is in the one before
                scan.segments.pop()
                before.damage = scan.damage = cut
                scan.unscanned = segments[i:]
                break
            seg.end = Position(number, seg.data_start)
            # The seal the next segment starts with bounds this one: nothing past it counts.
            sealed = None if last else next_seal(number, segments[i + 1][1])
            limit = sealed.end if sealed is not None and sealed.end < len(view) else None
            overrun: int | None = None
            walker = FrameWalker(view, seg.data_start)
            for frame in walker:
                if limit is not None and frame.end > limit:
                    overrun = frame.start
                    break
                seg.records += 1
                seg.last = Position(number, frame.start)
                if seg.first is None:
                    seg.first = seg.last
                if on_frame is not None:
                    on_frame(number, frame)
            if overrun is None and limit is not None:
                at = _end_of(walker, seg)
                overrun = at if at >= limit else None  # else damage before the sealed end
            seg.end = Position(number, overrun if overrun is not None else _end_of(walker, seg))
            if sealed is not None and overrun is not None:
                seg.damage = ran_on(number, path, sealed, overrun, view)
            elif walker.problem is not None:
                offset, reason, torn = walker.problem
                zeros = all_zero(view[offset:])
                torn = torn and last
                seg.damage = Damage(number, path, offset, len(view), reason, torn, zeros=zeros)
            elif not seg.records and not last:
                empty = Damage(number, path, seg.data_start, len(view), EMPTY_SEGMENT, False)
                seg.damage = empty
        prev = number
        if seg.damage is not None:
            scan.damage = seg.damage
            scan.unscanned = segments[i + 1 :]
            break
    return scan


def _end_of(walker: FrameWalker, seg: SegmentScan) -> int:
    if walker.problem is not None:
        return walker.problem[0]
    return seg.size


def check_header(number: int, path: Path, view: memoryview, last: bool) -> Damage | None:
    size = len(view)
    try:
        found = decode_header(view[:HEADER_SIZE])
    except UnsupportedFormatError as exc:
        raise JournalError(
            f"journal segment {path} was written by another mqstore ({exc}): run the mqstore "
            "that wrote it, or a newer one; this one neither replays nor repairs it"
        ) from None
    except ValueError as exc:
        torn = last and (size < HEADER_SIZE or all_zero(view))
        return Damage(number, path, 0, size, str(exc), torn=torn, header=True)
    if found != number:
        reason = f"header says segment {found} but the file name says {number}"
        return Damage(number, path, 0, size, reason, torn=False, header=True)
    return None


def recover_tail(scan: LogScan) -> RecoveryReport | None:
    """Truncate a torn tail found by :func:`scan_log` (durably); raise on corruption.

    Returns the report of what was dropped, or ``None`` for a clean log.
    """
    damage = scan.damage
    if damage is None:
        return None
    if not damage.torn:
        raise JournalCorruptError(damage.path, damage.offset, damage.reason)
    if damage.header:
        damage.path.unlink()
        scan.segments.pop()
        report = RecoveryReport(
            damage.segment, damage.path, 0, damage.size, damage.reason, removed_file=True
        )
    else:
        fd = os.open(damage.path, os.O_WRONLY)
        try:
            os.ftruncate(fd, damage.offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        scan.segments[-1].size = damage.offset
        scan.segments[-1].damage = None
        report = RecoveryReport(
            damage.segment,
            damage.path,
            damage.offset,
            damage.bytes_after,
            damage.reason,
            free_space=damage.free_space,
        )
    scan.damage = None
    # Zero bytes past the last record are the writer's preallocated space, not lost data.
    log.log(logging.INFO if damage.free_space else logging.WARNING, "%s", report)
    return report


def read_records(
    directory: Path, after: Position | None = None, until: Position | None = None
) -> Iterator[tuple[Position, list[Op]]]:
    """Yield ``(end_position, ops)`` for each record ending after ``after``, in log order.

    ``after`` must be a record boundary (an end position returned by ``append``, or the
    header end of a segment) in an existing segment; ``until`` bounds the read (the writer
    passes its current end so concurrent appends are not read half-written). Raises
    :class:`JournalCorruptError` on damage and :class:`JournalError` if ``after`` points
    into a released segment.
    """
    segments = list_segments(directory)
    if after is not None:
        if not segments or after.segment < segments[0][0]:
            raise JournalError(
                f"journal position {after} is before the oldest segment in {directory}; "
                f"the records after it were released"
            )
        segments = [(n, p) for n, p in segments if n >= after.segment]
    for number, path in segments:
        if until is not None and number > until.segment:
            return
        view = _read(path)
        if until is not None and number == until.segment:
            view = view[: until.offset]
        damage = check_header(number, path, view, last=False)
        if damage is not None:
            raise JournalCorruptError(path, 0, damage.reason)
        skip_to = HEADER_SIZE
        if after is not None and number == after.segment:
            skip_to = after.offset
        walker = FrameWalker(view)
        boundary_ok = skip_to == HEADER_SIZE
        for frame in walker:
            if frame.end <= skip_to:
                boundary_ok = boundary_ok or frame.end == skip_to
                continue
            if frame.record_type == RECORD_PADDING and frame.start < skip_to:
                boundary_ok = True  # repair padded over records around ``after``: lost ones
                continue
            if not boundary_ok:
                raise JournalPositionError(f"journal position {after} is not a record boundary")
            if frame.record_type == RECORD_PADDING:
                continue
            try:
                ops = decode_batch(frame.payload)
            except JournalDecodeError as exc:
                raise JournalCorruptError(path, frame.start, f"undecodable record: {exc}") from None
            yield Position(number, frame.end), ops
        if walker.problem is not None:
            raise JournalCorruptError(path, walker.problem[0], walker.problem[1])
        # Past the end of a segment followed by others: repair cut it behind ``after``.
        cut = skip_to > len(view) and number != segments[-1][0]
        if not boundary_ok and not cut:
            raise JournalPositionError(f"journal position {after} is not a record boundary")
