"""The PostgreSQL store: ActiveMQ's JDBC row semantics on SQLAlchemy Core and psycopg 3.

:class:`PostgresStore` owns the store's state and lifecycle (start, stop, the lock keeper,
the periodic maintenance) and assembles the port from its parts: the ID sequence
(:mod:`~mqstore.store.sequence`), fenced sessions (:mod:`~mqstore.store.sessions`), the
write path (:mod:`~mqstore.store.writes`), reads (:mod:`~mqstore.store.reads`),
maintenance (:mod:`~mqstore.store.maintenance`), durable subscriptions
(:mod:`~mqstore.store.topics`) and XA (:mod:`~mqstore.store.xa`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.engine import Engine

from mqstore import migrate
from mqstore.db import check_connection
from mqstore.errors import ConfigError, StoreClosedError
from mqstore.lock import Locker, NoLocker, Renewal
from mqstore.schema import MAX_BODY_BYTES
from mqstore.statements import CommitShape, statements_for
from mqstore.store.commit_connections import CommitConnections
from mqstore.store.maintenance import Maintenance
from mqstore.store.model import (
    Batch,
    Cursor,
    PreparedTransaction,
    StoredMessage,
    Subscription,
    SubscriptionKey,
    Xid,
)
from mqstore.store.reads import MessageReads
from mqstore.store.topics import TopicOperations
from mqstore.store.xa import XaOperations

log = logging.getLogger(__name__)


class PostgresStore(Maintenance, MessageReads):
    """The store port on PostgreSQL (see :class:`mqstore.store.port.Store`).

    Only the lock holder writes: :meth:`start` blocks until ``locker`` is held, and every
    write checks it first. IDs come from an in-memory sequence resumed, as ActiveMQ does,
    from max(MAX(ID), MAX(LAST_ACKED_ID)).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        prefix: str = "",
        locker: Locker | None = None,
        prioritized: bool = False,
        history: bool = True,
        history_bodies: bool = False,
        history_retention_days: float = 0.0,
        max_message_bytes: int = 100 * 1024 * 1024,
        cleanup_interval_s: float = 60.0,
        cleanup_batch: int = 1000,
        on_lock_lost: Callable[[], None] | None = None,
    ) -> None:
        if max_message_bytes > MAX_BODY_BYTES:
            raise ConfigError(
                f"max_message_bytes {max_message_bytes} is more than PostgreSQL can hand back "
                f"in one value (it reads BYTEA hex-encoded, under 1 GiB): set at most "
                f"{MAX_BODY_BYTES} (511 MiB)"
            )
        self.engine = engine
        self.prefix = prefix
        self.sql = statements_for(prefix, prioritized)
        self.schema = self.sql.schema
        self.locker: Locker = locker or NoLocker()
        self._prioritized = prioritized
        self.history, self.history_bodies = history, history_bodies
        self.history_retention_days = history_retention_days
        self.max_message_bytes = max_message_bytes
        self.cleanup_interval_s, self.cleanup_batch = cleanup_interval_s, cleanup_batch
        self.on_lock_lost = on_lock_lost
        self._seq_lock = threading.Lock()
        self._last_id = 0
        self._inflight: dict[int, int] = {}  # first ID of an uncommitted add batch -> count
        self._started = False
        self._lock_lost = False
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._counters: dict[str, float] = {"added": 0, "removed": 0, "acked": 0, "cleaned": 0}
        self._commits = CommitConnections(engine)
        self._commit_sql: dict[CommitShape, str] = {}
        self.xa = XaOperations(self)
        self.topics = TopicOperations(self)

    # ------------------------------------------------------------------ lifecycle
    @property
    def started(self) -> bool:
        return self._started

    @property
    def lock_lost(self) -> bool:
        """Deposed: the keeper found the lock taken (or ended); this store never writes again."""
        return self._lock_lost

    def start(self, stop: threading.Event | None = None) -> None:
        """Check the database, wait for the master lock, resume the ID sequence."""
        check_connection(self.engine)
        with self.engine.connect() as conn:
            migrate.require_head(conn, self.prefix)
        if not self.locker.acquire(stop or self._stopping):
            raise StoreClosedError("store start was cancelled while waiting for the lock")
        with self.engine.connect() as conn:
            self._last_id = int(conn.execute(self.sql.last_sequence).scalar_one())
        self._stopping.clear()
        self._commits.reopen()
        self._lock_lost = False
        self._started = True
        keeper = threading.Thread(target=self._keep_lock, name="mqstore-lock-keeper", daemon=True)
        keeper.start()
        self._threads.append(keeper)
        if self.cleanup_interval_s > 0:
            self._spawn("mqstore-cleanup", self._periodic_cleanup, self.cleanup_interval_s)
        log.info("store started (prefix %r, last ID %d)", self.prefix, self._last_id)

    def stop(self) -> None:
        """Stop background work, release the lock. Idempotent."""
        if not self._started:
            return
        self._started = False
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads.clear()
        self._commits.close()
        self.locker.release()

    def _spawn(self, name: str, fn: Callable[[], None], every_s: float) -> None:
        def loop() -> None:
            while not self._stopping.wait(every_s):
                try:
                    fn()
                except Exception:  # a background task must outlive one failed run
                    log.exception("%s failed; retrying in %.1f s", name, every_s)

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _keep_lock(self) -> None:
        """Renew the lock every ``renew_interval_s`` until the store stops or is deposed.

        A renewal the database did not answer is retried every second or so: the lease stays
        ours until its local deadline, writes are then refused (``check_writable``), and the
        first renewal that gets through resumes them if no other broker took the lease. Only
        a lock another broker holds (or that ended) deposes the store: found by a renewal,
        or within a second by a write's fence. Its background work then stops, writes are
        refused for good and ``on_lock_lost`` is called, once.
        """
        renew_s = self.locker.renew_interval_s
        tick_s = min(1.0, renew_s)
        due = time.monotonic() + renew_s
        while not self._stopping.wait(max(0.0, min(tick_s, due - time.monotonic()))):
            if self.locker.lost_reason:
                break  # a write's fence found the lock taken
            if time.monotonic() < due:
                continue
            started = time.monotonic()
            try:
                outcome = self.locker.renew()
            except Exception:  # the keeper must outlive one failed renewal
                log.exception("lock renewal failed; retrying in %.1f s", tick_s)
                outcome = Renewal.UNREACHABLE
            if outcome is Renewal.LOST:
                break
            due = started + (renew_s if outcome is Renewal.KEPT else tick_s)
        else:
            return
        self._lock_lost = True
        log.error(
            "no longer master: %s; this store stopped writing",
            self.locker.lost_reason or f"the lock {self.schema.lock.name} was lost",
        )
        self._stopping.set()
        if self.on_lock_lost is not None:
            self.on_lock_lost()

    # ------------------------------------------------------------------ durable topics
    def add_subscription(
        self,
        key: SubscriptionKey,
        *,
        selector: str | None = None,
        sub_dest: str | None = None,
        retroactive: bool = False,
    ) -> Subscription:
        return self.topics.add(key, selector=selector, sub_dest=sub_dest, retroactive=retroactive)

    def get_subscription(self, key: SubscriptionKey) -> Subscription | None:
        return self.topics.get(key)

    def subscriptions(self, container: str | None = None) -> list[Subscription]:
        return self.topics.of_topic(container)

    def delete_subscription(self, key: SubscriptionKey) -> None:
        self.topics.delete(key)

    def page_subscription(
        self, key: SubscriptionKey, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        return self.topics.page(key, after, limit, max_bytes)

    def pending_count(self, key: SubscriptionKey) -> int:
        return self.topics.pending(key)

    # ------------------------------------------------------------------ XA
    def xa_prepare(self, xid: Xid, batch: Batch) -> list[int]:
        return self.xa.prepare(xid, batch)

    def xa_commit(self, xid: Xid) -> None:
        self.xa.commit(xid)

    def xa_rollback(self, xid: Xid) -> None:
        self.xa.rollback(xid)

    def xa_recover(self) -> list[PreparedTransaction]:
        return self.xa.recover()


__all__ = ["PostgresStore"]
