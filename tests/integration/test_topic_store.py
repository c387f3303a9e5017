"""Durable topic subscriptions and local transactions, as ActiveMQ's JDBC store keeps them."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import DuplicateMessageError, InvalidMessageError
from mqstore.store import Ack, Batch, PostgresStore, Removal, SubscriptionKey, Xid
from tests.integration.conftest import StoreFactory, msg

T = "topic://prices"
Q = "queue://orders"
S1 = SubscriptionKey(T, "client-1", "sub-a")
S2 = SubscriptionKey(T, "client-2", "sub-b")


def _seqs(rows: list) -> list[int]:  # type: ignore[type-arg]
    return [r.msgid_seq for r in rows]


def _acks(engine: Engine) -> list[tuple[str, str, str, int, int, str | None, str | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT container, client_id, sub_name, priority, last_acked_id, selector, "
                "sub_dest FROM activemq_acks ORDER BY client_id, sub_name, priority"
            )
        ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def _pending(store: PostgresStore, key: SubscriptionKey, page: int = 1000) -> list[int]:
    seen: list[int] = []
    cursor = None
    while rows := store.page_subscription(key, cursor, page):
        seen += _seqs(rows)
        cursor = rows[-1].cursor
    return seen


# ---------------------------------------------------------------------------- create / look up
def test_new_subscription_starts_after_the_newest_message(
    store: PostgresStore, engine: Engine
) -> None:
    assert store.add_subscription(S1).last_acked_id == 0  # MAX(ID) of an empty table reads 0
    ids = store.add([msg(T, 1), msg(Q, 2)])
    sub = store.add_subscription(S2, selector="price > 10", sub_dest="topic://prices.eu")
    assert sub.last_acked_id == max(ids)  # MAX(ID) over every destination, as ActiveMQ
    assert _acks(engine) == [
        (T, "client-1", "sub-a", 0, 0, None, T),
        (T, "client-2", "sub-b", 0, max(ids), "price > 10", "topic://prices.eu"),
    ]
    assert _pending(store, S1) == [1]
    assert _pending(store, S2) == []


def test_retroactive_subscription_sees_everything(store: PostgresStore) -> None:
    store.add([msg(T, 1), msg(T, 2)])
    assert store.add_subscription(S1, retroactive=True).last_acked_id == -1
    assert _pending(store, S1) == [1, 2]
    assert store.pending_count(S1) == 2


def test_prioritized_subscription_has_ten_rows(make_store: StoreFactory, engine: Engine) -> None:
    store = make_store(prioritized=True)
    [last] = store.add([msg(T, 1)])
    store.add_subscription(S1)
    rows = _acks(engine)
    assert [r[3] for r in rows] == list(range(10))
    assert {r[4] for r in rows} == {last}


def test_add_existing_subscription_returns_it(store: PostgresStore, engine: Engine) -> None:
    first = store.add_subscription(S1, selector="a = 1")
    store.add([msg(T, 1)])
    assert store.add_subscription(S1, selector="other") == first
    assert len(_acks(engine)) == 1


def test_subscription_needs_a_topic(store: PostgresStore) -> None:
    with pytest.raises(InvalidMessageError, match="need a topic"):
        store.add_subscription(SubscriptionKey(Q, "c", "s"))


@pytest.mark.parametrize(
    ("key", "selector"),
    [
        (SubscriptionKey(T, "client\x00", "s"), None),
        (SubscriptionKey(T, "c", "sub\x00"), None),
        (SubscriptionKey(T, "c", "s"), "color = 'red\x00'"),
        (SubscriptionKey(T + "\x00", "c", "s"), None),
    ],
)
def test_subscription_values_postgresql_cannot_store_are_refused(
    store: PostgresStore, key: SubscriptionKey, selector: str | None
) -> None:
    with pytest.raises(InvalidMessageError, match="NUL"):
        store.add_subscription(key, selector=selector)
    assert store.subscriptions() == []


def test_lookup_list_and_delete(store: PostgresStore) -> None:
    other = SubscriptionKey("topic://other", "client-1", "sub-a")
    for key in (S2, S1, other):
        store.add_subscription(key)
    got = store.get_subscription(S1)
    assert got is not None and got.key == S1 and got.sub_dest == T
    assert store.get_subscription(SubscriptionKey(T, "nobody", "x")) is None
    assert [s.key for s in store.subscriptions()] == [other, S1, S2]
    assert [s.key for s in store.subscriptions(T)] == [S1, S2]
    store.delete_subscription(S1)
    assert store.get_subscription(S1) is None
    assert [s.key for s in store.subscriptions(T)] == [S2]
    assert set(store.destinations()) == {T, "topic://other"}


# ---------------------------------------------------------------------------- acks and paging
def test_acknowledge_advances_and_never_goes_back(store: PostgresStore) -> None:
    store.add_subscription(S1)
    ids = store.add([msg(T, i) for i in range(1, 6)])
    store.acknowledge([Ack(S1, ids[1])])
    assert _pending(store, S1) == [3, 4, 5]
    assert store.pending_count(S1) == 3
    store.acknowledge([Ack(S1, ids[0])])  # older ack: no effect
    assert store.get_subscription(S1).last_acked_id == ids[1]  # type: ignore[union-attr]
    store.acknowledge([Ack(S1, ids[3]), Ack(S1, ids[2])])  # the newest of a batch wins
    assert _pending(store, S1) == [5]


def test_page_subscription_in_order_with_small_pages(store: PostgresStore) -> None:
    store.add_subscription(S1)
    store.add([msg(T, i) for i in range(1, 24)])
    store.add([msg("topic://other", 1)])
    assert _pending(store, S1, page=5) == list(range(1, 24))


def test_prioritized_paging_respects_per_priority_acks(make_store: StoreFactory) -> None:
    store = make_store(prioritized=True)
    store.add_subscription(S1)
    store.add_subscription(S2)
    ids = store.add([msg(T, i, priority=(9 if i % 2 else 4)) for i in range(1, 9)])
    # priority 9: seqs 1,3,5,7; priority 4: seqs 2,4,6,8
    assert _pending(store, S1, page=3) == [1, 3, 5, 7, 2, 4, 6, 8]
    store.acknowledge([Ack(S1, ids[4], priority=9), Ack(S1, ids[1], priority=4)])
    assert _pending(store, S1, page=3) == [7, 4, 6, 8]
    assert store.pending_count(S1) == 4
    assert store.pending_count(S2) == 8
    sub = store.get_subscription(S1)
    assert sub is not None and sub.last_acked_id < ids[0]  # untouched priorities hold it back


def test_cleanup_deletes_what_every_subscription_acked(
    make_store: StoreFactory, engine: Engine
) -> None:
    store = make_store(prioritized=True)
    store.add_subscription(S1)
    store.add_subscription(S2)
    ids = store.add([msg(T, i, priority=i % 10) for i in range(1, 21)])
    queued = store.add([msg(Q, 1)])
    # S1 acks everything at every priority, S2 acks everything up to seq 10.
    store.acknowledge([Ack(S1, ids[-1], priority=p) for p in range(10)])
    store.acknowledge([Ack(S2, ids[9], priority=p) for p in range(10)])
    assert store.cleanup() == 10  # all ten priorities in one call
    with engine.connect() as conn:
        left = conn.execute(sa.text("SELECT id FROM activemq_msgs ORDER BY id")).scalars().all()
    assert left == [*ids[10:], *queued]  # queue messages are never cleaned
    assert store.cleanup() == 0
    assert _pending(store, S2) == sorted(range(11, 21), key=lambda i: (-(i % 10), i))


def test_cleanup_in_plain_mode_uses_the_slowest_subscription(store: PostgresStore) -> None:
    store.add_subscription(S1)
    store.add_subscription(S2)
    ids = store.add([msg(T, i) for i in range(1, 6)])
    store.acknowledge([Ack(S1, ids[4]), Ack(S2, ids[1])])
    assert store.cleanup() == 2
    assert _pending(store, S2) == [3, 4, 5]
    assert _pending(store, S1) == []


def test_deleting_the_last_subscription_removes_the_topics_messages(
    store: PostgresStore, engine: Engine
) -> None:
    store.add_subscription(S1)
    store.add_subscription(S2)
    store.add([msg(T, i) for i in range(1, 4)])
    [other] = store.add([msg("topic://other", 1)])
    store.delete_subscription(S1)
    assert store.count(T) == 3  # S2 still needs them
    store.delete_subscription(S2)
    assert store.count(T) == 0
    assert store.get(other) is not None


def test_deleting_the_last_subscription_with_a_prepared_message(store: PostgresStore) -> None:
    """A prepared (XA) add is not the subscription's to delete; it must not loop over it."""
    store.add_subscription(S1)
    store.add([msg(T, 1)])
    xid = Xid(1, b"g", b"b")
    store.xa_prepare(xid, Batch(adds=[msg(T, 2)]))
    store.delete_subscription(S1)
    assert store.count(T) == 0
    [prepared] = store.xa_recover()
    assert [m.msgid_seq for m in prepared.adds] == [2]


# ---------------------------------------------------------------------------- local transactions
def test_batch_of_adds_removes_and_acks_is_atomic(store: PostgresStore) -> None:
    store.add_subscription(S1)
    queued = store.add([msg(Q, 1), msg(Q, 2)])
    topic = store.add([msg(T, 1), msg(T, 2)])
    with pytest.raises(DuplicateMessageError):
        store.commit(
            Batch(
                adds=[msg(Q, 3), msg(T, 3), msg(Q, 1)],  # Q,1 is stored already
                removes=[Removal(Q, queued[0])],
                acks=[Ack(S1, topic[1])],
            )
        )
    assert _seqs(store.page(Q, None, 10)) == [1, 2]
    assert _pending(store, S1) == [1, 2]

    new = store.commit(
        Batch(
            adds=[msg(Q, 3), msg(T, 3)], removes=[Removal(Q, queued[0])], acks=[Ack(S1, topic[1])]
        )
    )
    assert len(new) == 2 and min(new) > max(topic)
    assert _seqs(store.page(Q, None, 10)) == [2, 3]
    assert _pending(store, S1) == [3]
