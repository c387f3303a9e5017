"""A store without prioritizedMessages on rows ActiveMQ stored with it.

ActiveMQ with ``prioritizedMessages=true`` writes the JMS priority into ACTIVEMQ_MSGS.PRIORITY
(and ten ACKS rows per subscription where the primary key lets it). Its statements without
priority (reference §5) read a durable subscription's messages after LAST_ACKED_ID whatever
their PRIORITY, and acknowledge every ACKS row of the subscription; a plain store does the
same, and its cleanup keeps such a message until every subscription has passed it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.store import Ack, Store, SubscriptionKey
from tests.integration.conftest import StoreFactory

T = "topic://prices"
Q = "queue://orders"
A = SubscriptionKey(T, "client-a", "sub-a")
B = SubscriptionKey(T, "client-b", "sub-b")


def _stored(engine: Engine, container: str, priorities: list[int]) -> list[int]:
    """Rows as ActiveMQ with prioritizedMessages writes them: IDs 1.., PRIORITY as given."""
    ids = list(range(1, len(priorities) + 1))
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, "
                "priority, msg) VALUES (:id, :container, 'ID:amq-1:1:1', :id, 0, :priority, "
                "'\\x00'::bytea)"
            ),
            [{"id": i, "container": container, "priority": p} for i, p in enumerate(priorities, 1)],
        )
    return ids


def _subscribed(engine: Engine, key: SubscriptionKey, priorities: range | tuple[int, ...]) -> None:
    """ACKS rows of a subscription that has acknowledged nothing yet, one per priority."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_acks (container, sub_dest, client_id, sub_name, "
                "last_acked_id, priority) VALUES (:c, :c, :client, :sub, 0, :priority)"
            ),
            [
                {"c": key.container, "client": key.client_id, "sub": key.sub_name, "priority": p}
                for p in priorities
            ],
        )


def _pending(store: Store, key: SubscriptionKey) -> list[int]:
    """Every pending ID of ``key``, page by page from the start."""
    seen: list[int] = []
    cursor = None
    while rows := store.page_subscription(key, cursor, 2):
        seen += [r.id for r in rows]
        cursor = rows[-1].cursor
    return seen


def _last_acked(engine: Engine, key: SubscriptionKey) -> list[tuple[int, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT priority, last_acked_id FROM activemq_acks WHERE client_id = :client "
                "ORDER BY priority"
            ),
            {"client": key.client_id},
        ).all()
    return [(int(p), int(i)) for p, i in rows]


def test_plain_store_delivers_topic_messages_stored_with_a_priority(
    engine: Engine, make_store: StoreFactory
) -> None:
    ids = _stored(engine, T, [0, 5, 9, 4])
    _subscribed(engine, A, (0,))
    store = make_store()
    assert sorted(_pending(store, A)) == ids
    assert store.pending_count(A) == 4
    assert store.stats().subscriptions == {A: 4}
    store.acknowledge([Ack(A, 3)])
    assert sorted(_pending(store, A)) == [4]
    assert store.pending_count(A) == 1
    assert store.stats().subscriptions == {A: 1}


def test_plain_store_acknowledges_every_acks_row_of_a_subscription(
    engine: Engine, make_store: StoreFactory
) -> None:
    _stored(engine, T, [9, 5, 0])
    _subscribed(engine, A, range(10))
    store = make_store()
    store.acknowledge([Ack(A, 2)])
    assert _last_acked(engine, A) == [(p, 2) for p in range(10)]
    assert _pending(store, A) == [3]
    assert store.get_subscription(A).last_acked_id == 2  # type: ignore[union-attr]


def test_plain_cleanup_keeps_a_message_stored_with_a_priority_until_every_subscription_passed_it(
    engine: Engine, make_store: StoreFactory
) -> None:
    ids = _stored(engine, T, [5, 5, 7, 0])
    _subscribed(engine, A, range(10))  # written by ActiveMQ with prioritizedMessages
    _subscribed(engine, B, (0,))
    store = make_store()
    store.acknowledge([Ack(A, 4)])
    assert store.cleanup() == 0
    assert sorted(_pending(store, B)) == ids
    store.acknowledge([Ack(B, 2)])
    assert store.cleanup() == 2
    assert sorted(_pending(store, B)) == [3, 4]
    assert _pending(store, A) == []


def test_plain_store_pages_queue_rows_stored_with_a_priority(
    engine: Engine, make_store: StoreFactory
) -> None:
    ids = _stored(engine, Q, [0, 5, 9, 4])
    store = make_store()
    seen: list[int] = []
    cursor = None
    while rows := store.page(Q, cursor, 2):
        seen += [r.id for r in rows]
        cursor = rows[-1].cursor
    assert sorted(seen) == ids
    assert store.count(Q) == 4
    assert store.stats().destinations == {Q: 4}


def test_stats_lists_the_durable_subscriptions_the_store_lists(
    engine: Engine, make_store: StoreFactory
) -> None:
    _stored(engine, T, [0, 0])
    _subscribed(engine, A, (0,))
    with engine.begin() as conn:
        # PRIORITY 11: ActiveMQ's out-of-range marker rows, never a durable subscription.
        conn.execute(
            sa.text(
                "INSERT INTO activemq_acks (container, sub_dest, client_id, sub_name, "
                "last_acked_id, priority) VALUES (:c, :c, :c, :c, 0, 11)"
            ),
            [{"c": "queue://Consumer.A.VirtualTopic.T"}, {"c": "topic://marked"}],
        )
    for prioritized in (False, True):
        store = make_store(prioritized=prioritized)
        assert [s.key for s in store.subscriptions()] == [A]
        assert store.stats().subscriptions == {A: 2}
        store.stop()
