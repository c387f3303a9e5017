"""ActiveMQ's lease protocol (``LeaseDatabaseLocker``), with a guard session that lets an
mqstore standby take over the moment a master's process dies."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from mqstore.db import LOCK_NOT_AVAILABLE, describe_connect_error, sqlstate
from mqstore.errors import ConfigError, LockError, LockLostError
from mqstore.lease_time import JOURNALED_LEASE_OFFSET_MS, encode_lease_time
from mqstore.lock.guard import Guard
from mqstore.lock.locker import Renewal
from mqstore.lock.retries import RetryWarnings
from mqstore.lock.standby import GuardSeen, GuardWatch, OwnLease, judge_own_lease, standby_message
from mqstore.lock.status import LockStatus, database_now_ms, find_lock, read_lock
from mqstore.schema import StoreSchema

log = logging.getLogger(__name__)

#: How many lease ends a holder remembers having sent since its last confirmed renewal:
#: renewals whose reply was lost may each have committed (a 5 s renewal fills it in 80 min).
MAX_UNCONFIRMED_LEASES = 1000


class RowLockedError(LockError):
    """The lock row is held by a row-lock master (ActiveMQ's default database locker, or
    ``--lock row``): a lease UPDATE would wait for as long as that master lives."""


def guard_name(schema: StoreSchema, holder: str) -> str:
    """The ``application_name`` of the guard session an mqstore master named ``holder``
    keeps open on ``schema``'s lock row (63 bytes at most)."""
    digest = hashlib.sha1(f"{schema.lock.name}/{holder}".encode()).hexdigest()[:24]
    return f"mqstore-lease:{digest}"


class LeaseLocker:
    """ActiveMQ's lease protocol.

    ``lease_ms`` is ActiveMQ's ``lockAcquireSleepInterval``, ``renew_ms`` its
    ``lockKeepAlivePeriod``; the renewal must come well before the lease ends. With
    ``max_clock_diff_ms > 0`` (ActiveMQ's ``maxAllowableDiffFromDBTime``) times are on the
    database clock whenever the local clock is further off than that.

    **The guard.** While the lock row names this broker by its own acquisition, its guard
    session (:meth:`guard_name`) is open: the session that runs the acquiring UPDATE takes
    the guard's name in that same transaction, before it commits (:meth:`_take`), and the
    guard is closed only once the row is about to stop naming this broker (:meth:`release`)
    or names another (:meth:`_lose`). So no session ever sees the row name a live mqstore
    holder whose guard is not open; only PostgreSQL ending the session breaks this: the
    holder's death, a dropped connection (the fence refuses a deposed holder's writes), or a
    server restart (which a standby recognises by its own watch session ending).

    A standby's note that it saw a holder's guard (``_noted``) thus only says "this holder
    keeps a guard, and no restart happened since": it stays true across the holder's
    re-acquisitions, and the guard missing later means it ended. The note is dropped as
    soon as the row names anyone else, and the takeover looks for the guard once more in
    its own transaction, after its UPDATE: a holder that took the lease again after the
    standby looked has its guard open by then, and the takeover is rolled back.
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
        journaled: bool = False,
    ) -> None:
        if renew_ms >= lease_ms:
            raise ConfigError(
                f"lock renewal period ({renew_ms} ms) must be shorter than the lease "
                f"({lease_ms} ms), or the lease lapses between renewals"
            )
        self.engine, self.schema, self.holder = engine, schema, holder
        self.lease_ms, self.renew_ms = lease_ms, renew_ms
        self.max_clock_diff_ms = max_clock_diff_ms
        self.journaled = journaled  # write lease ends no standby sees run out (lease_time)
        self.poll_s = (poll_ms if poll_ms is not None else min(1000, renew_ms)) / 1000
        self._adjust_ms: int | None = None
        self._held = False
        self._deadline = 0.0  # time.monotonic() after which the lease may be someone else's
        self._lost = ""  # why the lease was lost, once it was
        self._unanswered_since: float | None = None  # renewals failing since (monotonic)
        self._told_expired = False
        # the TIME values this holder wrote (the last confirmed one, then any whose outcome
        # is unknown): a renewal and a release match only these, so a second process under
        # this name that took the lease is never renewed or released over (see renew())
        self._ends: list[int] = []
        self._mutex = threading.Lock()
        self._guard: Guard | None = None
        # the holder the lock row named when its guard was seen alive, and the watch session
        # that saw it (see GuardSeen); dropped when the row names anyone else
        self._noted: tuple[str, tuple[int, int, object]] | None = None
        self._watch = GuardWatch(engine)  # a standby's session for watching guards
        self._own: OwnLease | None = None  # what the last standby check found of our own name

    @property
    def renew_interval_s(self) -> float:
        return self.renew_ms / 1000

    def _now_ms(self, conn: Connection) -> int:
        if self._adjust_ms is None:
            self._adjust_ms = 0
            if self.max_clock_diff_ms > 0:
                diff = int(time.time() * 1000) - database_now_ms(conn)
                if abs(diff) > self.max_clock_diff_ms:
                    self._adjust_ms = -diff
                    log.warning("local clock is %d ms off the database; using DB time", diff)
        return int(time.time() * 1000) + self._adjust_ms

    def try_acquire(self) -> bool:
        """One attempt: ActiveMQ's ``TIME IS NULL OR TIME < now`` conditional UPDATE; a
        journaled broker also takes back its own journaled lease once that has run out."""
        taken = self._take(self._free)
        return taken is not None and self._became_master(*taken)

    def _free(self, now: int) -> sa.ColumnElement[bool]:
        lock = self.schema.lock
        free = sa.or_(lock.c.time.is_(None), lock.c.time < now)
        if not self.journaled:
            return free
        own_ran_out = sa.and_(
            lock.c.broker_name == self.holder,
            lock.c.time >= JOURNALED_LEASE_OFFSET_MS,
            lock.c.time < encode_lease_time(now, journaled=True),
        )
        return sa.or_(free, own_ran_out)

    def _take(
        self, condition: Callable[[int], sa.ColumnElement[bool]], dead: str | None = None
    ) -> tuple[float, int] | None:
        """Write the lease if ``condition(now)`` holds, on a session that becomes this
        broker's guard in the same transaction, before it commits (see the class doc); with
        ``dead``, only if no guard of that holder is open once the UPDATE holds the row.
        Returns when the UPDATE was sent and the lease end it wrote, or None when the lease
        was not taken."""
        conn = self.engine.connect()
        guard: Guard | None = None
        try:
            # A row-lock master holds the row for its whole life: do not queue behind it.
            conn.execute(sa.text(f"SET LOCAL lock_timeout = {max(int(self.poll_s * 1000), 100)}"))
            try:
                started, until = self._write_lease(conn, condition)
            except DBAPIError as exc:
                if sqlstate(exc) != LOCK_NOT_AVAILABLE:
                    raise
                conn.rollback()
                raise RowLockedError(self.row_locked()) from None
            # The first look at pg_stat_activity in this transaction (it is read once per
            # transaction), after the UPDATE locked the row: a holder's acquisition that
            # committed before it had named its guard before that.
            if until is not None and dead is not None and self._see_guard(conn, dead).alive:
                log.info("the guard session of %s is open: not taking over its lease", dead)
                until = None
            if until is None:
                conn.rollback()
                return None
            guard = Guard(self.engine, self.guard_name(self.holder), self.renew_interval_s)
            guard.adopt(conn)
            conn.commit()
        except BaseException:
            if guard is not None:
                guard.close()  # never started: drops the named session
            raise
        finally:
            if guard is None:
                conn.close()
        self._install_guard(guard)
        return started, until

    def _write_lease(
        self,
        conn: Connection,
        condition: Callable[[int], sa.ColumnElement[bool]],
        unconfirmed: bool = False,
    ) -> tuple[float, int | None]:
        """ActiveMQ's conditional lease UPDATE: the row names this broker until now + lease,
        if ``condition(now)`` holds. Returns when it was sent and the TIME it wrote (the
        lease end, encoded for a journaled broker), or None when the row did not match.
        With ``unconfirmed`` that TIME is remembered before the UPDATE is sent: until the
        commit is confirmed, the row may hold it."""
        lock = self.schema.lock
        started = time.monotonic()
        now = self._now_ms(conn)
        until = encode_lease_time(now + self.lease_ms, journaled=self.journaled)
        if unconfirmed:
            with self._mutex:
                self._ends.append(until)
                del self._ends[:-MAX_UNCONFIRMED_LEASES]
        result = conn.execute(
            sa.update(lock)
            .where(condition(now), lock.c.id == 1)
            .values(broker_name=self.holder, time=until)
        )
        return started, until if result.rowcount == 1 else None

    def _ours(self) -> sa.ColumnElement[bool]:
        """The lock row as this holder left it: its name, and a lease end it wrote."""
        lock = self.schema.lock
        with self._mutex:
            ends = list(self._ends)
        return sa.and_(lock.c.broker_name == self.holder, lock.c.time.in_(ends))

    def _became_master(self, started: float, until: int) -> bool:
        with self._mutex:
            self._ends = [until]
            self._held, self._deadline = True, started + self.lease_ms / 1000
            self._lost, self._unanswered_since, self._told_expired = "", None, False
        return self.renew() is not Renewal.LOST  # a loss closes the guard

    # -- the guard session: fast failover between mqstore brokers ---------------------------
    def guard_name(self, holder: str) -> str:
        """The ``application_name`` of ``holder``'s guard session (:func:`guard_name`)."""
        return guard_name(self.schema, holder)

    def _install_guard(self, guard: Guard) -> None:
        """Keep one idle session named after this holder while master (no open transaction,
        so VACUUM is not held back): the session that acquired the lease (:meth:`_take`).
        When this process dies, PostgreSQL ends the session at once, and a waiting mqstore
        standby takes over without waiting for the lease. Its own thread reopens it as soon
        as the database answers again after a restart."""
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
    def _see_guard(self, conn: Connection, holder: str) -> GuardSeen:
        return self._watch.see(conn, self.guard_name(holder))

    def own_lease(self, conn: Connection, status: LockStatus) -> OwnLease:
        """The lease is held under this broker's own name: is that holder (an earlier run of
        this broker, normally) provably gone? See :func:`~mqstore.lock.standby.judge_own_lease`."""
        seen = self._see_guard(conn, self.holder)
        if seen.alive or status.time is None:  # the clock is read only when it decides
            return judge_own_lease(seen, None)
        return judge_own_lease(seen, self._now_ms(conn) - (status.time - self.lease_ms))

    def take_over_dead(self, dead: str, why: str) -> bool:
        """The holder is gone: take its lease now, only if the row still names it and, once
        the UPDATE holds the row, no guard of ``dead`` is open (it may have taken the lease
        again since it was found gone)."""
        lock = self.schema.lock
        taken = self._take(lambda _now: lock.c.broker_name == dead, dead=dead)
        if taken is None:
            return False
        log.warning("master %s is gone (%s): taking over its lease now", dead, why)
        return self._became_master(*taken)

    def _standby_check(self, conn: Connection, status: LockStatus) -> bool:
        """While waiting: watch the holder's guard; take over the moment it disappears while
        the database stays up. After a database restart every session ended, a live
        master's guard too: then wait for the guard to come back, or for the lease to run
        out as ActiveMQ does. When the row names this broker, what :meth:`own_lease` found
        is left in ``_own`` (else None) for the standby's message. A journaled holder's
        lease is never taken over (:mod:`mqstore.lease_time`)."""
        holder = status.broker_name
        self._own = None
        if self._noted is not None and self._noted[0] != holder:
            self._noted = None  # the row named another holder, or none, since
        if holder is None or status.journaled:
            return False
        if holder == self.holder:
            self._own = own = self.own_lease(conn, status)
            if own is OwnLease.GONE:
                conn.rollback()
                return self.take_over_dead(holder, "an earlier run of this broker")
            return False
        seen = self._see_guard(conn, holder)
        conn.rollback()  # end the snapshot of pg_stat_activity
        if seen.alive:
            self._noted = (holder, seen.session)
            return False
        noted, self._noted = self._noted, None
        if noted is None:
            return False  # an ActiveMQ holder (no guard), or one never seen: wait for its lease
        if noted[1] == seen.session:
            return self.take_over_dead(holder, "its session ended while the database stayed up")
        log.info(
            "the guard session of %s ended while this standby's own session ended too (a "
            "database restart): waiting for the guard to come back, or for the lease to expire",
            holder,
        )
        return False

    def row_locked(self) -> str:
        """Why a lease cannot be taken while a row-lock master holds the lock row."""
        return (
            f"the lock {self.schema.lock.name} is held as a row lock by another session (a "
            "row-lock master: ActiveMQ's default database locker, or mqstore --lock row); this "
            "broker uses a lease, which that master does not see: every broker sharing the "
            "lock must use the same lock mode (--lock row here, or a lease locker there)"
        )

    def acquire(self, stop: threading.Event) -> bool:
        # what was last logged: the row, or (the name, OwnLease) while it names this broker,
        # which is logged once as a warning rather than at each of that holder's renewals
        last_seen: object = None
        retries = RetryWarnings(log)
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
                    conn = self._watch.session()
                    status = read_lock(conn, self.schema)
                    if self._standby_check(conn, status):
                        return True
                    own = None if self._own is OwnLease.GONE else self._own  # taken since
                    conn.rollback()
                    retries.succeeded()
                    seen: object = status if own is None else (status.broker_name, own)
                    if status.journaled:  # its renewals are not news: said once
                        seen = (status.broker_name, "journaled")
                    if seen != last_seen:
                        level = logging.INFO if seen is status else logging.WARNING
                        log.log(level, "%s", standby_message(status, own))
                        last_seen = seen
                except RowLockedError as exc:
                    if last_seen != "row":
                        log.warning("%s; waiting until it lets go", exc)
                        last_seen = "row"
                except SQLAlchemyError as exc:
                    self._watch.drop()
                    retries.failed(
                        "lock attempt failed", describe_connect_error(exc, self.engine.url)
                    )
                stop.wait(self.poll_s)
            return False
        finally:
            self._watch.drop()
            self._noted = None

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
            owner = (
                "was released by another process" if found is None else f"now belongs to {found!r}"
            )
            self._lose(f"the lease on {self.schema.lock.name} {owner}")
            raise LockLostError(
                f"the lease on {self.schema.lock.name} {owner}: this store "
                f"({self.holder!r}) stopped writing. Restart it to wait as a standby."
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
        """ActiveMQ's renewal, ``UPDATE ... WHERE BROKER_NAME = me``, also matching only a
        TIME this holder wrote; 0 rows means the lease is lost. ActiveMQ's form alone would
        renew the lease of a second process under this name that took it (after this one's
        lease ran out, or its guard session ended): both would stay master. A database that
        does not answer is not a loss: the lease stays ours until its local deadline (then
        writes are refused), and the next renewal that gets through keeps it if no other
        broker took it meanwhile."""
        if self.lost_reason:
            return Renewal.LOST
        try:
            try:
                started, loss = self._renew_once()
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
                # a pooled connection that ended with a database restart: once more, on a new one
                started, loss = self._renew_once()
        except SQLAlchemyError as exc:  # the database, or no pooled connection in time
            return self._unanswered(exc)
        if loss is not None:
            self._lose(loss)
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

    def _renew_once(self) -> tuple[float, str | None]:
        """One renewal: when it was sent, and why the lease is lost if it did not match."""
        ours = self._ours()
        with self.engine.begin() as conn:
            started, until = self._write_lease(conn, lambda _now: ours, unconfirmed=True)
            loss = None if until is not None else self._loss(find_lock(conn, self.schema))
        if until is not None:
            with self._mutex:
                self._ends = [until]
        return started, loss

    def _loss(self, status: LockStatus | None) -> str:
        name = self.schema.lock.name
        if status is None:  # ActiveMQ's renewal updates no row either: lost
            return f"the lock row ID=1 of {name} was deleted; `mqstore db upgrade` restores it"
        if status.broker_name == self.holder:
            return (
                f"the lock {name} was renewed by another process under this broker's name "
                f"{self.holder!r} (it is {status.describe()}); give each broker its own "
                "--broker-name"
            )
        return f"the lock {name} is now {status.describe()}"

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

    def leave(self) -> None:
        """Stop holding the lease without freeing it: the row keeps naming this broker."""
        with self._mutex:
            self._held = False
        self._close_guard()

    def release(self) -> None:
        """ActiveMQ's release: BROKER_NAME NULL, TIME 0, only if we hold it (the row as this
        holder wrote it, see :meth:`renew`)."""
        lock = self.schema.lock
        with self._mutex:
            self._held = False
        self._close_guard()
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    sa.update(lock)
                    .where(self._ours(), lock.c.id == 1)
                    .values(broker_name=None, time=0)
                )
        except DBAPIError as exc:
            log.warning("could not release the lease: %s", str(exc).splitlines()[0])
