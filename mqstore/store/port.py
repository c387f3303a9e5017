"""The store port: the one narrow interface a broker calls (see docs/store-api.md).

Implemented by :class:`mqstore.store.postgres.PostgresStore` and by the journaled store in
``journal``, which wraps it; a broker cannot tell them apart except by speed. All methods
are thread-safe and synchronous; an asyncio broker calls them from a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from mqstore.store.model import (
    EXPIRE_MAX_BYTES,
    Ack,
    Batch,
    Cursor,
    NewMessage,
    Outcome,
    PreparedTransaction,
    StoredMessage,
    StoreStats,
    Subscription,
    SubscriptionKey,
    Xid,
)


@runtime_checkable
class Store(Protocol):
    """Persistence for queues, durable topics and transactions on ActiveMQ's tables."""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Take the master lock (waiting as a slave), check the schema, resume the ID sequence."""

    def stop(self) -> None:
        """Flush, release the lock and close connections. Idempotent."""

    @property
    def prioritized(self) -> bool:
        """Whether the PRIORITY column holds real priorities (ActiveMQ's prioritizedMessages)."""

    # -- messages (queues and topics) ----------------------------------------------------------
    def new_producers(self, prefix: str) -> None:
        """Producer ids (MSGID_PROD) starting with ``prefix`` are the caller's own and have
        stored nothing yet. A hint: the journaled store then accepts their first messages
        without asking the database whether they are duplicates."""

    def add(self, messages: Sequence[NewMessage]) -> list[int]:
        """Store messages atomically; returns their IDs (strictly increasing) in order."""

    def remove(self, container: str, ids: Sequence[int], outcome: Outcome = ...) -> int:
        """Remove messages by ID atomically; returns how many were stored."""

    def commit(self, batch: Batch) -> list[int]:
        """Apply adds, removes and durable acks as one atomic unit; returns the new IDs."""

    def page(
        self, container: str, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        """Up to ``limit`` visible messages in delivery order (PRIORITY DESC, ID) after a
        cursor; with ``max_bytes``, only rows whose predecessors' MSG bytes stay below it
        (:func:`~mqstore.store.model.within_bytes`: the first row always comes)."""

    def get(self, message_id: int) -> StoredMessage | None:
        """The row with this ID, or None."""

    def find(
        self, msgid_prod: str, msgid_seq: int, container: str | None = None
    ) -> StoredMessage | None:
        """Look a message up by its JMS message id (producer id and sequence)."""

    def update(self, container: str, message_id: int, msg: bytes) -> None:
        """Rewrite a stored body (e.g. a persisted redelivery counter)."""

    def count(self, container: str) -> int:
        """Visible messages in a destination (XA-prepared rows excluded)."""

    def purge(self, container: str) -> int:
        """Delete every message of a destination; returns how many."""

    def destinations(self) -> list[str]:
        """Every container that has messages or durable subscriptions."""

    # -- durable topic subscriptions --------------------------------------------------------
    def add_subscription(
        self,
        key: SubscriptionKey,
        *,
        selector: str | None = None,
        sub_dest: str | None = None,
        retroactive: bool = False,
    ) -> Subscription:
        """Create (or return the existing) subscription; it starts after the newest message."""

    def get_subscription(self, key: SubscriptionKey) -> Subscription | None:
        """Look one subscription up."""

    def subscriptions(self, container: str | None = None) -> list[Subscription]:
        """All durable subscriptions, or those of one topic."""

    def delete_subscription(self, key: SubscriptionKey) -> None:
        """Delete it; messages no remaining subscription needs are cleaned up.
        InvalidMessageError (nothing deleted) unless its container is a topic."""

    def acknowledge(self, acks: Sequence[Ack]) -> None:
        """Advance LAST_ACKED_ID of subscriptions (per priority in prioritized mode)."""

    def page_subscription(
        self, key: SubscriptionKey, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        """A subscription's pending messages (after its last ack) in delivery order, bounded
        as :meth:`page`. Without prioritizedMessages that order is by ID alone and every
        row's ``priority`` is 0, whatever its PRIORITY column: the cursor and the acks of
        the rows delivered then never pass a message not yet delivered."""

    def pending_count(self, key: SubscriptionKey) -> int:
        """How many messages a subscription has not acknowledged."""

    # -- XA --------------------------------------------------------------------------------
    def xa_prepare(self, xid: Xid, batch: Batch) -> list[int]:
        """Make a transaction's work durable but invisible; returns IDs of its adds. A batch
        with no work is refused (TransactionError): such a branch is read-only (XA_RDONLY)."""

    def xa_commit(self, xid: Xid) -> None:
        """Make a prepared transaction's work visible (adds move to fresh IDs)."""

    def xa_rollback(self, xid: Xid) -> None:
        """Undo a prepared transaction."""

    def xa_recover(self) -> list[PreparedTransaction]:
        """Prepared (in-doubt) transactions, e.g. after a restart."""

    # -- maintenance -----------------------------------------------------------------------
    def cleanup(self) -> int:
        """Delete topic messages every subscription acknowledged; returns rows deleted."""

    def expire(
        self,
        now_ms: int,
        limit: int,
        *,
        remove: bool = True,
        max_bytes: int | None = EXPIRE_MAX_BYTES,
    ) -> list[StoredMessage]:
        """Up to ``limit`` messages whose EXPIRATION passed (oldest first), removed unless
        ``remove=False``; bounded by ``max_bytes`` (None: no bound) as a page is
        (:func:`~mqstore.store.model.within_bytes`: the first row always comes): the caller
        gets the rest next call."""

    def stats(self) -> StoreStats:
        """Depths, backlogs and counters."""
