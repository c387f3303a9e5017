"""The lock row (ID=1 of ACTIVEMQ_LOCK) as stored: who holds it and until when."""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mqstore.errors import LockError
from mqstore.schema import StoreSchema


@dataclass(frozen=True)
class LockStatus:
    """The lock row as stored: who holds the lease and until when (epoch ms)."""

    broker_name: str | None
    time: int | None

    def live(self, now_ms: int | None = None) -> bool:
        """Whether a broker holds the lease now."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        return self.broker_name is not None and self.time is not None and self.time >= now_ms

    def describe(self, now_ms: int | None = None) -> str:
        """A sentence for logs and the CLI."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        if self.broker_name is None:
            return "free"
        if self.time is not None and self.time < now_ms:
            return f"lease of {self.broker_name} expired {now_ms - self.time} ms ago"
        left = (self.time or 0) - now_ms
        return f"held by {self.broker_name} for another {left} ms"


def find_lock(conn: Connection, schema: StoreSchema) -> LockStatus | None:
    """Read the lock row (ID=1), or None when it was deleted."""
    row = conn.execute(
        sa.select(schema.lock.c.broker_name, schema.lock.c.time).where(schema.lock.c.id == 1)
    ).first()
    return None if row is None else LockStatus(row.broker_name, row.time)


def read_lock(conn: Connection, schema: StoreSchema) -> LockStatus:
    """Read the lock row (ID=1); :class:`LockError` saying how to restore it when it is gone."""
    status = find_lock(conn, schema)
    if status is None:
        raise LockError(f"{schema.lock.name} has no row ID=1: run `mqstore db upgrade`")
    return status
