"""The lock row (ID=1 of ACTIVEMQ_LOCK) as stored: who holds it and until when."""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from mqstore.db import LOCK_NOT_AVAILABLE, sqlstate
from mqstore.errors import LockError
from mqstore.lease_time import decode_lease_time, encode_lease_time
from mqstore.schema import StoreSchema


@dataclass(frozen=True)
class LockStatus:
    """The lock row: who holds the lease and until when (epoch ms), and whether that holder
    is a broker with a local journal, whose lease no other broker takes over
    (:mod:`mqstore.lease_time`)."""

    broker_name: str | None
    time: int | None
    journaled: bool = False

    @classmethod
    def stored(cls, broker_name: str | None, time: int | None) -> LockStatus:
        """The status of a row as stored (TIME decoded)."""
        end, journaled = decode_lease_time(time)
        return cls(broker_name, end, journaled)

    @property
    def stored_time(self) -> int | None:
        """TIME as stored in the row."""
        return None if self.time is None else encode_lease_time(self.time, journaled=self.journaled)

    def live(self, now_ms: int | None = None) -> bool:
        """Whether a broker holds the lease now: a journaled holder's is never over."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        if self.broker_name is None or self.time is None:
            return False
        return self.journaled or self.time >= now_ms

    def describe(self, now_ms: int | None = None) -> str:
        """A sentence for logs and the CLI."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        if self.broker_name is None:
            return "free"
        holder = f"{self.broker_name} (journaled)" if self.journaled else self.broker_name
        if self.time is not None and self.time < now_ms:
            if self.journaled:
                return (
                    f"held by {holder}, whose lease ran out {now_ms - self.time} ms ago and "
                    "is kept for its journal"
                )
            return f"lease of {holder} expired {now_ms - self.time} ms ago"
        left = (self.time or 0) - now_ms
        return f"held by {holder} for another {left} ms"


def journal_kept_advice(holder: str | None) -> str:
    """Why no other broker takes over a journaled holder's lease, and what frees it."""
    return (
        f"{holder} keeps a local journal, which may hold acknowledged writes the database "
        "lacks, so no other broker takes its lease over: it is free once that broker stops "
        "cleanly, or starts again on its journal and then stops; if that journal is lost for "
        "good, `mqstore journal forget JOURNAL_ID --yes` accepts the loss and frees the lease "
        "(`mqstore lock status` names the journal)"
    )


#: The database clock in epoch ms: the neutral clock to judge a lease written by another host.
_DATABASE_NOW_MS = sa.text("SELECT (extract(epoch FROM CURRENT_TIMESTAMP) * 1000)::bigint")

#: What :func:`describe_lock` says of a row-lock master.
ROW_LOCK_MASTER = (
    "held by a row-lock master (mqstore's --lock row or ActiveMQ's database locker): a "
    "database session keeps the row locked"
)


def database_now_ms(conn: Connection) -> int:
    """The database's clock (its transaction start) in epoch ms."""
    return int(conn.execute(_DATABASE_NOW_MS).scalar_one())


def find_lock(conn: Connection, schema: StoreSchema) -> LockStatus | None:
    """Read the lock row (ID=1), or None when it was deleted."""
    row = conn.execute(
        sa.select(schema.lock.c.broker_name, schema.lock.c.time).where(schema.lock.c.id == 1)
    ).first()
    return None if row is None else LockStatus.stored(row.broker_name, row.time)


def read_lock(conn: Connection, schema: StoreSchema) -> LockStatus:
    """Read the lock row (ID=1); :class:`LockError` saying how to restore it when it is gone."""
    status = find_lock(conn, schema)
    if status is None:
        raise LockError(f"{schema.lock.name} has no row ID=1: run `mqstore db upgrade`")
    return status


#: How long :func:`describe_lock` waits for the row: a lease write holds it for
#: milliseconds, a row-lock master for as long as it is master.
_PROBE_WAIT_MS = 1000


def _probe_row_lock(conn: Connection, schema: StoreSchema) -> bool | DBAPIError:
    """:func:`row_lock_held`'s probe; the refusal of a session that may not lock rows."""
    row = sa.select(schema.lock.c.id).where(schema.lock.c.id == 1)
    probe = conn.begin_nested()
    try:
        conn.execute(sa.text(f"SET LOCAL lock_timeout = {_PROBE_WAIT_MS}"))
        conn.execute(row.with_for_update(read=True))
    except DBAPIError as exc:
        if sqlstate(exc) == LOCK_NOT_AVAILABLE:
            return True
        if exc.connection_invalidated:
            raise
        return exc
    finally:  # gives back the row lock and the timeout, whatever the caller does next
        if probe.is_active:
            probe.rollback()
    return False


def row_lock_held(conn: Connection, schema: StoreSchema) -> bool | None:
    """Whether a database session keeps the lock row locked: the master of mqstore's
    ``--lock row`` or of ActiveMQ's default database locker, which write nothing into the
    row. Probed by locking it ``FOR SHARE`` (waiting up to a second) in a savepoint rolled
    back at once: that waits for their ``FOR UPDATE`` and ``FOR NO KEY UPDATE``, not for a
    lease master's write in flight, whose fence holds the row ``FOR SHARE`` too. None when
    the session may not lock rows (a read-only session or standby, or a role without UPDATE
    on the table) and so cannot tell (:func:`describe_lock` says which)."""
    held = _probe_row_lock(conn, schema)
    return None if isinstance(held, DBAPIError) else held


#: SQLSTATE of a write (a row lock is one) in a read-only transaction.
_READ_ONLY_TRANSACTION = "25006"


def _why_unseen(conn: Connection, schema: StoreSchema, refusal: DBAPIError) -> str:
    """Why a row lock cannot be seen, from the probe's refusal, and what shows it."""
    name = schema.lock.name
    if sqlstate(refusal) == _READ_ONLY_TRANSACTION:
        standby = conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar_one()
        where = (
            "this database is a hot standby, whose sessions are read-only"
            if standby
            else "this session is read-only (default_transaction_read_only, set for the "
            "role, the database or in the DSN's options)"
        )
        return (
            f"a row lock cannot be seen: {where}, and a read-only session may not lock "
            f"{name}'s row to probe it; run this against the primary, with a read-write "
            "session, to see one"
        )
    if sqlstate(refusal) == "42501":
        return (
            f"a row lock cannot be seen: this role may not lock {name}'s row to probe it "
            f"(locking a row takes UPDATE privilege on {name}): GRANT UPDATE ON {name} to "
            "it, or use a role that has it, to see one"
        )
    lines = str(refusal.orig).strip().splitlines()
    first = lines[0] if lines else type(refusal.orig).__name__
    return f"a row lock cannot be seen: the probe of {name}'s row was refused ({first})"


def describe_lock(conn: Connection, schema: StoreSchema) -> tuple[LockStatus, str]:
    """The lock row and a sentence saying who holds the lock: a live lease, a row lock held
    in an open transaction (a lease it does not record), both (two lock modes on one row),
    or free or expired."""
    status = read_lock(conn, schema)
    probed = _probe_row_lock(conn, schema)
    held = None if isinstance(probed, DBAPIError) else probed
    if status.live():
        if held:
            return status, (
                f"{status.describe()}, and {ROW_LOCK_MASTER} too: two lock modes at once; "
                "every broker sharing the lock must use the same one"
            )
        return status, status.describe()
    if held:
        return status, ROW_LOCK_MASTER
    unseen = f" ({_why_unseen(conn, schema, probed)})" if isinstance(probed, DBAPIError) else ""
    return status, status.describe() + unseen
