"""What a lease standby sees of the holder: the holder's guard session, watched from a session
of its own, and what it tells the operator while it waits."""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from mqstore.lock.status import LockStatus, journal_kept_advice

#: A holder's guard session as a standby's watch session sees it, with that watch session's
#: backend pid and the server's start (with the session's own generation, see
#: :meth:`GuardWatch.see`, they stay the same only while neither the watch session nor
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
class GuardSeen:
    """One look at a holder's guard session."""

    alive: bool
    session: tuple[int, int, object]  # the watch session: (generation, backend pid, server start)
    up_ms: int  # how long the server has been up


class GuardWatch:
    """A standby's own session for watching guard sessions. A guard seen from one watch
    session vouches for nothing once that session is dropped: each new one has a new
    generation."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._conn: Connection | None = None
        self._generation = 0

    def session(self) -> Connection:
        """The watch session, opened when there is none."""
        if self._conn is None:
            self._conn = self.engine.connect()
            self._generation += 1
        return self._conn

    def drop(self) -> None:
        """Drop the watch session (after an error): a guard seen from it proves nothing
        about why that guard is gone when a later session looks (the server may have
        restarted in between)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(SQLAlchemyError):
                conn.invalidate()
                conn.close()

    def see(self, conn: Connection, guard_name: str) -> GuardSeen:
        """Is the guard session ``guard_name`` open, as ``conn`` sees it now?"""
        row = conn.execute(_GUARD_SEEN, {"name": guard_name}).one()
        generation = self._generation if conn is self._conn else 0
        return GuardSeen(bool(row.alive), (generation, int(row.pid), row.started), int(row.up_ms))


class OwnLease(enum.Enum):
    """What a broker finds when the lease is held under its own name."""

    GONE = "gone"  # no guard, and the holder renewed on this server: it died; take it now
    UNKNOWN = "unknown"  # no proof either way (a database restart since): wait for expiry
    ALIVE = "alive"  # a guard session under this name is open


def judge_own_lease(seen: GuardSeen, renewed_ms_ago: int | None) -> OwnLease:
    """Is a holder under this broker's own name provably gone? Only when its guard is not
    open and it last renewed at least :data:`GUARD_GRACE_MS` after the server started: it
    then had its guard on this very server, and a session that ends without a server
    restart ends with its process. ``renewed_ms_ago`` is None when the row holds no time."""
    if seen.alive:
        return OwnLease.ALIVE
    if renewed_ms_ago is not None and renewed_ms_ago + GUARD_GRACE_MS < seen.up_ms:
        return OwnLease.GONE
    return OwnLease.UNKNOWN


def same_name_hint() -> str:
    """Who holds a lease under this broker's own name while its guard session is open, and
    how to tell the two brokers apart: sentences for messages that just named the holder."""
    return (
        "That is this broker's own name: another process uses it, a second broker on this "
        "host (every broker on a host has the same default name, mqstore-<host name>) or one "
        "on another host given this name. `mqstore lock status` names the holder only by it: "
        "give each broker its own name with --broker-name (or MQSTORE_BROKER_NAME)."
    )


def standby_message(status: LockStatus, own: OwnLease | None) -> str:
    """What a waiting standby logs about the lock row: who holds it and, when that is this
    standby's own name (``own`` is then what it found out about that holder), who that is."""
    waiting = f"waiting as slave: lock {status.describe()}"
    if status.journaled:
        return f"{waiting}. {journal_kept_advice(status.broker_name)}."
    if own is OwnLease.ALIVE:
        return f"{waiting}. {same_name_hint()}"
    if own is OwnLease.UNKNOWN:
        return (
            f"{waiting}. That is this broker's own name: an earlier run of this broker that "
            "did not release it (killed, or stopped while the database was unreachable), or "
            "another process with the same name; waiting for that lease to expire."
        )
    return waiting
