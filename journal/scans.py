"""What validating a log finds: each segment's scan, the damage where it stops, and what
recovery of a torn tail dropped."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from journal.format import HEADER_SIZE, SEAL_FRAME_SIZE, Position, Seal

__all__ = ["Damage", "LogScan", "RecoveryReport", "SegmentScan"]


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
    """What ``Journal.open`` dropped from a torn tail: the writer's zero-filled space
    (``free_space``), or bytes shaped like a write a crash cut short before it was synced,
    which damage done since could look like too."""

    segment: int
    path: Path
    offset: int
    dropped_bytes: int
    reason: str
    removed_file: bool = False
    free_space: bool = False

    def __str__(self) -> str:
        what = "removed the segment file" if self.removed_file else f"truncated at {self.offset}"
        if self.free_space:
            why = "the writer's zero-filled space after its last record, no record in it"
        else:
            why = (
                "shaped like a write a crash cut short before it was synced, never "
                "acknowledged; if the file was damaged since instead, acknowledged records "
                "were in it"
            )
        return (
            f"journal torn tail in {self.path}: {what}, dropped {self.dropped_bytes} "
            f"bytes ({self.reason}): {why}"
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
