"""What an open journal reports about itself: counters since open and the shape of its log."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from journal.format import Position

__all__ = ["JournalStats"]


@dataclass(frozen=True, slots=True)
class JournalStats:
    """Counters since open, and the current shape of the log."""

    records_appended: int
    bytes_appended: int
    fsyncs: int
    position: Position
    durable_position: Position
    segments: int
    bytes_on_disk: int
    sync_policy: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (positions as text)."""
        data = asdict(self)
        data["position"] = str(self.position)
        data["durable_position"] = str(self.durable_position)
        return data
