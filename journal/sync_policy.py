"""The journal's sync policy: when an append counts as durable."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["SyncPolicy"]

_BATCH_RE = re.compile(r"^batch:(\d+(?:\.\d+)?)(ms)?$")


@dataclass(frozen=True, slots=True)
class SyncPolicy:
    """When ``append`` makes a record durable.

    * ``always`` (default): ``append`` returns after ``fdatasync``; concurrent appends share
      one sync (group commit). No acknowledged record is lost on power failure.
    * ``batch:N`` / ``batch:Nms``: ``append`` returns after the write to the OS; a background
      thread syncs every N milliseconds. A process crash loses nothing (the data is in the
      page cache); a power failure or kernel crash can lose acknowledged records written in
      the last N ms plus one sync duration.
    * ``never``: no sync except at rotation and close. For tests and benchmarks only.
    """

    mode: Literal["always", "batch", "never"]
    interval_ms: float = 0.0

    @classmethod
    def parse(cls, text: str) -> SyncPolicy:
        """Parse ``"always"``, ``"never"``, ``"batch:5"`` or ``"batch:5ms"``."""
        value = text.strip().lower()
        if value in ("always", "never"):
            return cls(value)  # type: ignore[arg-type]
        match = _BATCH_RE.match(value)
        if match and float(match.group(1)) > 0:
            return cls("batch", float(match.group(1)))
        raise ValueError(
            f"invalid journal sync policy {text!r}: use 'always', 'batch:<ms>' (e.g. "
            f"'batch:5ms') or 'never'"
        )

    def __str__(self) -> str:
        return f"batch:{self.interval_ms:g}ms" if self.mode == "batch" else self.mode
