"""The maintenance of the PostgreSQL store: the cleanup of topic messages no subscription
needs, expiry, purge, and the periodic run of the cleanup and the history trim."""

from __future__ import annotations

import threading
from collections.abc import Callable

import sqlalchemy as sa

from mqstore.store.history import TrimBound, trim_history
from mqstore.store.model import EXPIRE_MAX_BYTES, NO_BYTE_BOUND, Outcome, Removal, StoredMessage
from mqstore.store.sessions import log
from mqstore.store.validation import check_container
from mqstore.store.writes import MessageWrites


class Maintenance(MessageWrites):
    """Cleanup, expiry, purge and the periodic maintenance of a
    :class:`mqstore.store.postgres.PostgresStore` (whose constructor sets the state)."""

    history_retention_days: float
    cleanup_batch: int
    _stopping: threading.Event

    def cleanup(self) -> int:
        """Delete acknowledged topic messages, all priorities, in short batches."""
        total = 0
        while not self._stopping.is_set():
            deleted, more = self.clean_batch()
            total += deleted
            if not more:
                break
        return total

    def clean_batch(self) -> tuple[int, bool]:
        """One batch of :meth:`cleanup` (``cleanup_batch`` rows at most, one transaction):
        the rows deleted, and whether there may be more (the batch was full)."""
        with self.transaction() as conn:
            found = conn.execute(self.sql.cleanup_candidates, {"limit": self.cleanup_batch})
            candidates = [Removal(container, i) for i, container in found]
            deleted = self.delete_rows(conn, candidates)
        self._counters["cleaned"] += deleted
        return deleted, len(candidates) >= self.cleanup_batch

    def count_cleaned(self, rows: int) -> None:
        """Count topic messages removed because no subscription needs them."""
        self._counters["cleaned"] += rows

    def expire(
        self,
        now_ms: int,
        limit: int,
        *,
        remove: bool = True,
        max_bytes: int | None = EXPIRE_MAX_BYTES,
    ) -> list[StoredMessage]:
        params = {
            "now": now_ms,
            "limit": limit,
            "max_bytes": NO_BYTE_BOUND if max_bytes is None else max_bytes,
        }
        if remove:
            # Rows locked first, skipping any a concurrent removal holds: every row returned
            # is one this call removed (a consumer's ack in flight may take it instead).
            with self.transaction() as conn:
                rows = [
                    StoredMessage.from_row(r)
                    for r in conn.execute(self.sql.expired_locked, params).all()
                ]
                self.delete_rows(conn, [Removal(m.container, m.id, Outcome.EXPIRED) for m in rows])
            return rows
        return self.read(
            lambda c: [StoredMessage.from_row(r) for r in c.execute(self.sql.expired, params).all()]
        )

    def purge(self, container: str) -> int:
        """Remove the messages stored when it starts, as ActiveMQ's one DELETE does: those
        added meanwhile (IDs handed out later) stay, and a busy destination's purge ends."""
        check_container(container)
        self.check_writable()
        total = 0
        msgs = self.schema.msgs
        next_ids = (
            sa.select(msgs.c.id)
            .where(
                msgs.c.container == container,
                msgs.c.xid.is_(None),
                msgs.c.id <= self.stats_last_id(),
            )
            .order_by(msgs.c.id)
            .limit(5000)
        )  # IDs only: a purge never reads the bodies it removes
        while True:
            ids = self.read(lambda c: c.execute(next_ids).scalars().all())
            if not ids:
                return total
            total += self.remove(container, list(ids), Outcome.PURGED)

    def _periodic_cleanup(self) -> None:
        """The maintenance timer's run: :meth:`maintain` with this store's own cleanup."""
        self.maintain(self.cleanup)

    def maintain(self, cleanup: Callable[[], int]) -> None:
        """One run of the periodic maintenance, on the master only: ``cleanup`` (this
        store's :meth:`cleanup`, or that of a store in front of it) and the history trim.
        Failures are logged; the next run retries."""
        try:
            if self.locker.is_held():
                cleanup()
        except Exception:  # keep the timer alive; the next run retries
            log.exception("topic cleanup failed")
        try:
            if self.history_retention_days > 0 and self.locker.is_held():
                self.trim_old_history()
        except Exception:
            log.exception("history trim failed")

    def trim_old_history(self) -> int:
        """Delete history rows older than ``history_retention_days``; returns how many."""
        bound = TrimBound.older_than(self.history_retention_days)
        trimmed = trim_history(
            self.engine, self.prefix, bound, batch=self.cleanup_batch, stop=self._stopping
        )
        if trimmed:
            log.info(
                "trimmed %d history row(s) older than %g day(s)",
                trimmed,
                self.history_retention_days,
            )
        return trimmed


__all__ = ["Maintenance"]
