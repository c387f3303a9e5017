"""Which journals of a database a broker ran on and did not stop cleanly.

A journaled broker keeps what it acknowledged since its last checkpoint in its journal
alone. Its row in MQSTORE_JOURNAL has STOPPED_AT NULL while it runs (and after it died);
a clean stop, whose final checkpoint applied the whole journal, stamps it. A broker
starting on another journal, while such a row is unstamped, would lose those writes (a
journal directory on storage that did not survive a redeploy, say) or, once that journal
came back, apply them out of order: it is refused, until that journal is started again or
its loss accepted (:func:`forget`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from journal.format import Position
from mqstore.schema import StoreSchema

__all__ = ["UnfinishedJournal", "forget", "mark_running", "mark_stopped", "unfinished"]


@dataclass(frozen=True)
class UnfinishedJournal:
    """A journal whose broker did not stop cleanly."""

    journal_id: str
    broker_name: str | None
    checkpoint: Position
    checkpointed_at_ms: int

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.checkpointed_at_ms / 1000))
        return (
            f"journal {self.journal_id} of broker {self.broker_name or '?'} (last checkpoint "
            f"{self.checkpoint} at {when})"
        )


def unfinished(conn: Connection, schema: StoreSchema, other_than: str) -> list[UnfinishedJournal]:
    """The journals but ``other_than`` whose broker did not stop cleanly."""
    j = schema.journal.c
    rows = conn.execute(
        sa.select(j.journal_id, j.broker_name, j.segment, j.position, j.updated_at)
        .where(j.stopped_at.is_(None), j.journal_id != other_than)
        .order_by(j.updated_at)
    ).all()
    return [
        UnfinishedJournal(
            r.journal_id, r.broker_name, Position(r.segment, r.position), r.updated_at
        )
        for r in rows
    ]


def mark_running(
    conn: Connection, schema: StoreSchema, journal_id: str, start: Position, broker: str | None
) -> None:
    """A broker runs on ``journal_id``: its row (made at ``start``, which replays the whole
    log, when it has none yet) is no longer stamped as stopped."""
    j = schema.journal
    stmt = pg_insert(j).values(
        journal_id=journal_id,
        segment=start.segment,
        position=start.offset,
        broker_name=broker,
        updated_at=int(time.time() * 1000),
        stopped_at=None,
    )
    conn.execute(
        stmt.on_conflict_do_update(index_elements=[j.c.journal_id], set_={"stopped_at": None})
    )


def mark_stopped(conn: Connection, schema: StoreSchema, journal_id: str) -> None:
    """The broker on ``journal_id`` stopped with the whole journal applied."""
    j = schema.journal
    conn.execute(
        sa.update(j).where(j.c.journal_id == journal_id).values(stopped_at=int(time.time() * 1000))
    )


def stopped_at(conn: Connection, schema: StoreSchema, journal_id: str) -> int | None:
    """When the broker on ``journal_id`` stopped (ms since the epoch), as its row records:
    None while it runs or has no row."""
    j = schema.journal.c
    row = conn.execute(sa.select(j.stopped_at).where(j.journal_id == journal_id)).first()
    return None if row is None or row[0] is None else int(row[0])


def forget(conn: Connection, schema: StoreSchema, journal_id: str) -> bool:
    """Accept the loss of what ``journal_id`` held beyond its last checkpoint: stamp it as
    stopped (if it comes back, a start on it still replays it). False if it had no
    unstamped row."""
    j = schema.journal
    result = conn.execute(
        sa.update(j)
        .where(j.c.journal_id == journal_id, j.c.stopped_at.is_(None))
        .values(stopped_at=int(time.time() * 1000))
    )
    return result.rowcount == 1
