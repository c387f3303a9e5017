"""Checkpoint: the net effect of a :class:`PendingState` applied in one database transaction.

Order inside the transaction: body updates of database rows (also of rows removed after
the update, so their history keeps the body they had), removals of database rows
(history recorded by ``delete_rows``), purges, subscription deletes and inserts, durable
acks (newest per subscription and priority), then topic elision (memory adds every
subscription has acknowledged), the bulk insert of the surviving adds, history rows for
elided messages, and finally the journal position. Position and effects commit together,
so replay after a crash is exactly-once.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from journal.format import Position
from journal.state import ElidedRow, PendingState, history_copy
from mqstore.db import LOCK_NOT_AVAILABLE, ByteaArray, sqlstate
from mqstore.schema import StoreSchema
from mqstore.store.model import Ack, Outcome, Removal, StoredMessage
from mqstore.store.postgres import PostgresStore

__all__ = [
    "CheckpointResult",
    "apply_checkpoint",
    "position_after_failure",
    "read_position",
    "settled_position",
]

log = logging.getLogger(__name__)

_CHUNK = 5000


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """What one checkpoint wrote."""

    written: int
    elided: int
    #: Of ``elided``: topic messages every subscription had acknowledged (what the plain
    #: store's ``cleanup`` deletes as rows; see ``JournaledStore.cleanup``).
    cleaned: int
    deleted: int
    acks: int
    millis: float


def read_position(pg: PostgresStore, journal_id: str) -> Position | None:
    """The checkpoint position stored for ``journal_id``, if any."""
    j = pg.schema.journal
    query = sa.select(j.c.segment, j.c.position).where(j.c.journal_id == journal_id)
    row = pg.read(lambda conn: conn.execute(query).first())
    return Position(int(row[0]), int(row[1])) if row else None


def stored_position(conn: Connection, schema: StoreSchema, journal_id: str) -> Position | None:
    """The checkpoint position stored for ``journal_id``, read on ``conn``: None when there
    is none, or no journal table (a database only ActiveMQ used, not yet adopted)."""
    if not sa.inspect(conn).has_table(schema.journal.name):
        return None
    j = schema.journal.c
    query = sa.select(j.segment, j.position).where(j.journal_id == journal_id)
    row = conn.execute(query).first()
    return Position(int(row[0]), int(row[1])) if row else None


def settled_position(pg: PostgresStore, journal_id: str) -> tuple[Position | None, int]:
    """The checkpoint position stored for ``journal_id`` once no transaction still writes
    it, and the highest ID in the database then (see ``PostgresStore.advance_sequence``).

    SIGKILL ends a process, not the COMMIT of a checkpoint the server already has: a run
    killed while checkpointing can commit after the next start read the position. It holds
    the journal's row from its last statement (the position) until it ends, so this waits
    for it. Read before, the position would replay what it wrote (consumed rows came back)
    and the IDs would not cover its rows.
    """
    return _settled(
        pg,
        journal_id,
        "journal %s: a checkpoint transaction of an earlier run (one killed while "
        "checkpointing?) still writes its position in the database; start-up waits "
        "until it ends. If it never does, end that session with pg_terminate_backend "
        "(see pg_stat_activity): the journal still holds what it writes",
    )


def position_after_failure(pg: PostgresStore, journal_id: str) -> Position | None:
    """The checkpoint position stored for ``journal_id`` once no transaction still writes
    it: read after a checkpoint of this run reported a failure.

    A checkpoint whose connection died after its COMMIT was sent may still be committing
    on the server, holding the journal's row. Read before it ends, the older position
    would have the next checkpoint write that window again: a message consumed since
    would come back as a row, elided messages would get a second history row, the rest
    would fail on duplicate keys.
    """
    return _settled(
        pg,
        journal_id,
        "journal %s: the checkpoint that reported a failure may still be committing: its "
        "transaction still holds the journal's row in the database, and the next checkpoint "
        "waits until it ends. If it never does, end that session with pg_terminate_backend "
        "(see pg_stat_activity): the journal still holds what it writes",
    )[0]


def _settled(pg: PostgresStore, journal_id: str, waiting: str) -> tuple[Position | None, int]:
    """Position and last ID, read once no transaction holds the journal's row; ``waiting``
    is logged (with the journal id) when one does."""
    j = pg.schema.journal
    query = sa.select(j.c.segment, j.c.position).where(j.c.journal_id == journal_id)

    def read(conn: Connection) -> tuple[Position | None, int]:
        try:
            row = conn.execute(query.with_for_update(read=True, nowait=True)).first()
        except OperationalError as exc:
            if sqlstate(exc) != LOCK_NOT_AVAILABLE:
                raise
            conn.rollback()
            log.warning(waiting, journal_id)
            row = conn.execute(query.with_for_update(read=True)).first()
        last_id = int(conn.execute(pg.sql.last_sequence).scalar_one())
        conn.rollback()
        return (Position(int(row[0]), int(row[1])) if row else None), last_id

    return pg.read(read)


def _write_position(
    conn: Connection, pg: PostgresStore, journal_id: str, position: Position, broker: str | None
) -> None:
    j = pg.schema.journal
    values = {
        "journal_id": journal_id,
        "segment": position.segment,
        "position": position.offset,
        "broker_name": broker,
        "updated_at": int(time.time() * 1000),
    }
    stmt = pg_insert(j).values(**values)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[j.c.journal_id],
            set_={
                k: stmt.excluded[k] for k in ("segment", "position", "broker_name", "updated_at")
            },
        )
    )


def _purge_rows(conn: Connection, pg: PostgresStore, container: str, outcome: Outcome) -> int:
    """Delete every visible row of a container, in chunks, with history."""
    m = pg.schema.msgs.c
    total = 0
    while True:
        ids = (
            conn.execute(
                sa.select(m.id)
                .where(m.container == container, m.xid.is_(None))
                .order_by(m.id)
                .limit(_CHUNK)
            )
            .scalars()
            .all()
        )
        if not ids:
            return total
        total += pg.delete_rows(conn, [Removal(container, i, outcome) for i in ids])


def _topic_floors(
    conn: Connection, pg: PostgresStore, topics: list[str]
) -> dict[tuple[str, int | None], int]:
    """The lowest LAST_ACKED_ID over a topic's subscriptions: per (topic, priority) when
    prioritized; per (topic, None) in a plain store, whose subscriptions are at the least
    LAST_ACKED_ID of their rows whatever the priority (as its reads and cleanup count)."""
    if not topics:
        return {}
    a = pg.schema.acks.c
    keys = [a.container, a.priority] if pg.prioritized else [a.container]
    rows = conn.execute(
        sa.select(*keys, sa.func.min(a.last_acked_id))
        .where(a.container.in_(topics), a.priority < 10)
        .group_by(*keys)
    ).all()
    if pg.prioritized:
        return {(r[0], int(r[1])): int(r[2]) for r in rows if r[2] is not None}
    return {(r[0], None): int(r[1]) for r in rows if r[1] is not None}


def _write_history(conn: Connection, pg: PostgresStore, rows: list[ElidedRow]) -> None:
    """History rows of elided messages, as one statement over arrays per chunk."""
    bodies = pg.history_bodies
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start : start + _CHUNK]
        msgs = [r.message for r in chunk]
        conn.execute(
            pg.sql.insert_history,
            {
                "ids": [m.id for m in msgs],
                "containers": [m.container for m in msgs],
                "prods": [m.msgid_prod for m in msgs],
                "seqs": [m.msgid_seq for m in msgs],
                "priorities": [m.priority for m in msgs],
                "expirations": [m.expiration for m in msgs],
                "removed": [r.removed_at for r in chunk],
                "outcomes": [r.outcome.value for r in chunk],
                "msgs": ByteaArray(m.msg for m in msgs) if bodies else [None] * len(msgs),
            },
        )


def _row(msg: StoredMessage) -> dict[str, object]:
    return {
        "id": msg.id,
        "container": msg.container,
        "msgid_prod": msg.msgid_prod,
        "msgid_seq": msg.msgid_seq,
        "expiration": msg.expiration,
        "priority": msg.priority,
        "msg": msg.msg,
        "xid": None,
    }


def apply_checkpoint(
    pg: PostgresStore,
    state: PendingState,
    *,
    journal_id: str,
    position: Position,
    broker_name: str | None = None,
) -> CheckpointResult:
    """Write the net effect of ``state`` and ``position`` in one transaction."""
    started = time.perf_counter()
    msgs, acks_t = pg.schema.msgs, pg.schema.acks
    now = int(time.time() * 1000)
    elided = list(state.elided)
    elided_count = state.elided_count
    deleted = cleaned = 0
    with pg.transaction() as conn:  # the store's write transaction: checks the lock, maps DB errors
        # Rows removed too get their last body first: their history rows keep it.
        bodies = {**state.removed_bodies, **state.updates}
        if bodies:
            conn.execute(
                sa.update(msgs)
                .where(msgs.c.id == sa.bindparam("b_id"), msgs.c.container == sa.bindparam("b_c"))
                .values(msg=sa.bindparam("b_msg")),
                [{"b_id": i, "b_c": c, "b_msg": body} for i, (c, body) in bodies.items()],
            )
        removals = [Removal(c, i, out) for i, (c, out, _) in state.removed.items()]
        for start in range(0, len(removals), _CHUNK):
            deleted += pg.delete_rows(conn, removals[start : start + _CHUNK])
        for container, (outcome, _) in state.purged.items():
            deleted += _purge_rows(conn, pg, container, outcome)
        for key in state.subs_deleted:
            a = acks_t.c
            conn.execute(
                sa.delete(acks_t).where(
                    a.container == key.container,
                    a.client_id == key.client_id,
                    a.sub_name == key.sub_name,
                )
            )
        sub_rows = [
            {
                "container": s.key.container,
                "client_id": s.key.client_id,
                "sub_name": s.key.sub_name,
                "selector": s.selector,
                "sub_dest": s.sub_dest or s.key.container,
                "last_acked_id": s.start,
                "priority": p,
            }
            for s in state.subs_added.values()
            for p in (range(10) if s.prioritized else (0,))
        ]
        if sub_rows:
            conn.execute(sa.insert(acks_t), sub_rows)
        pg.apply_acks(conn, [Ack(k, i, p) for (k, p), i in state.acks.items()])
        # Topic messages every subscription has acknowledged are never written.
        topics = sorted(c for c in state.container_of_live() if c.startswith("topic://"))
        floors = _topic_floors(conn, pg, topics)
        survivors: list[StoredMessage] = []
        by_id = sorted(state.adds.values(), key=lambda m: m.id)
        for msg in by_id:
            floor = floors.get((msg.container, msg.priority if pg.prioritized else None))
            if floor is not None and msg.id <= floor:
                elided_count += 1
                cleaned += 1
                if pg.history:
                    kept = history_copy(msg, pg.history_bodies)
                    elided.append(ElidedRow(kept, Outcome.ACKNOWLEDGED, now))
            else:
                survivors.append(msg)
        for start in range(0, len(survivors), _CHUNK):
            pg.insert_rows(conn, [_row(m) for m in survivors[start : start + _CHUNK]])
        if pg.history and elided:
            _write_history(conn, pg, elided)
        _write_position(conn, pg, journal_id, position, broker_name)
    return CheckpointResult(
        written=len(survivors),
        elided=elided_count,
        cleaned=cleaned,
        deleted=deleted,
        acks=len(state.acks),
        millis=(time.perf_counter() - started) * 1000,
    )


def group_ids(pairs: list[tuple[str, int]]) -> dict[str, list[int]]:
    """IDs grouped by container, keeping order."""
    out: dict[str, list[int]] = defaultdict(list)
    for container, i in pairs:
        out[container].append(i)
    return out
