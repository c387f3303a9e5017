"""One set of store behaviours, run against PostgresStore and JournaledStore.

The journaled store runs in two modes: everything left in the un-checkpointed window
("journaled") and a checkpoint after every step ("checkpointed"), so reads are checked both
from memory, from the database, and from a mix of the two.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from mqstore.errors import DuplicateMessageError, InvalidMessageError, MessageNotFoundError
from mqstore.store import Ack, Batch, Outcome, Removal, Store, StoredMessage, SubscriptionKey, Xid
from tests.integration.conftest import StoreFactory, msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"
T = "topic://prices"


@dataclass
class Subject:
    store: Store
    settle: Callable[[], None]  # checkpoint (journaled, "checkpointed" mode) or nothing


@pytest.fixture(params=["postgres", "journaled", "checkpointed"])
def subject(
    request: pytest.FixtureRequest, make_store: StoreFactory, make_journaled: JournaledFactory
) -> Callable[..., Subject]:
    def build(**kwargs: object) -> Subject:
        if request.param == "postgres":
            return Subject(make_store(**kwargs), lambda: None)
        store = make_journaled(**kwargs)
        if request.param == "checkpointed":

            def settle() -> None:
                store.checkpoint()

            return Subject(store, settle)
        return Subject(store, lambda: None)

    return build


def seqs(rows: list[StoredMessage]) -> list[int | None]:
    return [r.msgid_seq for r in rows]


def test_fifo_paging_counts_and_removal(subject: Callable[..., Subject]) -> None:
    s = subject()
    ids = s.store.add([msg(Q, i) for i in range(1, 11)])
    assert ids == sorted(ids)
    s.settle()
    assert s.store.remove(Q, ids[:3]) == 3
    assert s.store.remove(Q, ids[:3]) == 0
    more = s.store.add([msg(Q, i) for i in range(11, 14)])
    s.settle()
    assert s.store.count(Q) == 10
    seen: list[int | None] = []
    cursor = None
    while page := s.store.page(Q, cursor, 4):
        seen += seqs(page)
        cursor = page[-1].cursor
    assert seen == list(range(4, 14))
    assert s.store.remove(Q, [more[0], ids[5]]) == 2
    assert seqs(s.store.page(Q, None, 100)) == [4, 5, 7, 8, 9, 10, 12, 13]
    assert s.store.stats().destinations == {Q: 8}


def test_prioritized_order_with_cursor(subject: Callable[..., Subject]) -> None:
    s = subject(prioritized=True)
    s.store.add([msg(Q, i, priority=i % 10) for i in range(1, 41)])
    s.settle()
    s.store.add([msg(Q, i, priority=i % 10) for i in range(41, 61)])
    seen: list[int | None] = []
    cursor = None
    while page := s.store.page(Q, cursor, 7):
        seen += seqs(page)
        cursor = page[-1].cursor
    assert seen == sorted(range(1, 61), key=lambda i: (-(i % 10), i))


def test_find_get_update_purge_destinations(subject: Callable[..., Subject]) -> None:
    s = subject()
    ids = s.store.add([msg(Q, i) for i in range(1, 6)])
    s.settle()
    found = s.store.find("ID:test-1:1:1", 4)
    assert found is not None and found.id == ids[3]
    s.store.update(Q, ids[3], b"rewritten")
    got = s.store.get(ids[3])
    assert got is not None and got.msg == b"rewritten"
    s.settle()
    assert s.store.page(Q, None, 10)[3].msg == b"rewritten"
    s.store.remove(Q, [ids[0]])
    with pytest.raises(MessageNotFoundError):
        s.store.update(Q, ids[0], b"gone")
    assert s.store.get(ids[0]) is None
    assert s.store.find("ID:test-1:1:1", 1) is None
    assert s.store.destinations() == [Q]
    assert s.store.purge(Q) == 4
    s.settle()
    assert s.store.count(Q) == 0 and s.store.page(Q, None, 10) == []
    assert s.store.destinations() == []
    s.store.add([msg(Q, 9)])
    assert s.store.count(Q) == 1


def test_duplicates_and_invalid_input(subject: Callable[..., Subject]) -> None:
    s = subject()
    [first] = s.store.add([msg(Q, 1)])
    with pytest.raises(DuplicateMessageError, match="same JMS message id"):
        s.store.add([msg(Q, 1)])
    s.settle()
    with pytest.raises(DuplicateMessageError, match="same JMS message id"):
        s.store.commit(Batch(adds=[msg(Q, 2), msg(Q, 1)], removes=[Removal(Q, first)]))
    assert seqs(s.store.page(Q, None, 10)) == [1]
    with pytest.raises(InvalidMessageError, match=r"outside 0\.\.9"):
        s.store.add([msg(Q, 3, priority=10)])
    with pytest.raises(InvalidMessageError, match="must start with"):
        s.store.add([msg("orders", 3)])
    s.store.remove(Q, [first])
    s.store.add([msg(Q, 1)])  # removed, so the id is free again
    assert s.store.count(Q) == 1


def test_deleting_a_subscription_of_a_queue_is_refused_and_keeps_its_messages(
    subject: Callable[..., Subject],
) -> None:
    """No subscription left on a queue's container must not read as a topic nobody needs:
    that removed every message of the queue."""
    s = subject()
    s.store.add([msg(Q, i) for i in range(3)])
    s.settle()
    with pytest.raises(InvalidMessageError, match="need a topic"):
        s.store.delete_subscription(SubscriptionKey(Q, "client", "sub"))
    s.settle()
    assert s.store.count(Q) == 3
    assert seqs(s.store.page(Q, None, 10)) == [0, 1, 2]


def test_updates_and_acks_the_columns_cannot_hold_are_refused_and_change_nothing(
    subject: Callable[..., Subject],
) -> None:
    s = subject(prioritized=True, max_message_bytes=1000)
    [mid] = s.store.add([msg(Q, 1)])
    key = SubscriptionKey(T, "client", "sub")
    s.store.add_subscription(key)
    [tid] = s.store.add([msg(T, 1, priority=9)])
    body = s.store.get(mid)
    with pytest.raises(InvalidMessageError, match="exceeds the limit of 1000 bytes"):
        s.store.update(Q, mid, b"x" * 1001)
    with pytest.raises(InvalidMessageError, match="must start with"):
        s.store.update("orders", mid, b"x")
    # An ack at priority 10 matched no ACKS row: it was taken, and nothing was acked.
    for ack, match in ((Ack(key, tid, 10), r"outside 0\.\.9"), (Ack(key, 2**63, 9), "Java long")):
        with pytest.raises(InvalidMessageError, match=match):
            s.store.acknowledge([ack])
        with pytest.raises(InvalidMessageError, match=match):
            s.store.commit(Batch(adds=[msg(Q, 2)], acks=[ack]))
        with pytest.raises(InvalidMessageError, match=match):
            s.store.xa_prepare(Xid(1, b"g", b"b"), Batch(acks=[ack]))
    s.settle()
    assert s.store.get(mid) == body and s.store.count(Q) == 1
    assert s.store.pending_count(key) == 1 and s.store.xa_recover() == []
    s.store.acknowledge([Ack(key, tid, 9)])
    assert s.store.pending_count(key) == 0


def test_batch_commit_adds_removes_acks_atomically(subject: Callable[..., Subject]) -> None:
    s = subject()
    key = SubscriptionKey(T, "client", "sub")
    s.store.add_subscription(key)
    ids = s.store.add([msg(Q, 1), msg(Q, 2)])
    tids = s.store.add([msg(T, 1), msg(T, 2)])
    s.settle()
    new = s.store.commit(
        Batch(
            adds=[msg(Q, 3)],
            removes=[Removal(Q, ids[0], Outcome.DEAD_LETTERED)],
            acks=[Ack(key, tids[0])],
        )
    )
    assert len(new) == 1 and new[0] > tids[-1]
    assert seqs(s.store.page(Q, None, 10)) == [2, 3]
    assert s.store.pending_count(key) == 1


def test_durable_subscription_acks_and_paging(subject: Callable[..., Subject]) -> None:
    s = subject()
    s.store.add([msg(T, 0)])  # before the subscription: never pending
    a, b = SubscriptionKey(T, "c1", "a"), SubscriptionKey(T, "c2", "b")
    sub = s.store.add_subscription(a, selector="x > 1")
    assert s.store.add_subscription(a) == sub
    s.store.add_subscription(b)
    s.settle()
    ids = s.store.add([msg(T, i) for i in range(1, 7)])
    assert s.store.pending_count(a) == 6
    assert seqs(s.store.page_subscription(a, None, 4)) == [1, 2, 3, 4]
    s.store.acknowledge([Ack(a, ids[2])])
    s.settle()
    assert seqs(s.store.page_subscription(a, None, 10)) == [4, 5, 6]
    got = s.store.get_subscription(a)
    assert got is not None and got.last_acked_id == ids[2] and got.selector == "x > 1"
    assert s.store.pending_count(a) == 3 and s.store.pending_count(b) == 6
    assert [x.key for x in s.store.subscriptions(T)] == [a, b]
    stats = s.store.stats()
    assert stats.subscriptions == {a: 3, b: 6}
    s.store.delete_subscription(a)
    s.settle()
    assert s.store.get_subscription(a) is None
    assert s.store.page_subscription(a, None, 10) == []
    assert s.store.cleanup() >= 0  # drops seq 0: no subscription ever needed it
    assert s.store.count(T) == 6  # b still needs them
    s.store.delete_subscription(b)
    s.settle()
    assert s.store.count(T) == 0 and s.store.subscriptions() == []


def test_retroactive_and_prioritized_subscription(subject: Callable[..., Subject]) -> None:
    s = subject(prioritized=True)
    s.store.add([msg(T, 1, priority=1), msg(T, 2, priority=8)])
    key = SubscriptionKey(T, "c", "retro")
    s.store.add_subscription(key, retroactive=True)
    s.settle()
    ids = s.store.add([msg(T, 3, priority=8)])
    assert seqs(s.store.page_subscription(key, None, 10)) == [2, 3, 1]
    s.store.acknowledge([Ack(key, ids[0], priority=8)])
    assert seqs(s.store.page_subscription(key, None, 10)) == [1]
    assert s.store.pending_count(key) == 1


def test_expiry_and_history(subject: Callable[..., Subject]) -> None:
    s = subject()
    s.store.add([msg(Q, 1, expiration=1000), msg(Q, 2), msg(Q, 3, expiration=2000)])
    s.settle()
    s.store.add([msg(Q, 4, expiration=1500)])
    assert seqs(s.store.expire(now_ms=5000, limit=10, remove=False)) == [1, 4, 3]
    assert seqs(s.store.expire(now_ms=5000, limit=2)) == [1, 4]
    assert seqs(s.store.page(Q, None, 10)) == [2, 3]


def test_xa_prepare_commit_rollback(subject: Callable[..., Subject]) -> None:
    s = subject()
    [kept] = s.store.add([msg(Q, 1)])
    x1, x2 = Xid(1, b"g1", b"b"), Xid(1, b"g2", b"b")
    s.store.xa_prepare(x1, Batch(adds=[msg(Q, 2)], removes=[Removal(Q, kept)]))
    assert s.store.count(Q) == 0  # prepared removal hides the row, prepared add invisible
    assert [p.xid for p in s.store.xa_recover()] == [x1]
    s.store.add([msg(Q, 3)])
    s.store.xa_commit(x1)
    assert seqs(s.store.page(Q, None, 10)) == [3, 2]
    s.store.xa_prepare(x2, Batch(adds=[msg(Q, 4)]))
    s.store.xa_rollback(x2)
    assert s.store.xa_recover() == []
    assert seqs(s.store.page(Q, None, 10)) == [3, 2]


def test_a_jms_id_stored_under_xa_is_a_duplicate_for_a_plain_add(
    subject: Callable[..., Subject],
) -> None:
    s = subject()
    s.store.add([msg(Q, 1)])  # the producer is known to the store
    xid = Xid(1, b"g1", b"b")
    s.store.xa_prepare(xid, Batch(adds=[msg(Q, 2)]))
    with pytest.raises(DuplicateMessageError, match="same JMS message id"):
        s.store.add([msg(Q, 2)])  # prepared
    s.store.xa_commit(xid)
    with pytest.raises(DuplicateMessageError, match="same JMS message id"):
        s.store.add([msg(Q, 2)])  # committed
    s.settle()
    assert seqs(s.store.page(Q, None, 10)) == [1, 2]


def test_a_purge_leaves_xa_prepared_messages_and_their_ids(
    subject: Callable[..., Subject],
) -> None:
    s = subject()
    xid = Xid(1, b"g1", b"b")
    s.store.xa_prepare(xid, Batch(adds=[msg(Q, 7)]))
    s.store.purge(Q)
    with pytest.raises(DuplicateMessageError, match="same JMS message id"):
        s.store.add([msg(Q, 7)])
    s.settle()
    s.store.xa_commit(xid)
    assert seqs(s.store.page(Q, None, 10)) == [7]


def test_pages_bounded_by_bytes(subject: Callable[..., Subject]) -> None:
    """With ``max_bytes`` a page stops at the first row whose predecessors reach it (the
    first row always comes), from the database, from memory, and from both."""
    s = subject()
    sub = SubscriptionKey(T, "c", "bytes")
    s.store.add_subscription(sub)
    sizes = [100, 300, 50, 500, 10, 10]
    for dest in (Q, T):
        s.store.add([msg(dest, i, body=bytes(size)) for i, size in enumerate(sizes)])
    s.settle()
    for dest in (Q, T):
        s.store.add([msg(dest, i, body=bytes(200)) for i in range(10, 13)])

    def page(dest: str, after: int | None, limit: int, max_bytes: int | None) -> list[int | None]:
        rows = (
            s.store.page(Q, None, 100) if dest == Q else s.store.page_subscription(sub, None, 100)
        )
        cursor = None if after is None else rows[after].cursor
        if dest == Q:
            return seqs(s.store.page(Q, cursor, limit, max_bytes))
        return seqs(s.store.page_subscription(sub, cursor, limit, max_bytes))

    for dest in (Q, T):
        assert page(dest, None, 100, None) == [0, 1, 2, 3, 4, 5, 10, 11, 12]
        assert page(dest, None, 100, 400) == [0, 1]
        assert page(dest, None, 100, 401) == [0, 1, 2]
        assert page(dest, None, 100, 1) == [0]
        assert page(dest, 3, 100, 30) == [4, 5, 10]  # the database's last rows, then memory
        assert page(dest, 3, 100, 20) == [4, 5]
        assert page(dest, None, 2, 10**6) == [0, 1]
        assert page(dest, 5, 100, 250) == [10, 11]


@pytest.mark.parametrize(
    ("key", "options", "match"),
    [
        (SubscriptionKey(T, "c" * 251, "s"), {}, "client id"),
        (SubscriptionKey(T, "c", "s" * 251), {}, "subscription name"),
        (SubscriptionKey(T, "c", "s"), {"selector": "price > 1 AND " + "x" * 240}, "selector"),
        (SubscriptionKey(T, "c", "s"), {"sub_dest": "topic://" + "x" * 243}, "at most 250"),
    ],
)
def test_subscription_values_longer_than_the_columns_are_refused(
    subject: Callable[..., Subject], key: SubscriptionKey, options: dict[str, str], match: str
) -> None:
    s = subject()
    with pytest.raises(InvalidMessageError, match=match):
        s.store.add_subscription(key, **options)  # type: ignore[arg-type]
    s.settle()  # nothing reached the journal that a checkpoint could not write
    assert s.store.subscriptions() == []
