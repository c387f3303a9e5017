"""What the store needs from a master lock (:class:`Locker`), and the lock of a broker
that shares its tables with nobody (:class:`NoLocker`)."""

from __future__ import annotations

import enum
import threading
from typing import Protocol

from sqlalchemy.engine import Connection, Engine

from mqstore.errors import ConfigError, LockError
from mqstore.lock.status import (
    ROW_LOCK_MASTER,
    database_now_ms,
    find_lock,
    journal_kept_advice,
    row_lock_held,
)
from mqstore.schema import StoreSchema


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


class NoLocker:
    """For a single broker that shares its tables with nobody (tests, tools).

    It keeps nobody out. Given the ``engine`` and ``schema`` (as ``mqstore serve --lock
    none`` does), :meth:`acquire` still looks once at the lock row: while another broker is
    master, it refuses with :class:`LockError` rather than write beside it. Without them it
    looks at nothing.
    """

    renew_interval_s = 3600.0

    def __init__(
        self,
        engine: Engine | None = None,
        schema: StoreSchema | None = None,
        holder: str = "unlocked",
    ) -> None:
        if (engine is None) != (schema is None):
            raise ConfigError("NoLocker looks at the lock row only given both engine and schema")
        self.engine, self.schema, self.holder = engine, schema, holder

    def acquire(self, stop: threading.Event) -> bool:
        """True at once, or :class:`LockError` naming the master when another broker holds
        the lock now: a lease live on the database clock under another name than
        :attr:`holder`, or the row locked by a row-lock master (probed as ``mqstore lock
        status`` does). A free or expired lease, or one under :attr:`holder`, is no master."""
        if self.engine is None or self.schema is None:
            return True
        name = self.schema.lock.name
        with self.engine.connect() as conn:
            status = find_lock(conn, self.schema)
            now_ms = database_now_ms(conn)
            if status is not None and status.live(now_ms) and status.broker_name != self.holder:
                master, standby = status.describe(now_ms), "--lock lease"
            elif row_lock_held(conn, self.schema):
                master, standby = ROW_LOCK_MASTER, "--lock row"
            else:
                return True
        if status is not None and status.journaled and master != ROW_LOCK_MASTER:
            raise LockError(
                f"the lock {name} is {master}; this broker ({self.holder!r}), started with "
                f"--lock none, would write beside it: nothing was changed. "
                f"{journal_kept_advice(status.broker_name)}."
            )
        raise LockError(
            f"the lock {name} is {master}; that broker is master, and this one "
            f"({self.holder!r}), started with --lock none, would write beside it: nothing was "
            f"changed. Stop that broker, or start this one with --no-journal {standby} to be "
            "its standby."
        )

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
