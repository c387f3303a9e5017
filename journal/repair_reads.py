"""What a repair reads from segment files: their bytes, and the seal a segment file starts with."""

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
from journal.frames import FrameWalker

__all__ = ["read_segment", "seal_frame", "seal_in"]


def read_segment(path: Path) -> memoryview:
    """The whole segment file ``path``."""
    with open(path, "rb") as f:
        return memoryview(f.read())


def seal_in(path: Path, number: int) -> Seal | None:
    """The seal of segment ``number`` that the segment file ``path`` (the next one) starts
    with, if any; also behind a damaged header, which is written again keeping it."""
    with open(path, "rb") as f:
        view = memoryview(f.read(HEADER_SIZE + SEAL_FRAME_SIZE))
    try:
        if decode_header(view) != number + 1 or not header_flags(view) & FLAG_SEALS_PREVIOUS:
            return None
    except ValueError:
        pass
    return seal_frame(view, number)


def seal_frame(view: memoryview, number: int) -> Seal | None:
    """The seal of segment ``number`` after the (maybe damaged) header in ``view``."""
    frame = next(iter(FrameWalker(view[: HEADER_SIZE + SEAL_FRAME_SIZE])), None)
    if frame is None or frame.record_type != RECORD_PADDING:
        return None
    seal = decode_seal(frame.payload)
    return seal if seal is not None and seal.segment == number else None
