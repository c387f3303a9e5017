"""The lease of a journaled broker, which never waits as a standby."""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.engine import Connection

from mqstore.errors import LockError
from mqstore.lock.lease import LeaseLocker
from mqstore.lock.locker import Renewal
from mqstore.lock.standby import OwnLease, same_name_hint
from mqstore.lock.status import read_lock

log = logging.getLogger(__name__)


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
                own = lease.own_lease(conn, status) if status.broker_name == self.holder else None
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
        self.lease.release()

    def fence(self, conn: Connection) -> None:
        self.lease.fence(conn)

    @property
    def fence_holder(self) -> str:
        return self.lease.fence_holder

    fence_session = None

    def check_fence(self, found: str | None) -> None:
        self.lease.check_fence(found)
