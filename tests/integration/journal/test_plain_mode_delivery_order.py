"""A store without prioritizedMessages delivers a durable subscription's messages in ID
order, whatever PRIORITY ActiveMQ (with prioritizedMessages) stored them with: its one
position, the least LAST_ACKED_ID, passes a message only once it was delivered and
acknowledged, so no acknowledgement or cleanup skips one that was not (reference §5:
ActiveMQ's statements without priority read ``ORDER BY M.ID``).

Every test runs on the database store, the journaled store with everything in its window,
and the journaled store checkpointed after each step.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from journal.store import JournaledStore
from mqstore.store import Ack, Store, SubscriptionKey
from tests.integration.journal.conftest import Subject
from tests.integration.test_store_plain_mode_priorities import _stored, _subscribed

T = "topic://prices"
A = SubscriptionKey(T, "client-a", "sub-a")
B = SubscriptionKey(T, "client-b", "sub-b")


def _pages(store: Store, key: SubscriptionKey, limit: int = 2) -> list[int]:
    """Every pending ID, page by page from the start, in the order the pages bring them."""
    seen: list[int] = []
    cursor = None
    while rows := store.page_subscription(key, cursor, limit):
        seen += [r.id for r in rows]
        cursor = rows[-1].cursor
    return seen


def _stored_ids(subject: Subject) -> set[int]:
    if isinstance(subject.store, JournaledStore):
        subject.store.checkpoint()
    with subject.engine.connect() as conn:
        return set(conn.execute(sa.text("SELECT id FROM activemq_msgs")).scalars())


def test_plain_store_pages_a_subscription_in_id_order_whatever_the_priority_column(
    subject: Callable[..., Subject],
) -> None:
    s = subject()
    ids = _stored(s.engine, T, [0, 5, 0, 9, 4])
    _subscribed(s.engine, A, (0,))
    s.reopen()  # the journaled store reads the rows ActiveMQ wrote
    assert _pages(s.store, A) == ids
    assert _pages(s.store, A, limit=1) == ids
    assert s.store.pending_count(A) == 5


def test_plain_store_delivers_each_message_once_when_acknowledged_one_at_a_time(
    subject: Callable[..., Subject],
) -> None:
    s = subject()
    ids = _stored(s.engine, T, [0, 5, 0])
    _subscribed(s.engine, A, (0,))
    s.reopen()
    delivered: list[int] = []
    while rows := s.store.page_subscription(A, None, 1):
        [row] = rows
        assert row.id not in delivered, f"{row.id} delivered again after {delivered}"
        delivered.append(row.id)
        s.store.acknowledge([Ack(A, row.id, row.priority)])  # as a broker acks the row
        s.settle()
        assert s.store.cleanup() >= 0
        undelivered = set(ids) - set(delivered)
        assert undelivered <= _stored_ids(s), f"deleted before delivery, after {delivered}"
        if len(delivered) == 1:
            s.reopen()  # a restart after the first acknowledgement
    assert delivered == ids
    assert s.store.pending_count(A) == 0


def test_plain_store_acknowledges_every_acks_row_of_an_adopted_subscription_in_the_window(
    subject: Callable[..., Subject],
) -> None:
    s = subject()
    _stored(s.engine, T, [0, 5, 0, 7])
    _subscribed(s.engine, A, range(10))  # ActiveMQ with prioritizedMessages wrote it
    _subscribed(s.engine, B, (0,))
    s.reopen()
    s.store.acknowledge([Ack(A, 2)])
    s.settle()
    assert _pages(s.store, A) == [3, 4]
    assert s.store.pending_count(A) == 2
    assert s.store.stats().subscriptions == {A: 2, B: 4}
    s.store.acknowledge([Ack(B, 1)])
    s.settle()
    assert s.store.cleanup() == 1
    assert _stored_ids(s) == {2, 3, 4}
    assert _pages(s.store, B) == [2, 3, 4]
