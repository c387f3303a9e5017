"""Master election on ACTIVEMQ_LOCK, interoperable with ActiveMQ's lockers on the same row.

* :class:`LeaseLocker` is ActiveMQ's ``LeaseDatabaseLocker``: the same conditional UPDATEs and
  stored values (TIME = lease expiry in epoch ms, BROKER_NAME = holder; release to (NULL, 0)).
* :class:`RowLocker` is ActiveMQ's ``DefaultDatabaseLocker``: ``SELECT ... FOR UPDATE`` held in
  an open transaction for the master's whole life. It keeps a transaction open, which stops
  VACUUM from removing dead rows in every table; prefer the lease where you can.

All brokers sharing the tables must use the same kind of locker: a lease holder takes no row
lock, so a row locker would get the row at once (and a row holder blocks lease UPDATEs).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from mqstore.errors import ConfigError, LockError, LockLostError
from mqstore.schema import StoreSchema
from mqstore.statements import LOCK_SESSION_ALIVE

log = logging.getLogger(__name__)


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


def read_lock(conn: Connection, schema: StoreSchema) -> LockStatus:
    """Read the lock row (ID=1)."""
    row = conn.execute(
        sa.select(schema.lock.c.broker_name, schema.lock.c.time).where(schema.lock.c.id == 1)
    ).first()
    if row is None:
        raise LockError(f"{schema.lock.name} has no row ID=1: run `mqstore db upgrade`")
    return LockStatus(row.broker_name, row.time)


class Locker(Protocol):
    """What the store needs from a master lock."""

    holder: str

    def acquire(self, stop: threading.Event) -> bool:
        """Block until the lock is held (True) or ``stop`` is set (False)."""

    def keep_alive(self) -> bool:
        """Renew; False means the lock is lost and writing must stop."""

    def is_held(self) -> bool:
        """Held and, for a lease, not past the local deadline."""

    def release(self) -> None:
        """Give the lock up."""

    def fence(self, conn: Connection) -> None:
        """Inside a write transaction: raise :class:`LockLostError` unless still master."""

    @property
    def fence_holder(self) -> str | None:
        """The BROKER_NAME a single-statement write must find on the lock row (read FOR
        SHARE in that statement), or None when writes are not fenced by the row."""

    @property
    def fence_session(self) -> str | None:
        """For a lock held by a database session (the row lock): the id of that session's
        open transaction, which a single-statement write checks is still in progress
        instead of reading the lock row; None otherwise."""

    def check_fence(self, found: str | None) -> None:
        """After such a write: raise :class:`LockLostError` unless ``found`` is still us."""

    @property
    def renew_interval_s(self) -> float:
        """How often :meth:`keep_alive` must run."""


class LeaseLocker:
    """ActiveMQ's lease protocol.

    ``lease_ms`` is ActiveMQ's ``lockAcquireSleepInterval``, ``renew_ms`` its
    ``lockKeepAlivePeriod``; the renewal must come well before the lease ends. With
    ``max_clock_diff_ms > 0`` (ActiveMQ's ``maxAllowableDiffFromDBTime``) times are on the
    database clock whenever the local clock is further off than that.
    """

    def __init__(
        self,
        engine: Engine,
        schema: StoreSchema,
        holder: str,
        *,
        lease_ms: int = 10_000,
        renew_ms: int = 5_000,
        max_clock_diff_ms: int = 0,
        poll_ms: int | None = None,
    ) -> None:
        if renew_ms >= lease_ms:
            raise ConfigError(
                f"lock renewal period ({renew_ms} ms) must be shorter than the lease "
                f"({lease_ms} ms), or the lease lapses between renewals"
            )
        self.engine, self.schema, self.holder = engine, schema, holder
        self.lease_ms, self.renew_ms = lease_ms, renew_ms
        self.max_clock_diff_ms = max_clock_diff_ms
        self.poll_s = (poll_ms if poll_ms is not None else min(1000, renew_ms)) / 1000
        self._adjust_ms: int | None = None
        self._held = False
        self._deadline = 0.0  # time.monotonic() after which the lease may be someone else's
        self._mutex = threading.Lock()
        self._guard: Connection | None = None
        self._guarded: set[str] = set()  # holders seen alive with a guard session

    @property
    def renew_interval_s(self) -> float:
        return self.renew_ms / 1000

    def _now_ms(self, conn: Connection) -> int:
        if self._adjust_ms is None:
            self._adjust_ms = 0
            if self.max_clock_diff_ms > 0:
                db_ms = conn.execute(
                    sa.text("SELECT (extract(epoch FROM CURRENT_TIMESTAMP) * 1000)::bigint")
                ).scalar_one()
                diff = int(time.time() * 1000) - int(db_ms)
                if abs(diff) > self.max_clock_diff_ms:
                    self._adjust_ms = -diff
                    log.warning("local clock is %d ms off the database; using DB time", diff)
        return int(time.time() * 1000) + self._adjust_ms

    def try_acquire(self) -> bool:
        """One attempt: ActiveMQ's ``TIME IS NULL OR TIME < now`` conditional UPDATE."""
        lock = self.schema.lock
        with self.engine.begin() as conn:
            started = time.monotonic()
            now = self._now_ms(conn)
            result = conn.execute(
                sa.update(lock)
                .where(sa.or_(lock.c.time.is_(None), lock.c.time < now), lock.c.id == 1)
                .values(broker_name=self.holder, time=now + self.lease_ms)
            )
        return result.rowcount == 1 and self._became_master(started)

    def _became_master(self, started: float) -> bool:
        with self._mutex:
            self._held, self._deadline = True, started + self.lease_ms / 1000
        if not self.keep_alive():
            return False
        self._open_guard()
        return True

    # -- the guard session: fast failover between mqstore brokers ---------------------------
    def guard_name(self, holder: str) -> str:
        """The ``application_name`` of ``holder``'s guard session (63 bytes at most)."""
        digest = hashlib.sha1(f"{self.schema.lock.name}/{holder}".encode()).hexdigest()[:24]
        return f"mqstore-lease:{digest}"

    def _open_guard(self) -> None:
        """Keep one idle session named after this holder while master (no open transaction,
        so VACUUM is not held back). When this process dies, PostgreSQL ends the session at
        once, and a waiting mqstore standby takes over without waiting for the lease."""
        self._close_guard()
        try:
            conn = self.engine.connect()
            conn.exec_driver_sql(f"SET application_name = '{self.guard_name(self.holder)}'")
            conn.commit()
            self._guard = conn
        except DBAPIError as exc:
            log.warning("could not open the lease guard session: %s", str(exc).splitlines()[0])

    def _close_guard(self) -> None:
        guard, self._guard = self._guard, None
        if guard is not None:
            try:
                guard.invalidate()  # never hand a named session back to the pool
                guard.close()
            except DBAPIError:
                pass

    def _check_guard(self) -> None:
        if self._guard is None:
            self._open_guard()
            return
        try:
            self._guard.exec_driver_sql("SELECT 1")
            self._guard.commit()
        except DBAPIError:
            self._open_guard()

    def _holder_alive(self, conn: Connection, holder: str) -> bool:
        count = conn.execute(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
            {"name": self.guard_name(holder)},
        ).scalar_one()
        return int(count) > 0

    def _take_over_dead(self, conn: Connection, dead: str) -> bool:
        """The holder's guard session is gone: it died, so take its lease now."""
        started = time.monotonic()
        now = self._now_ms(conn)
        lock = self.schema.lock
        result = conn.execute(
            sa.update(lock)
            .where(lock.c.broker_name == dead, lock.c.id == 1)
            .values(broker_name=self.holder, time=now + self.lease_ms)
        )
        conn.commit()
        if result.rowcount != 1:
            return False
        log.warning("master %s is gone (its session ended): taking over its lease now", dead)
        return self._became_master(started)

    def _standby_check(self, status: LockStatus) -> bool:
        """While waiting: watch the holder's guard; take over the moment it disappears."""
        holder = status.broker_name
        if holder is None:
            return False
        with self.engine.connect() as conn:
            if self._holder_alive(conn, holder):
                self._guarded.add(holder)
                return False
            # Our own name without a guard is this broker's previous, dead incarnation.
            if holder in self._guarded or holder == self.holder:
                return self._take_over_dead(conn, holder)
        return False  # an ActiveMQ holder (no guard): wait for its lease to run out

    def acquire(self, stop: threading.Event) -> bool:
        last_seen: LockStatus | None = None
        while not stop.is_set():
            try:
                if self.try_acquire():
                    log.info(
                        "became master: lease on %s held by %s", self.schema.lock.name, self.holder
                    )
                    return True
                with self.engine.connect() as conn:
                    status = read_lock(conn, self.schema)
                if self._standby_check(status):
                    return True
                if status != last_seen:
                    log.info("waiting as slave: lock %s", status.describe())
                    last_seen = status
            except DBAPIError as exc:
                log.warning("lock attempt failed, retrying: %s", str(exc).splitlines()[0])
            stop.wait(self.poll_s)
        return False

    def fence(self, conn: Connection) -> None:
        """Lock the lock row for share in the writer's transaction and check the holder.

        A takeover UPDATE waits until this transaction ends, and after a takeover this
        check fails: a deposed master can never commit beside the new one.
        """
        lock = self.schema.lock
        self.check_fence(
            conn.execute(
                sa.select(lock.c.broker_name).where(lock.c.id == 1).with_for_update(read=True)
            ).scalar_one_or_none()
        )

    @property
    def fence_holder(self) -> str:
        return self.holder

    fence_session = None

    def check_fence(self, found: str | None) -> None:
        if found != self.holder:
            with self._mutex:
                self._held = False
            raise LockLostError(
                f"the lease on {self.schema.lock.name} now belongs to {found!r}, not "
                f"{self.holder!r}: this store stopped writing. Restart it to wait as a standby."
            )

    def keep_alive(self) -> bool:
        """ActiveMQ's renewal: ``WHERE BROKER_NAME = me``; 0 rows means the lease is lost."""
        lock = self.schema.lock
        try:
            with self.engine.begin() as conn:
                started = time.monotonic()
                now = self._now_ms(conn)
                result = conn.execute(
                    sa.update(lock)
                    .where(lock.c.broker_name == self.holder, lock.c.id == 1)
                    .values(broker_name=self.holder, time=now + self.lease_ms)
                )
        except SQLAlchemyError as exc:  # the database, or no pooled connection in time
            log.error("lease renewal failed: %s", str(exc).splitlines()[0])
            return self.is_held()  # still ours until the local deadline passes
        with self._mutex:
            if result.rowcount == 1:
                self._held, self._deadline = True, started + self.lease_ms / 1000
            else:
                if self._held:
                    log.error("lease lost: another broker holds %s", self.schema.lock.name)
                self._held = False
            held = self._held
        if held and self._guard is not None:
            self._check_guard()
        return held

    def is_held(self) -> bool:
        with self._mutex:
            return self._held and time.monotonic() < self._deadline

    def release(self) -> None:
        """ActiveMQ's release: BROKER_NAME NULL, TIME 0, only if we hold it."""
        lock = self.schema.lock
        with self._mutex:
            self._held = False
        self._close_guard()
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    sa.update(lock)
                    .where(lock.c.broker_name == self.holder, lock.c.id == 1)
                    .values(broker_name=None, time=0)
                )
        except DBAPIError as exc:
            log.warning("could not release the lease: %s", str(exc).splitlines()[0])


class RowLocker:
    """ActiveMQ's default locker: a row lock held in a transaction for the master's life.

    The open transaction keeps VACUUM from removing dead rows (ACTIVEMQ_MSGS bloats), and a
    dead master's lock lasts until PostgreSQL notices its connection is gone. Use it only
    when the ActiveMQ brokers sharing the database use ``DefaultDatabaseLocker``.
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

    @property
    def renew_interval_s(self) -> float:
        return self.renew_ms / 1000

    def acquire(self, stop: threading.Event) -> bool:
        lock = self.schema.lock
        while not stop.is_set():
            conn = self.engine.connect()
            try:
                conn.execute(sa.text(f"SET lock_timeout = {int(self.poll_ms)}"))
                conn.execute(sa.select(lock).where(lock.c.id == 1).with_for_update())
            except DBAPIError as exc:
                conn.rollback()
                conn.close()
                if "lock timeout" not in str(exc):
                    log.warning("row lock attempt failed: %s", str(exc).splitlines()[0])
                    stop.wait(self.poll_ms / 1000)
                continue
            conn.execute(sa.text("SET lock_timeout = 0"))
            xact = conn.execute(sa.text("SELECT CAST(pg_current_xact_id() AS text)")).scalar_one()
            with self._mutex:
                self._conn, self._xact = conn, str(xact)
            log.info("became master: row lock on %s", lock.name)
            return True
        return False

    def keep_alive(self) -> bool:
        """ActiveMQ's keep-alive UPDATE on the held connection (never committed)."""
        with self._mutex:
            conn = self._conn
            if conn is None:
                return False
            try:
                result = conn.execute(
                    sa.update(self.schema.lock)
                    .where(self.schema.lock.c.id == 1)
                    .values(time=int(time.time() * 1000))
                )
            except DBAPIError as exc:
                log.error("row lock lost: %s", str(exc).splitlines()[0])
                self._conn = None
                return False
            return result.rowcount == 1

    def is_held(self) -> bool:
        with self._mutex:
            return self._conn is not None

    def fence(self, conn: Connection) -> None:
        """Nobody else can hold the row lock while our lock transaction lives; it may have
        ended without this process knowing yet (its session was dropped), so ask."""
        xact = self.fence_session
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
            finally:
                conn.close()


class NoLocker:
    """For a single broker that shares its tables with nobody (tests, tools)."""

    holder = "unlocked"
    renew_interval_s = 3600.0

    def acquire(self, stop: threading.Event) -> bool:
        return True

    def keep_alive(self) -> bool:
        return True

    def is_held(self) -> bool:
        return True

    def release(self) -> None:
        return None

    def fence(self, conn: Connection) -> None:
        return None

    fence_holder = None
    fence_session = None

    def check_fence(self, found: str | None) -> None:
        return None


class ExclusiveLease:
    """A lease taken without ever waiting as a standby, for a journaled broker.

    A journaled master keeps recent work in its local journal until a checkpoint, so a
    standby taking over the lease would serve a stale database. The journaled broker still
    takes ActiveMQ's lease (so nothing else writes while it runs), but refuses to start when
    another broker holds it instead of queueing behind it.
    """

    def __init__(self, lease: LeaseLocker) -> None:
        self.lease = lease
        self.holder = lease.holder

    @property
    def renew_interval_s(self) -> float:
        return self.lease.renew_interval_s

    def acquire(self, stop: threading.Event) -> bool:
        if self.lease.try_acquire():
            log.info(
                "holding the lease on %s exclusively (journaled broker)",
                self.lease.schema.lock.name,
            )
            return True
        with self.lease.engine.connect() as conn:
            status = read_lock(conn, self.lease.schema)
        raise LockError(
            f"the lock {self.lease.schema.lock.name} is {status.describe()}; a broker with a "
            "local journal never waits as a standby (it would take over a stale database). "
            "Stop the other broker, or run this one with --no-journal to be its standby."
        )

    def keep_alive(self) -> bool:
        return self.lease.keep_alive()

    def is_held(self) -> bool:
        return self.lease.is_held()

    def release(self) -> None:
        self.lease.release()

    def fence(self, conn: Connection) -> None:
        self.lease.fence(conn)

    @property
    def fence_holder(self) -> str:
        return self.lease.fence_holder

    fence_session = None

    def check_fence(self, found: str | None) -> None:
        self.lease.check_fence(found)
