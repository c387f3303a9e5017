"""ActiveMQ's row-lock protocol (``DefaultDatabaseLocker``)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from mqstore.db import LOCK_NOT_AVAILABLE, describe_connect_error, sqlstate
from mqstore.errors import LockError, LockLostError
from mqstore.lock.locker import Renewal
from mqstore.lock.retries import RetryWarnings
from mqstore.lock.status import find_lock
from mqstore.schema import StoreSchema
from mqstore.statements import LOCK_SESSION_ALIVE

log = logging.getLogger(__name__)


class RowLocker:
    """ActiveMQ's default locker: a row lock held in a transaction for the master's life.

    The open transaction keeps VACUUM from removing dead rows (ACTIVEMQ_MSGS bloats), and a
    dead master's lock lasts until PostgreSQL notices its connection is gone. Use it only
    when the ActiveMQ brokers sharing the database use ``DefaultDatabaseLocker``.

    The master holds the row ``FOR NO KEY UPDATE``, which excludes every other locker
    (ActiveMQ's ``FOR UPDATE`` too) but lets its own write transactions hold it ``FOR KEY
    SHARE`` (see :meth:`fence`). A new master takes the row ``FOR UPDATE`` once, in a
    savepoint, before it starts: when the old master's lock session ended with one of its
    writes still open, the new master (ActiveMQ's as well) waits for that write to end.
    """

    def __init__(
        self,
        engine: Engine,
        schema: StoreSchema,
        holder: str,
        *,
        renew_ms: int = 5_000,
        poll_ms: int = 1_000,
    ) -> None:
        self.engine, self.schema, self.holder = engine, schema, holder
        self.renew_ms, self.poll_ms = renew_ms, poll_ms
        self._conn: Connection | None = None
        self._xact: str | None = None  # the lock transaction's id (xid8)
        self._mutex = threading.Lock()
        self._lost = ""

    @property
    def renew_interval_s(self) -> float:
        return self.renew_ms / 1000

    def acquire(self, stop: threading.Event) -> bool:
        lock = self.schema.lock
        row = sa.select(lock).where(lock.c.id == 1)
        retries, url = RetryWarnings(log), self.engine.url
        while not stop.is_set():
            conn: Connection | None = None
            try:
                # a database that refuses connections (restarting, say) is retried like any
                # other failure, as ActiveMQ's locker does: a standby never gives up on it
                conn = self.engine.connect()
                conn.execute(sa.text(f"SET lock_timeout = {int(self.poll_ms)}"))
                # the lock session stays idle in its transaction for the master's life: a
                # role's or server's idle_in_transaction_session_timeout would end it
                conn.execute(sa.text("SET idle_in_transaction_session_timeout = 0"))
                if conn.execute(row.with_for_update(key_share=True)).first() is None:
                    conn.close()
                    raise LockError(f"{lock.name} has no row ID=1: run `mqstore db upgrade`")
                taken = self._wait_for_writes(conn, row, stop)
            except SQLAlchemyError as exc:
                if conn is not None:
                    with contextlib.suppress(SQLAlchemyError):
                        conn.rollback()
                    conn.close()
                if not isinstance(exc, DBAPIError) or sqlstate(exc) != LOCK_NOT_AVAILABLE:
                    retries.failed("row lock attempt failed", describe_connect_error(exc, url))
                    stop.wait(self.poll_ms / 1000)
                continue
            if not taken:
                conn.rollback()
                conn.close()
                break
            live = self._live_lease(conn)
            if live:
                conn.rollback()
                conn.close()
                raise LockError(live)
            conn.execute(sa.text("SET lock_timeout = 0"))
            xact = conn.execute(sa.text("SELECT CAST(pg_current_xact_id() AS text)")).scalar_one()
            with self._mutex:
                self._conn, self._xact, self._lost = conn, str(xact), ""
            log.info("became master: row lock on %s", lock.name)
            return True
        return False

    def _live_lease(self, conn: Connection) -> str:
        """Why the row lock just taken does not make this broker master: the row holds a
        lease that has not run out (a lease master's, committed; a row-lock master's
        keep-alive is never committed), or "" when it does not."""
        found = find_lock(conn, self.schema)
        if found is None or not found.live():
            return ""
        return (
            f"the lock {self.schema.lock.name} is {found.describe()}, a lease, which a row "
            "lock does not keep out (its master would go on writing): every broker sharing "
            "the lock must use the same lock mode (--lock lease here, or ActiveMQ's "
            "database-locker there)"
        )

    @staticmethod
    def _wait_for_writes(conn: Connection, row: sa.Select[Any], stop: threading.Event) -> bool:
        """Wait until no write of an earlier master is open (False: ``stop`` was set first):
        the row taken ``FOR UPDATE`` in a savepoint, then let go, so the lock session keeps
        ``FOR NO KEY UPDATE`` only."""
        while not stop.is_set():
            savepoint = conn.begin_nested()
            try:
                conn.execute(row.with_for_update())
            except DBAPIError as exc:
                savepoint.rollback()
                if sqlstate(exc) != LOCK_NOT_AVAILABLE:
                    raise
                continue
            savepoint.rollback()
            return True
        return False

    def keep_alive(self) -> bool:
        """ActiveMQ's keep-alive UPDATE on the held connection (never committed)."""
        return self.renew() is Renewal.KEPT

    def renew(self) -> Renewal:
        """The keep-alive; a lock session that fails it is lost (it may not be ended yet, but
        it cannot be trusted), as ActiveMQ's ``DefaultDatabaseLocker`` has it."""
        with self._mutex:
            conn = self._conn
            if conn is None:
                if not self._lost:
                    self._lost = f"the row lock on {self.schema.lock.name} is not held"
                return Renewal.LOST
            try:
                result = conn.execute(
                    sa.update(self.schema.lock)
                    .where(self.schema.lock.c.id == 1)
                    .values(time=int(time.time() * 1000))
                )
            except DBAPIError as exc:
                self._conn = None
                self._lost = (
                    f"the row lock on {self.schema.lock.name} ended with its database "
                    f"session ({str(exc).splitlines()[0]})"
                )
                return Renewal.LOST
            if result.rowcount != 1:
                self._conn = None
                self._lost = f"{self.schema.lock.name} has no row ID=1"
                return Renewal.LOST
            return Renewal.KEPT

    @property
    def lost_reason(self) -> str:
        with self._mutex:
            return self._lost

    def is_held(self) -> bool:
        with self._mutex:
            return self._conn is not None

    def fence(self, conn: Connection) -> None:
        """Hold the lock row ``FOR KEY SHARE`` until the write commits, then check that our
        lock transaction still lives (it may have ended without this process knowing yet:
        its session was dropped). A new master's ``FOR UPDATE`` waits for this write, so it
        never commits beside the new master; one that already holds the row refuses it."""
        lock = self.schema.lock
        xact = self.fence_session
        try:
            conn.execute(
                sa.select(lock.c.id)
                .where(lock.c.id == 1)
                .with_for_update(read=True, key_share=True, nowait=True)
            )
        except DBAPIError as exc:
            if sqlstate(exc) != LOCK_NOT_AVAILABLE:
                raise
            xact = None  # another broker holds the row FOR UPDATE
        alive = (
            xact is not None
            and conn.execute(
                sa.text(f"SELECT {LOCK_SESSION_ALIVE}"), {"lock_xact": xact}
            ).scalar_one()
        )
        self.check_fence(self.holder if alive else None)

    @property
    def fence_holder(self) -> str:
        return self.holder

    @property
    def fence_session(self) -> str | None:
        with self._mutex:
            return self._xact if self._conn is not None else None

    def check_fence(self, found: str | None) -> None:
        if found != self.holder or not self.is_held():
            with self._mutex:
                lost, self._conn = self._conn, None
                if not self._lost:
                    self._lost = f"the row lock on {self.schema.lock.name} ended with its session"
            if lost is not None:
                log.error("row lock lost: its session ended; this store stopped writing")
                with contextlib.suppress(Exception):
                    lost.invalidate()
                    lost.close()
            raise LockLostError(
                f"the row lock on {self.schema.lock.name} was lost (its database session "
                "ended): this store stopped writing. Restart it to wait as a standby."
            )

    def release(self) -> None:
        with self._mutex:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.rollback()
            except DBAPIError as exc:  # the lock session already ended: nothing to release
                log.info("row lock session already ended: %s", str(exc).splitlines()[0])
                conn.invalidate()
            finally:
                conn.close()
