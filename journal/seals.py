"""Seals: the end and record count of a segment that the next segment starts with, and the
damage when a segment disagrees with its seal (cut short, or running on past it)."""

from __future__ import annotations

from pathlib import Path

from journal.format import (
    FLAG_SEALS_PREVIOUS,
    HEADER_SIZE,
    RECORD_PADDING,
    SEAL_FRAME_SIZE,
    Seal,
    decode_header,
    decode_seal,
    header_flags,
)
from journal.frames import FrameWalker, resync
from journal.scans import Damage, SegmentScan

__all__ = [
    "UNSEALED",
    "UNSEALED_CUT",
    "cut_short",
    "next_seal",
    "ran_on",
    "read_seal",
    "runs_on",
    "unsealed",
]


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
