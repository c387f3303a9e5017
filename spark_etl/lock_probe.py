"""Whether a row-lock master holds ``ACTIVEMQ_LOCK``: a probe from the driver, over psycopg.

ActiveMQ's default locker (``DefaultDatabaseLocker``) keeps the lock row locked ``FOR
UPDATE`` in a transaction open for the master's life, and mqstore's ``--lock row`` keeps it
``FOR NO KEY UPDATE``. Neither writes anything other sessions see: BROKER_NAME and TIME
look free. Only trying to lock the row tells.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from mqstore import db
from mqstore.errors import ConfigError
from mqstore.schema import build_schema

from .sources import _libpq_url

#: Tries before a refused row lock counts as a master's: a lease write or another tool's
#: probe holds the row for milliseconds, a row-lock master for as long as it is master.
ATTEMPTS = 3
#: Pause between two tries, in seconds.
PAUSE_S = 0.1
#: Longest wait for the table-level lock (one a migration's ``ALTER TABLE`` holds); the row
#: itself is never waited for.
TABLE_WAIT_MS = 1000

_INSUFFICIENT_PRIVILEGE = "42501"
_READ_ONLY = "25006"


@dataclass(frozen=True)
class RowLockProbe:
    """What the probe found: ``held`` True or False, or None with ``error`` saying why it
    could not tell."""

    held: bool | None
    error: str | None = None


class _UnprobedError(Exception):
    """The probe could not tell; the message says why and what to do."""


def probe_row_lock(
    dsn: str, prefix: str = "", *, attempts: int = ATTEMPTS, pause_s: float = PAUSE_S
) -> RowLockProbe:
    """Whether a database session keeps the lock row (ID=1) of ``prefix`` locked.

    Each try is one short transaction, rolled back at once: ``SELECT ... FOR SHARE NOWAIT``
    on the row. ``FOR SHARE`` is the mode to probe with because it conflicts with both
    masters' locks (``FOR UPDATE``, ``FOR NO KEY UPDATE``) yet not with the locks brokers
    take on that row while they write: mqstore's writes and journal checkpoints hold it
    ``FOR SHARE`` or ``FOR KEY SHARE`` (some ``NOWAIT``), which a ``FOR NO KEY UPDATE``
    probe would refuse or make fail. ``NOWAIT`` means the probe never queues behind a
    holder, so it delays no broker; a lease renewal (an ``UPDATE``) that comes in the
    instant the probe holds the row waits for that instant only. Only a row refused on
    every one of ``attempts`` tries, ``pause_s`` apart, counts as held, so a lease write
    or another probe caught in flight is not taken for a master.

    A role that may not lock the row (it needs UPDATE privilege on the table), a read-only
    session (``default_transaction_read_only``, a hot standby) or a failed connection gives
    ``held=None`` and an ``error`` saying so: the probe never guesses.
    """
    lock = build_schema(prefix).lock
    try:
        engine = db.create_engine(_libpq_url(dsn), pool_size=1)
    except ConfigError as exc:
        return RowLockProbe(None, str(exc))
    try:
        with engine.connect() as conn:
            for attempt in range(attempts):
                if attempt:
                    time.sleep(pause_s)
                if not _row_locked(conn, lock):
                    return RowLockProbe(False)
        return RowLockProbe(True)
    except _UnprobedError as exc:
        return RowLockProbe(None, str(exc))
    except DBAPIError as exc:
        return RowLockProbe(None, _why(exc, engine.url, lock.name))
    finally:
        engine.dispose()


def _row_locked(conn: Connection, lock: sa.Table) -> bool:
    """One try: True when another session holds the row in a mode ``FOR SHARE`` conflicts
    with. The transaction is rolled back before this returns, whatever happened."""
    xact = conn.begin()
    try:
        conn.execute(sa.text(f"SET LOCAL lock_timeout = {TABLE_WAIT_MS}"))
        try:  # the table-level lock first, so that a refusal below is the row's
            conn.execute(sa.select(lock.c.id).where(sa.false()).with_for_update(read=True))
        except DBAPIError as exc:
            if db.sqlstate(exc) != db.LOCK_NOT_AVAILABLE:
                raise
            raise _UnprobedError(
                f"another session holds the table {lock.name} (a migration or maintenance): "
                "run the audit again when it is done, or use `mqstore lock status`"
            ) from None
        row = sa.select(lock.c.id).where(lock.c.id == 1)
        try:
            conn.execute(row.with_for_update(read=True, nowait=True))
        except DBAPIError as exc:
            if db.sqlstate(exc) == db.LOCK_NOT_AVAILABLE:
                return True
            raise
        return False
    finally:  # gives the row back; a connection that broke ends its session, and its lock
        with contextlib.suppress(SQLAlchemyError):
            xact.rollback()


def _why(exc: DBAPIError, url: URL, table: str) -> str:
    """One line on why the row could not be probed, and what to do."""
    state = db.sqlstate(exc)
    if state in (_INSUFFICIENT_PRIVILEGE, _READ_ONLY):
        raw = str(exc.orig or exc).strip().splitlines()
        detail = raw[0] if raw else type(exc).__name__
        return (
            f"cannot tell whether a row-lock master holds {table}: this session may not lock "
            f"its row ({detail}); locking it FOR SHARE for an instant needs UPDATE privilege "
            f"on {table} and a read-write session on the primary, or run `mqstore lock status`"
        )
    return (
        f"cannot tell whether a row-lock master holds {table}: "
        f"{db.describe_connect_error(exc, url)}"
    )


__all__ = ["ATTEMPTS", "PAUSE_S", "TABLE_WAIT_MS", "RowLockProbe", "probe_row_lock"]
