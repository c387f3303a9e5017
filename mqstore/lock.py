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
import enum
import hashlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

import psycopg
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


class Renewal(enum.Enum):
    """What one renewal of the master lock found."""

    KEPT = "kept"
    """Renewed: still master."""
    UNREACHABLE = "unreachable"
    """The database did not answer. Still master until the local deadline of the lease, then
    writes are refused; the next renewal that reaches the database keeps the lease if nobody
    took it meanwhile (ActiveMQ's renewal does not check TIME)."""
    LOST = "lost"
    """Another broker holds the lock, or it was released or ended: this broker is deposed."""


class Locker(Protocol):
    """What the store needs from a master lock."""

    holder: str

    def acquire(self, stop: threading.Event) -> bool:
        """Block until the lock is held (True) or ``stop`` is set (False)."""

    def renew(self) -> Renewal:
        """Renew (from the store's keeper thread); :attr:`Renewal.LOST` means deposed."""

    def keep_alive(self) -> bool:
        """Renew; False only when the lock is lost (``renew() is Renewal.LOST``)."""

    def is_held(self) -> bool:
        """Held and, for a lease, not past the local deadline."""

    @property
    def lost_reason(self) -> str:
        """Why the lock was lost (a clause for messages), or "" while it is not."""

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
        """How often :meth:`renew` must run."""


#: A holder's guard session as a standby's watch session sees it, with that watch session's
#: backend pid and the server's start (with the session's own generation, see
#: ``LeaseLocker._see_guard``, they stay the same only while neither the watch session nor
#: the server restarted: then a guard that ended, ended on its own).
_GUARD_SEEN = sa.text(
    "SELECT pg_backend_pid() AS pid, pg_postmaster_start_time() AS started, "
    "CAST(extract(epoch FROM clock_timestamp() - pg_postmaster_start_time()) * 1000 "
    "AS bigint) AS up_ms, "
    "EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = :name) AS alive"
)

#: A holder reopens its guard session within a fraction of a second of the database
#: answering again; a renewal this long after the server started proves the guard was open.
GUARD_GRACE_MS = 2000


@dataclass(frozen=True)
class _GuardSeen:
    alive: bool
    session: tuple[int, int, object]  # the watch session: (generation, backend pid, server start)
    up_ms: int  # how long the server has been up


class _OwnLease(enum.Enum):
    """What a broker finds when the lease is held under its own name."""

    GONE = "gone"  # no guard, and the holder renewed on this server: it died; take it now
    UNKNOWN = "unknown"  # no proof either way (a database restart since): wait for expiry
    ALIVE = "alive"  # a guard session under this name is open


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
        self._lost = ""  # why the lease was lost, once it was
        self._unanswered_since: float | None = None  # renewals failing since (monotonic)
        self._told_expired = False
        self._mutex = threading.Lock()
        self._guard: _Guard | None = None
        # holder -> the watch session that saw its guard alive (see _GUARD_SEEN)
        self._guarded: dict[str, tuple[int, int, object]] = {}
        self._watch: Connection | None = None  # a standby's session for watching guards
        self._watch_generation = 0  # which watch session (a new one never vouches for the old)

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
            started, taken = self._write_lease(
                conn, lambda now: sa.or_(lock.c.time.is_(None), lock.c.time < now)
            )
        return taken and self._became_master(started)

    def _write_lease(
        self, conn: Connection, condition: Callable[[int], sa.ColumnElement[bool]]
    ) -> tuple[float, bool]:
        """ActiveMQ's conditional lease UPDATE: the row names this broker until now + lease,
        if ``condition(now)`` holds. Returns when it was sent and whether the row matched."""
        lock = self.schema.lock
        started = time.monotonic()
        now = self._now_ms(conn)
        result = conn.execute(
            sa.update(lock)
            .where(condition(now), lock.c.id == 1)
            .values(broker_name=self.holder, time=now + self.lease_ms)
        )
        return started, result.rowcount == 1

    def _became_master(self, started: float) -> bool:
        with self._mutex:
            self._held, self._deadline = True, started + self.lease_ms / 1000
            self._lost, self._unanswered_since, self._told_expired = "", None, False
        if self.renew() is Renewal.LOST:
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
        once, and a waiting mqstore standby takes over without waiting for the lease. Its
        own thread reopens it as soon as the database answers again after a restart."""
        guard = _Guard(self.engine, self.guard_name(self.holder), self.renew_interval_s)
        with self._mutex:
            old, self._guard = self._guard, guard
        if old is not None:
            old.close()
        guard.start()

    def _close_guard(self, wait: bool = True) -> None:
        with self._mutex:
            guard, self._guard = self._guard, None
        if guard is not None:
            guard.close(wait=wait)

    # -- a standby watching the holder's guard ----------------------------------------------
    def _watch_session(self) -> Connection:
        if self._watch is None:
            self._watch = self.engine.connect()
            self._watch_generation += 1
        return self._watch

    def _drop_watch(self) -> None:
        """Drop the watch session (after an error): a guard seen from it proves nothing
        about why that guard is gone when a later session looks (the server may have
        restarted in between)."""
        watch, self._watch = self._watch, None
        if watch is not None:
            with contextlib.suppress(SQLAlchemyError):
                watch.invalidate()
                watch.close()

    def _see_guard(self, conn: Connection, holder: str) -> _GuardSeen:
        row = conn.execute(_GUARD_SEEN, {"name": self.guard_name(holder)}).one()
        session = (self._watch_generation if conn is self._watch else 0, int(row.pid), row.started)
        return _GuardSeen(bool(row.alive), session, int(row.up_ms))

    def _own_lease(self, conn: Connection, status: LockStatus) -> _OwnLease:
        """The lease is held under this broker's own name: is that holder (an earlier run of
        this broker, normally) provably gone? Only when no guard session under this name is
        open and the holder last renewed at least :data:`GUARD_GRACE_MS` after the server
        started: it then had its guard on this very server, and a session that ends without
        a server restart ends with its process."""
        seen = self._see_guard(conn, self.holder)
        if seen.alive:
            return _OwnLease.ALIVE
        if status.time is None:
            return _OwnLease.UNKNOWN
        renewed_ms_ago = self._now_ms(conn) - (status.time - self.lease_ms)
        if renewed_ms_ago + GUARD_GRACE_MS < seen.up_ms:
            return _OwnLease.GONE
        return _OwnLease.UNKNOWN

    def _take_over_dead(self, dead: str, why: str) -> bool:
        """The holder is gone: take its lease now (only if the row still names it)."""
        lock = self.schema.lock
        with self.engine.begin() as conn:
            started, taken = self._write_lease(conn, lambda _now: lock.c.broker_name == dead)
        if not taken:
            return False
        log.warning("master %s is gone (%s): taking over its lease now", dead, why)
        return self._became_master(started)

    def _standby_check(self, conn: Connection, status: LockStatus) -> bool:
        """While waiting: watch the holder's guard; take over the moment it disappears while
        the database stays up. After a database restart every session ended, a live
        master's guard too: then wait for the guard to come back, or for the lease to run
        out as ActiveMQ does."""
        holder = status.broker_name
        if holder is None:
            return False
        if holder == self.holder:
            if self._own_lease(conn, status) is _OwnLease.GONE:
                conn.rollback()
                return self._take_over_dead(holder, "an earlier run of this broker")
            return False
        seen = self._see_guard(conn, holder)
        conn.rollback()  # end the snapshot of pg_stat_activity
        if seen.alive:
            self._guarded[holder] = seen.session
            return False
        saw = self._guarded.pop(holder, None)
        if saw is None:
            return False  # an ActiveMQ holder (no guard), or one never seen: wait for its lease
        if saw == seen.session:
            return self._take_over_dead(holder, "its session ended while the database stayed up")
        log.info(
            "the guard session of %s ended while this standby's own session ended too (a "
            "database restart): waiting for the guard to come back, or for the lease to expire",
            holder,
        )
        return False

    def acquire(self, stop: threading.Event) -> bool:
        last_seen: LockStatus | None = None
        try:
            while not stop.is_set():
                try:
                    if self.try_acquire():
                        log.info(
                            "became master: lease on %s held by %s",
                            self.schema.lock.name,
                            self.holder,
                        )
                        return True
                    conn = self._watch_session()
                    status = read_lock(conn, self.schema)
                    if self._standby_check(conn, status):
                        return True
                    conn.rollback()
                    if status != last_seen:
                        log.info("waiting as slave: lock %s", status.describe())
                        last_seen = status
                except SQLAlchemyError as exc:
                    self._drop_watch()
                    log.warning("lock attempt failed, retrying: %s", str(exc).splitlines()[0])
                stop.wait(self.poll_s)
            return False
        finally:
            self._drop_watch()
            self._guarded.clear()

    # -- the master's side -------------------------------------------------------------------
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
            self._lose(
                f"the lease on {self.schema.lock.name} now belongs to {found!r}"
                if found is not None
                else f"the lease on {self.schema.lock.name} was released by another process"
            )
            raise LockLostError(
                f"the lease on {self.schema.lock.name} now belongs to {found!r}, not "
                f"{self.holder!r}: this store stopped writing. Restart it to wait as a standby."
            )

    def _lose(self, reason: str) -> None:
        with self._mutex:
            self._held = False
            if not self._lost:
                self._lost = reason
        self._close_guard(wait=False)

    @property
    def lost_reason(self) -> str:
        with self._mutex:
            return self._lost

    def keep_alive(self) -> bool:
        """ActiveMQ's renewal; False only when the lease is lost (see :meth:`renew`)."""
        return self.renew() is not Renewal.LOST

    def renew(self) -> Renewal:
        """ActiveMQ's renewal: ``UPDATE ... WHERE BROKER_NAME = me``; 0 rows means the lease
        is lost. A database that does not answer is not a loss: the lease stays ours until
        its local deadline (then writes are refused), and the next renewal that gets through
        keeps it if no other broker took it meanwhile."""
        if self.lost_reason:
            return Renewal.LOST
        try:
            try:
                started, status = self._renew_once()
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
                # a pooled connection that ended with a database restart: once more, on a new one
                started, status = self._renew_once()
        except SQLAlchemyError as exc:  # the database, or no pooled connection in time
            return self._unanswered(exc)
        if status is not None:
            self._lose(f"the lock {self.schema.lock.name} is now {status.describe()}")
            return Renewal.LOST
        with self._mutex:
            self._held, self._deadline = True, started + self.lease_ms / 1000
            since, self._unanswered_since = self._unanswered_since, None
            expired, self._told_expired = self._told_expired, False
        if since is not None:
            log.info(
                "lease on %s renewed after %.1f s without the database%s",
                self.schema.lock.name,
                time.monotonic() - since,
                ": nobody took it, writes resume" if expired else "",
            )
        return Renewal.KEPT

    def _renew_once(self) -> tuple[float, LockStatus | None]:
        """One renewal: when it was sent, and the lock row if the renewal did not match it."""
        lock = self.schema.lock
        with self.engine.begin() as conn:
            started, kept = self._write_lease(conn, lambda _now: lock.c.broker_name == self.holder)
            return started, None if kept else read_lock(conn, self.schema)

    def _unanswered(self, exc: SQLAlchemyError) -> Renewal:
        cause = str(exc).splitlines()[0]
        now = time.monotonic()
        with self._mutex:
            first = self._unanswered_since is None
            if first:
                self._unanswered_since = now
            left = self._deadline - now
            tell_expired = left <= 0 and not self._told_expired
            if tell_expired:
                self._told_expired = True
        if first and left > 0:
            log.error("lease renewal failed (%s); still master for %.1f s, retrying", cause, left)
        elif tell_expired:
            log.error(
                "the lease on %s ran out while the database did not answer (%s): writes are "
                "refused until a renewal gets through, which keeps the lease if no other "
                "broker took it meanwhile",
                self.schema.lock.name,
                cause,
            )
        else:
            log.debug("lease renewal failed again: %s", cause)
        return Renewal.UNREACHABLE

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


class _Guard:
    """A master's guard session, kept by its own thread: the thread waits on the session's
    socket, and when the server ends the session (a restart, a dropped connection) it opens
    a new one as soon as the database answers again, not at the next renewal."""

    RETRY_S = 0.2

    def __init__(self, engine: Engine, name: str, check_s: float) -> None:
        self.engine, self.name, self.check_s = engine, name, check_s
        self._conn: Connection | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="mqstore-lease-guard", daemon=True)
        self._failing = False

    def start(self) -> None:
        self._open()  # at once, so a standby sees the guard as soon as it sees the lease
        self._thread.start()

    def close(self, wait: bool = True) -> None:
        """Stop the thread, which closes the session (``wait``: before this returns)."""
        self._stop.set()
        if self._thread.ident is None:  # never started
            self._drop()
            self._wake_r.close()
            self._wake_w.close()
            return
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if wait and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _open(self) -> bool:
        conn: Connection | None = None
        try:
            conn = self.engine.connect()
            conn.exec_driver_sql(f"SET application_name = '{self.name}'")
            conn.commit()
        except SQLAlchemyError as exc:
            if conn is not None:
                with contextlib.suppress(SQLAlchemyError):
                    conn.invalidate()
                    conn.close()
            if not self._failing:
                log.warning(
                    "could not open the lease guard session (retrying): %s",
                    str(exc).splitlines()[0],
                )
            self._failing = True
            return False
        if self._failing:
            log.info("lease guard session open again")
        self._failing = False
        self._conn = conn
        return True

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(SQLAlchemyError):
                conn.invalidate()  # never hand a named session back to the pool
                conn.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._conn is None and not self._open():
                    self._stop.wait(self.RETRY_S)
                elif not self._check():
                    log.warning(
                        "the lease guard session ended; reopening it as soon as the "
                        "database answers"
                    )
                    self._failing = True  # log its reopening
                    self._drop()
                    self._stop.wait(self.RETRY_S)
        finally:
            self._drop()
            self._wake_r.close()
            self._wake_w.close()

    def _check(self) -> bool:
        """Wait until the server sends something on the session (it ends it), ``check_s``
        passes or the guard is closed; False when the session is found ended."""
        conn = self._conn
        assert conn is not None
        try:
            raw = cast(psycopg.Connection[object], conn.connection.dbapi_connection)
            with selectors.DefaultSelector() as sockets:  # no FD_SETSIZE limit, unlike select()
                sockets.register(raw.fileno(), selectors.EVENT_READ)
                sockets.register(self._wake_r, selectors.EVENT_READ)
                sockets.select(self.check_s)
        except (OSError, ValueError, SQLAlchemyError, psycopg.Error):
            return False  # no socket any more
        if self._stop.is_set():
            return True
        try:
            conn.exec_driver_sql("SELECT 1")
            conn.commit()
        except SQLAlchemyError:
            return False
        return True


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
        self._lost = ""

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
                self._conn, self._xact, self._lost = conn, str(xact), ""
            log.info("became master: row lock on %s", lock.name)
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

    def renew(self) -> Renewal:
        return Renewal.KEPT

    def is_held(self) -> bool:
        return True

    lost_reason = ""

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
        """Take the lease now, or raise :class:`LockError` naming its holder.

        A lease under this broker's own name is an earlier run of it that did not release it
        (killed, or stopped while the database was unreachable): taken at once when that run
        is provably gone (no guard session, and it renewed on this server since it started),
        else waited out (its lease at most). A lease under another name is never taken
        before it expires.
        """
        lease, name = self.lease, self.lease.schema.lock.name
        give_up: float | None = None
        while not stop.is_set():
            if lease.try_acquire():
                log.info("holding the lease on %s exclusively (journaled broker)", name)
                return True
            with lease.engine.connect() as conn:
                status = read_lock(conn, lease.schema)
                own = lease._own_lease(conn, status) if status.broker_name == self.holder else None
            if own is None:
                raise LockError(
                    f"the lock {name} is {status.describe()}; a broker with a local journal "
                    "never waits as a standby (it would take over a stale database). Stop the "
                    "other broker, or run this one with --no-journal to be its standby."
                )
            if own is _OwnLease.GONE and lease._take_over_dead(
                self.holder, "an earlier run of this broker"
            ):
                log.info("holding the lease on %s exclusively (journaled broker)", name)
                return True
            now = time.monotonic()
            if give_up is None:
                give_up = now + lease.lease_ms / 1000 + lease.poll_s
                log.warning(
                    "the lock %s is %s, this broker's own name: an earlier run did not release "
                    "it (killed, or stopped while the database was unreachable); waiting for "
                    "that lease to expire",
                    name,
                    status.describe(),
                )
            elif now >= give_up:
                raise LockError(
                    f"the lock {name} is {status.describe()}, and it was renewed for longer "
                    f"than a lease: another running broker uses this broker's name "
                    f"{self.holder!r}. Stop it, or give each broker its own --broker-name."
                )
            stop.wait(lease.poll_s)
        return False

    def keep_alive(self) -> bool:
        return self.lease.keep_alive()

    def renew(self) -> Renewal:
        return self.lease.renew()

    @property
    def lost_reason(self) -> str:
        return self.lease.lost_reason

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
