"""The lease of a journaled broker, which never waits as a standby."""

from __future__ import annotations

import logging
import threading
import time

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from mqstore.errors import LockError
from mqstore.lock.lease import LeaseLocker, guard_name
from mqstore.lock.locker import Renewal
from mqstore.lock.standby import GuardWatch, OwnLease, same_name_hint
from mqstore.lock.status import find_lock, journal_kept_advice, read_lock
from mqstore.schema import StoreSchema

log = logging.getLogger(__name__)


def unfinished_journals(conn: Connection, schema: StoreSchema) -> list[tuple[str, str | None]]:
    """The journals of the database (id, broker) whose broker did not stop cleanly, as
    ``MQSTORE_JOURNAL`` records them (``journal.runs`` writes them)."""
    j = schema.journal.c
    rows = conn.execute(
        sa.select(j.journal_id, j.broker_name).where(j.stopped_at.is_(None)).order_by(j.updated_at)
    ).all()
    return [(r.journal_id, r.broker_name) for r in rows]


class ExclusiveLease:
    """A lease taken without ever waiting as a standby, for a journaled broker.

    A journaled master keeps recent work in its local journal until a checkpoint, so a
    standby taking over the lease would serve a stale database. The journaled broker still
    takes ActiveMQ's lease (so nothing else writes while it runs), but refuses to start when
    another broker holds it instead of queueing behind it. Its lease ends are journaled
    ones (:mod:`mqstore.lease_time`): no standby, ActiveMQ's or mqstore's, takes them over,
    and it frees the lease only once no journal of the database is left with writes the
    database lacks (:meth:`release`).
    """

    def __init__(self, lease: LeaseLocker) -> None:
        lease.journaled = True  # its lease ends from now on are journaled ones
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
                own = lease.own_lease(conn, status) if status.broker_name == self.holder else None
            if own is None and status.journaled:
                raise LockError(
                    f"the lock {name} is {status.describe()}: "
                    f"{journal_kept_advice(status.broker_name)}."
                )
            if own is None:
                raise LockError(
                    f"the lock {name} is {status.describe()}; a broker with a local journal "
                    "never waits as a standby (it would take over a stale database). Stop the "
                    "other broker, or run this one with --no-journal to be its standby."
                )
            if own is OwnLease.GONE and lease.take_over_dead(
                self.holder, "an earlier run of this broker"
            ):
                log.info("holding the lease on %s exclusively (journaled broker)", name)
                return True
            now = time.monotonic()
            if give_up is None:
                give_up = now + lease.lease_ms / 1000 + lease.poll_s
                if own is OwnLease.ALIVE:
                    log.warning(
                        "the lock %s is %s. %s Waiting up to one lease for it to let go, in "
                        "case it is an earlier run of this broker still stopping",
                        name,
                        status.describe(),
                        same_name_hint(),
                    )
                else:
                    log.warning(
                        "the lock %s is %s, this broker's own name: an earlier run did not "
                        "release it (killed, or stopped while the database was unreachable); "
                        "waiting for that lease to expire",
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
        """Free the lease, unless a journal of the database did not stop cleanly (this
        broker's, when its final checkpoint did not apply everything, or the one it was
        refused for): the database lacks writes that journal holds, so the lease stays
        journaled under this broker's name, for a broker on that journal to take back."""
        try:
            with self.lease.engine.connect() as conn:
                left = unfinished_journals(conn, self.lease.schema)
        except SQLAlchemyError as exc:  # the release could not be written either
            log.debug("cannot tell whether a journal is left unapplied: %s", exc)
            left = None
        if left == []:
            self.lease.release()
            return
        self.lease.leave()
        named = ", ".join(f"{j} of {b or '?'}" for j, b in left or [])
        log.warning(
            "keeping the lease on %s under %s: %s, so the database lacks writes it holds "
            "and no other broker may take over; a broker started on that journal takes the "
            "lease back (`mqstore journal forget JOURNAL_ID --yes` frees it if the journal is "
            "lost for good)",
            self.lease.schema.lock.name,
            self.holder,
            f"journal {named} did not stop cleanly" if named else "the database did not answer",
        )

    def fence(self, conn: Connection) -> None:
        self.lease.fence(conn)

    @property
    def fence_holder(self) -> str:
        return self.lease.fence_holder

    fence_session = None

    def check_fence(self, found: str | None) -> None:
        self.lease.check_fence(found)


def free_kept_lease(conn: Connection, schema: StoreSchema, holder: str | None) -> bool:
    """Once a lost journal of ``holder`` is accepted as lost (in ``conn``'s transaction):
    free the lease that broker kept for it (:meth:`ExclusiveLease.release`), if the row
    still holds it and no journal is left unfinished. True when freed. :class:`LockError`
    while ``holder`` runs (its guard session is connected): its journal is not lost."""
    status = find_lock(conn, schema)
    if holder is None or status is None or not status.journaled or status.broker_name != holder:
        return False
    name = guard_name(schema, holder)
    if GuardWatch(conn.engine).see(conn, name).alive:
        raise LockError(
            f"broker {holder} holds the lock {schema.lock.name} and is running (its guard "
            f"session {name} is connected): its journal is not lost, nothing was changed. "
            "Stop that broker cleanly instead"
        )
    if unfinished_journals(conn, schema):
        return False
    lock = schema.lock
    freed = conn.execute(
        sa.update(lock)
        .where(lock.c.id == 1, lock.c.broker_name == holder, lock.c.time == status.stored_time)
        .values(broker_name=None, time=0)
    )
    return freed.rowcount == 1
