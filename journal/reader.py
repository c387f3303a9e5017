"""Reading the log: frame walking, whole-log validation, torn-tail recovery and replay.

Torn tail vs. corruption: only the end of the *last* segment can hold a record that was
being written when the process or machine stopped, and such a record was never
acknowledged. In the last segment these are a torn tail and are truncated on open:

* an incomplete frame header, or a frame whose length runs past the end of the file;
* a frame that fits but has a bad CRC (or type) and only zero bytes, if any, after it;
* zero bytes (preallocated or zero-filled space) up to the end of the file;
* a last segment shorter than its header or with an all-zero header, or flagged to start
  with a seal and holding no valid record at all (crash while creating it).

The first two only when no valid record follows: a damaged length field makes a record in
the middle look like one that runs on, and the records after it were acknowledged.

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
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from journal.errors import (
    JournalCorruptError,
    JournalDecodeError,
    JournalError,
    JournalPositionError,
    JournalSegmentGoneError,
)
from journal.format import (
    FLAG_SEALS_PREVIOUS,
    FRAME_CRC,
    FRAME_HEAD,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    MAX_PAYLOAD,
    RECORD_PADDING,
    RECORD_TYPES,
    SEAL_FRAME_SIZE,
    Position,
    Seal,
    UnsupportedFormatError,
    decode_header,
    decode_seal,
    frame_crc,
    header_flags,
)
from journal.records import Op, decode_batch
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


@dataclass(frozen=True, slots=True)
class Frame:
    """One valid record in a segment: byte range, type and (unparsed) payload."""

    start: int
    end: int
    record_type: int
    payload: memoryview


@dataclass(frozen=True, slots=True)
class Damage:
    """The first invalid bytes of a segment (``torn``: qualifies as a torn tail; ``zeros``:
    only zero bytes from ``offset`` on, which past the last record is preallocated space)."""

    segment: int
    path: Path
    offset: int
    size: int
    reason: str
    torn: bool
    header: bool = False
    zeros: bool = False

    @property
    def free_space(self) -> bool:
        """Whether this is only the writer's zero-filled space after the last record."""
        return self.torn and self.zeros and not self.header

    @property
    def bytes_after(self) -> int:
        """Bytes from the damage to the end of the segment file."""
        return self.size - self.offset


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What ``Journal.open`` dropped from a torn tail (only unacknowledged writes)."""

    segment: int
    path: Path
    offset: int
    dropped_bytes: int
    reason: str
    removed_file: bool = False

    def __str__(self) -> str:
        what = "removed the segment file" if self.removed_file else f"truncated at {self.offset}"
        return (
            f"journal torn tail in {self.path}: {what}, dropped {self.dropped_bytes} "
            f"bytes ({self.reason}); only unacknowledged writes can be there"
        )


@dataclass(slots=True)
class SegmentScan:
    """Validation result of one segment."""

    number: int
    path: Path
    size: int
    records: int = 0
    first: Position | None = None
    last: Position | None = None
    end: Position | None = None
    damage: Damage | None = None
    seal: Seal | None = None  # the seal of the segment before, that this one starts with

    @property
    def data_start(self) -> int:
        """Where its records start: after the header and its seal, if any."""
        return HEADER_SIZE + (SEAL_FRAME_SIZE if self.seal is not None else 0)


@dataclass(slots=True)
class LogScan:
    """Validation result of a whole journal directory (stops at the first damage)."""

    segments: list[SegmentScan] = field(default_factory=list)
    damage: Damage | None = None
    unscanned: list[tuple[int, Path]] = field(default_factory=list)

    @property
    def end(self) -> Position | None:
        """End of the last valid record (header end of an empty last segment)."""
        for seg in reversed(self.segments):
            if seg.end is not None:
                return seg.end
        return None


#: Why a segment with a header and no record is damage when later segments follow: the
#: writer moves on to a new segment only once the active one holds a record, and ``repair``
#: puts a padding record into the segments it leaves empty.
EMPTY_SEGMENT = (
    "it holds no records, yet later segments follow (the writer never leaves a segment "
    "empty): its records were cut away, or an earlier repair left it empty"
)

#: Why a segment flagged to start with a seal but holding no valid record at all is, as
#: the last one, a segment whose creation a crash cut short (header and seal are written
#: in one write and synced before the segment is used) ...
UNSEALED = "its creation was cut short: the seal it starts with is missing"
#: ... unless the directory's ``newest`` names it, which is written only after that sync.
UNSEALED_CUT = (
    "cut to its header: the seal it starts with is missing, yet it was made whole (file "
    "'newest' names it): whatever records it held were cut away"
)


def read_seal(view: memoryview) -> Seal | None:
    """The seal a segment (its header valid) starts with, or None: not flagged to have one
    (earlier builds, the first segment, repair's stand-ins) or the seal is not there."""
    if not header_flags(view) & FLAG_SEALS_PREVIOUS:
        return None
    end = HEADER_SIZE + SEAL_FRAME_SIZE
    if len(view) < end:
        return None
    frame = next(iter(FrameWalker(view[:end])), None)
    if frame is None or frame.record_type != RECORD_PADDING:
        return None
    return decode_seal(frame.payload)


def unsealed(view: memoryview) -> bool:
    """Whether a valid header flagged to start with a seal has no valid record after it."""
    if not header_flags(view) & FLAG_SEALS_PREVIOUS or read_seal(view) is not None:
        return False
    return resync(view, HEADER_SIZE) is None


def next_seal(number: int, nxt: Path) -> Seal | None:
    """The seal of segment ``number`` that ``nxt``, the segment file after it, starts with:
    None when it has none (earlier builds, a stand-in), its header does not check out or
    names another segment, or the file is gone (released)."""
    try:
        with open(nxt, "rb") as f:
            view = memoryview(f.read(HEADER_SIZE + SEAL_FRAME_SIZE))
    except FileNotFoundError:
        return None
    try:
        if decode_header(view) != number + 1:
            return None
    except ValueError:
        return None
    seal = read_seal(view)
    return seal if seal is not None and seal.segment == number else None


def runs_on(view: memoryview, start: int, seal: Seal) -> int | None:
    """Where a segment's bytes run on past the end its ``seal`` records: the start of the
    first record from ``start`` that ends after it, else the sealed end itself; None when
    the segment is no longer than its seal says."""
    if len(view) <= seal.end:
        return None
    for frame in FrameWalker(view, start):
        if frame.end > seal.end:
            return frame.start
    return seal.end


def ran_on(number: int, path: Path, seal: Seal, at: int, view: memoryview) -> Damage:
    """Damage of segment ``number`` (``path``, its bytes ``view``) holding bytes from ``at``
    on past the end its ``seal`` records (see :func:`runs_on`): written after the writer
    moved on to the next segment, or the file was replaced by another copy, so what they
    hold is not in the log's order."""
    found = sum(1 for f in FrameWalker(view, at) if f.record_type != RECORD_PADDING)
    following = seal.segment + 1
    reason = (
        f"it runs on past its sealed end: the seal segment {following} starts with says it "
        f"ended at offset {seal.end} after {seal.records} record(s), yet {len(view) - at} "
        f"more bytes ({found} readable record(s)) follow from offset {at}. They were "
        f"written after the writer had moved on to segment {following}, or the file was "
        f"replaced by another copy: they are out of the log's order and are not replayed. "
        f"Keep a copy of {path.name} if they may matter; repair cuts them off"
    )
    return Damage(number, path, at, len(view), reason, torn=False)


def cut_short(seg: SegmentScan, seal: Seal) -> Damage | None:
    """Damage when ``seg``, read whole, ends before the ``seal`` the next segment starts
    with says it did: records cut away at a record boundary (a bad copy, a lost tail)."""
    if seal.segment != seg.number or seg.size >= seal.end:
        return None
    lost = seal.records - seg.records
    what = f"{lost} acknowledged record(s)" if lost > 0 else "acknowledged records"
    reason = (
        f"cut short: it ends at offset {seg.size} after {seg.records} record(s), but the "
        f"next segment's seal says it ended at {seal.end} after {seal.records}; {what} "
        f"({seal.end - seg.size} bytes) were cut away"
    )
    return Damage(seg.number, seg.path, seg.size, seg.size, reason, torn=False)


_TYPE_BYTE = re.compile(rb"[\x01\x02\x03]")


def _all_zero(view: memoryview) -> bool:
    return not bytes(view).strip(b"\x00")


def resync(view: memoryview, start: int) -> int | None:
    """Offset of the first valid frame at or after ``start``, or None."""
    data = bytes(view)
    for match in _TYPE_BYTE.finditer(data, start + FRAME_HEAD.size - 1):
        pos = match.start() - (FRAME_HEAD.size - 1)
        (length,) = FRAME_CRC.unpack_from(data, pos)
        end = pos + FRAME_OVERHEAD + length
        if end > len(data):
            continue
        (stored,) = FRAME_CRC.unpack_from(data, end - FRAME_CRC.size)
        head = view[pos : pos + FRAME_HEAD.size]
        if stored == frame_crc(head, view[pos + FRAME_HEAD.size : end - FRAME_CRC.size]):
            return pos
    return None


def _nothing_follows(view: memoryview, pos: int) -> bool:
    """Whether no valid frame starts after ``pos``: bad bytes there may be a torn write."""
    return resync(view, pos + 1) is None


class FrameWalker:
    """Iterate the valid frames of a segment's bytes; ``problem`` is set where it stops.

    ``problem`` is ``(offset, reason, torn_shaped)``; torn-shaped damage is a torn tail if
    the segment is the last one.
    """

    def __init__(self, view: memoryview, start: int = HEADER_SIZE) -> None:
        self.view = view
        self.start = start
        self.problem: tuple[int, str, bool] | None = None

    def __iter__(self) -> Iterator[Frame]:
        view, pos, size = self.view, self.start, len(self.view)
        while pos < size:
            if size - pos < FRAME_OVERHEAD:
                self.problem = (pos, f"incomplete record header ({size - pos} bytes)", True)
                return
            length, rtype = FRAME_HEAD.unpack_from(view, pos)
            end = pos + FRAME_OVERHEAD + length
            if length == 0 and rtype == 0 and _all_zero(view[pos:]):
                self.problem = (pos, f"{size - pos} zero bytes", True)
                return
            if end > size:
                runs_on = f"record of {length} bytes runs past end of file"
                self.problem = (pos, runs_on, _nothing_follows(view, pos))
                return
            reason = None
            if rtype not in RECORD_TYPES:
                reason = f"unknown record type {rtype}"
            elif length > MAX_PAYLOAD:
                reason = f"record length {length} exceeds the format limit"
            else:
                (stored,) = FRAME_CRC.unpack_from(view, end - FRAME_CRC.size)
                payload = view[pos + FRAME_HEAD.size : end - FRAME_CRC.size]
                if stored != frame_crc(view[pos : pos + FRAME_HEAD.size], payload):
                    reason = "record checksum (CRC32C) mismatch"
            if reason is not None:
                torn = _all_zero(view[end:]) and _nothing_follows(view, pos)
                self.problem = (pos, reason, torn)
                return
            yield Frame(pos, end, rtype, payload)
            pos = end


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
                zeros = _all_zero(view[offset:])
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
        torn = last and (size < HEADER_SIZE or _all_zero(view))
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
            damage.segment, damage.path, damage.offset, damage.bytes_after, damage.reason
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
