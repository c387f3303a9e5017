"""Frames: the valid records of a segment's bytes, walked in order, and where they stop."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from journal.format import (
    FRAME_CRC,
    FRAME_HEAD,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    MAX_PAYLOAD,
    RECORD_TYPES,
    frame_crc,
)

__all__ = ["SECTOR_SIZE", "Frame", "FrameWalker", "all_zero", "resync", "zero_sector"]

#: The smallest unit a disk writes whole: a write torn by a power loss or an OS crash leaves
#: some of the 512-byte sectors (aligned on file offsets) it covers unwritten.
SECTOR_SIZE = 512


@dataclass(frozen=True, slots=True)
class Frame:
    """One valid record in a segment: byte range, type and (unparsed) payload."""

    start: int
    end: int
    record_type: int
    payload: memoryview


_TYPE_BYTE = re.compile(rb"[\x01\x02\x03]")


def all_zero(view: memoryview) -> bool:
    """Whether ``view`` holds only zero bytes."""
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


def zero_sector(view: memoryview, start: int, end: int) -> bool:
    """Whether a piece of bytes ``start..end`` within one 512-byte sector (aligned on file
    offsets) is all zeros: the mark of a write that did not reach the disk whole."""
    pos = start
    while pos < end:
        stop = min(end, (pos // SECTOR_SIZE + 1) * SECTOR_SIZE)
        if all_zero(view[pos:stop]):
            return True
        pos = stop
    return False


def _nothing_follows(view: memoryview, pos: int) -> bool:
    """Whether no valid frame starts after ``pos``: bad bytes there may be a torn write."""
    return resync(view, pos + 1) is None


class FrameWalker:
    """Iterate the valid frames of a segment's bytes; ``problem`` is set where it stops.

    ``problem`` is ``(offset, reason, torn_shaped)``; torn-shaped damage is a torn tail if
    the segment is the last one. A file ending inside a frame is never torn-shaped: the
    writer makes room durable (zero-filled, synced) before it writes a record into it, so
    only a file cut short afterwards ends inside one. A whole frame that does not check out
    is torn-shaped only with nothing but zeros after it and a zero sector inside it
    (:func:`zero_sector`): a write the process made lands whole in the page cache even if
    the process is killed, so only a power loss or OS crash tears one, before it was synced
    (acknowledged), leaving sectors of it unwritten. Without that mark, it is a complete
    record damaged since.
    """

    def __init__(self, view: memoryview, start: int = HEADER_SIZE) -> None:
        self.view = view
        self.start = start
        self.problem: tuple[int, str, bool] | None = None
        #: Where the frame at ``problem`` ends, when it fits in the data but does not check out.
        self.bad_end: int | None = None

    def __iter__(self) -> Iterator[Frame]:
        view, pos, size = self.view, self.start, len(self.view)
        while pos < size:
            if size - pos < FRAME_OVERHEAD:
                # Zeros are the writer's space ahead; anything else is a record cut short.
                cut = f"incomplete record header ({size - pos} bytes)"
                self.problem = (pos, cut, all_zero(view[pos:]))
                return
            length, rtype = FRAME_HEAD.unpack_from(view, pos)
            end = pos + FRAME_OVERHEAD + length
            if length == 0 and rtype == 0 and all_zero(view[pos:]):
                self.problem = (pos, f"{size - pos} zero bytes", True)
                return
            if end > size:
                # Never torn-shaped: the writer writes a record only into space it has
                # zero-filled and synced first (journal.writer), so no crash leaves the file
                # ending inside one; a file cut short since may have lost acknowledged ones.
                runs_on = f"record of {length} bytes runs past end of file"
                self.problem = (pos, runs_on, False)
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
                self.bad_end = end
                torn = (
                    zero_sector(view, pos, end)
                    and all_zero(view[end:])
                    and _nothing_follows(view, pos)
                )
                self.problem = (pos, reason, torn)
                return
            yield Frame(pos, end, rtype, payload)
            pos = end
