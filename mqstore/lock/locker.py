"""What the store needs from a master lock (:class:`Locker`), and the lock of a broker
that shares its tables with nobody (:class:`NoLocker`)."""

from __future__ import annotations

import enum
import threading
from typing import Protocol

from sqlalchemy.engine import Connection


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
