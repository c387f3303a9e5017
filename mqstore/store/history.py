"""Retention of ``MQSTORE_HISTORY``: delete old rows in short transactions.

Every removal of a message writes a history row, so the table grows with the traffic. A
trim deletes the rows a :class:`TrimBound` allows, ``batch`` rows per transaction, so it
never holds many locks or one long transaction, and two trims running at once skip each
other's rows instead of waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from mqstore.statements import statements_for

#: The largest ``hist_id`` (BIGINT): no upper bound on the ids.
MAX_HIST_ID = 2**63 - 1
_DAY_MS = 86_400_000


@dataclass(frozen=True)
class TrimBound:
    """Which history rows may go: removed before ``before_ms`` (epoch ms) and with
    ``hist_id <= upto_hist_id``."""

    before_ms: int
    upto_hist_id: int = MAX_HIST_ID

    @classmethod
    def older_than(cls, days: float, now_ms: int | None = None) -> TrimBound:
        """Rows removed more than ``days`` ago."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return cls(before_ms=now - int(days * _DAY_MS))

    def narrowed(self, other: TrimBound) -> TrimBound:
        """Rows both bounds allow."""
        return TrimBound(
            min(self.before_ms, other.before_ms), min(self.upto_hist_id, other.upto_hist_id)
        )

    def params(self) -> dict[str, int]:
        return {"before": self.before_ms, "upto": self.upto_hist_id}


def count_trimmable(engine: Engine, prefix: str, bound: TrimBound) -> int:
    """How many history rows a trim with ``bound`` would delete now."""
    with engine.connect() as conn:
        stmt = statements_for(prefix).count_trimmable_history
        return int(conn.execute(stmt, bound.params()).scalar_one())


def trim_history(
    engine: Engine,
    prefix: str,
    bound: TrimBound,
    *,
    batch: int = 10_000,
    stop: threading.Event | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete the history rows ``bound`` allows, ``batch`` per transaction; returns how many.

    Stops early, between transactions, once ``stop`` is set. ``progress`` is called with
    the rows deleted by each transaction.
    """
    if batch <= 0:
        raise ValueError(f"batch must be positive, got {batch}")
    stmt = statements_for(prefix).trim_history
    total = 0
    while stop is None or not stop.is_set():
        with engine.begin() as conn:
            deleted = int(conn.execute(stmt, {**bound.params(), "limit": batch}).scalar_one())
        total += deleted
        if progress is not None and deleted:
            progress(deleted)
        if deleted < batch:
            break
    return total


__all__ = ["MAX_HIST_ID", "TrimBound", "count_trimmable", "trim_history"]
