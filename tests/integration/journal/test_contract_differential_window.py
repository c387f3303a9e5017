"""XA, prioritized paging, expiry and purges run against PostgresStore and JournaledStore
alike, with changes in the journal's window, checkpointed, and replayed after a reopen.

Subjects as in ``test_contract_differential.py``; :func:`to_database` checkpoints a
journaled store, so that a scenario holds both database rows and window changes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from journal.store import JournaledStore
from mqstore.errors import TransactionError
from mqstore.store import (
    Ack,
    Batch,
    PreparedTransaction,
    Removal,
    Store,
    SubscriptionKey,
    Xid,
)
from tests.integration.conftest import msg
from tests.integration.journal.conftest import Subject, seqs

Q = "queue://orders"
Q2 = "queue://other"
T = "topic://prices"


def to_database(store: Store) -> None:
    """Everything so far into the database (a journaled store checkpoints)."""
    if isinstance(store, JournaledStore):
        store.checkpoint()


Prepared = tuple[Xid, list[tuple[int | None, bytes]], list[tuple[int, bytes]], list[Ack]]


def prepared(store: Store) -> list[Prepared]:
    """Prepared transactions as (xid, add sequences and bodies, removed IDs and bodies,
    acks), by xid."""

    def view(t: PreparedTransaction) -> Prepared:
        adds = [(m.msgid_seq, m.msg) for m in t.adds]
        return t.xid, adds, sorted((m.id, m.msg) for m in t.removes), list(t.acks)

    return sorted((view(t) for t in store.xa_recover()), key=lambda v: v[0].gtrid)


def test_xa_transactions_alongside_changes_in_the_window(
    subject: Callable[..., Subject],
) -> None:
    """Prepared work is invisible until committed (adds then sort after everything stored
    before), survives a reopen, and a rollback leaves what was there; window changes made
    meanwhile keep their effect."""
    s = subject(history=True)
    sub = SubscriptionKey(T, "c", "a")
    s.store.add_subscription(sub)
    base = s.store.add([msg(Q, i) for i in range(4)])
    tids = s.store.add([msg(T, i) for i in range(3)])
    to_database(s.store)
    win = s.store.add([msg(Q, i) for i in range(4, 6)])
    s.store.remove(Q, [base[0]])
    x1, x2 = Xid(1, b"g1", b"b"), Xid(1, b"g2", b"b")
    work = Batch(
        adds=[msg(Q, 10), msg(Q2, 11)],
        removes=[Removal(Q, base[1]), Removal(Q, win[0])],
        acks=[Ack(sub, tids[1])],
    )
    assert len(s.store.xa_prepare(x1, work)) == 2
    s.settle()
    late = s.store.add([msg(Q, 6)])
    assert s.store.remove(Q, [base[1], base[2]]) == 1  # base[1] is in the transaction
    with pytest.raises(TransactionError):
        s.store.xa_prepare(x2, Batch(removes=[Removal(Q, base[0])]))  # removed already
    s.store.xa_prepare(x2, Batch(adds=[msg(Q, 20)], removes=[Removal(Q, late[0])]))
    s.store.update(Q, win[1], b"rewritten")  # in the window at the reopen
    s.store.update(Q, base[1], b"redelivered")  # prepared for removal, still stored
    s.store.add([msg(Q, 7)])
    assert seqs(s.store.page(Q, None, 10)) == [3, 5, 7]
    assert s.store.count(Q) == 3 and s.store.count(Q2) == 0
    assert s.store.pending_count(sub) == 3
    assert s.store.destinations() == [Q, Q2, T]
    expected = [
        (
            x1,
            [(10, b"body-10"), (11, b"body-11")],
            sorted([(base[1], b"redelivered"), (win[0], b"body-4")]),
            [Ack(sub, tids[1])],
        ),
        (x2, [(20, b"body-20")], [(late[0], b"body-6")], []),
    ]
    assert prepared(s.store) == expected
    s.reopen()
    assert prepared(s.store) == expected
    assert seqs(s.store.page(Q, None, 10)) == [3, 5, 7]
    got = s.store.get(win[1])
    assert got is not None and got.msg == b"rewritten"
    s.store.xa_commit(x1)
    s.store.add([msg(Q, 8)])
    assert seqs(s.store.page(Q, None, 10)) == [3, 5, 7, 10, 8]
    assert seqs(s.store.page(Q2, None, 10)) == [11]
    assert seqs(s.store.page_subscription(sub, None, 10)) == [2]
    s.store.xa_rollback(x2)
    with pytest.raises(TransactionError):
        s.store.xa_commit(x2)
    assert seqs(s.store.page(Q, None, 10)) == [3, 5, 6, 7, 10, 8]
    assert s.store.xa_recover() == []
    s.store.remove(Q, [win[1]])
    s.reopen()
    assert seqs(s.store.page(Q, None, 10)) == [3, 6, 7, 10, 8]
    assert s.store.count(Q) == 5 and s.store.pending_count(sub) == 1
    history = dict(s.history())
    assert [history.get(i) for i in (base[0], base[1], base[2], win[0])] == ["acknowledged"] * 4
    assert sorted(history.values()).count("xa-rolled-back") == 1


def test_prioritized_subscription_paging_with_cursors_and_acks_per_priority(
    subject: Callable[..., Subject],
) -> None:
    """A subscription's pages go by priority, then ID, across database rows and window adds;
    a cursor from an earlier page goes on after it; acks move one priority each."""
    s = subject(prioritized=True)
    key = SubscriptionKey(T, "c", "p")
    s.store.add_subscription(key)
    old = s.store.add([msg(T, i, priority=i % 3 * 4) for i in range(6)])
    to_database(s.store)
    new = s.store.add([msg(T, i, priority=i % 3 * 4) for i in range(6, 12)])
    ids = old + new
    order = sorted(range(12), key=lambda i: (-(i % 3 * 4), i))
    first = s.store.page_subscription(key, None, 5)
    assert seqs(first) == order[:5]
    rest = s.store.page_subscription(key, first[-1].cursor, 100)
    assert seqs(rest) == order[5:]
    s.store.acknowledge([Ack(key, ids[7], priority=4), Ack(key, ids[3], priority=0)])
    s.settle()
    assert seqs(s.store.page_subscription(key, first[-1].cursor, 100)) == [10, 6, 9]
    assert s.store.pending_count(key) == 7
    s.store.add([msg(T, 12, priority=8), msg(T, 13, priority=0)])
    assert seqs(s.store.page_subscription(key, first[-1].cursor, 3)) == [10, 6, 9]
    assert seqs(s.store.page_subscription(key, None, 100)) == [2, 5, 8, 11, 12, 10, 6, 9, 13]
    assert seqs(s.store.page(T, first[2].cursor, 4)) == [11, 12, 1, 4]
    s.store.acknowledge([Ack(key, ids[11], priority=8), Ack(key, ids[9], priority=0)])
    assert seqs(s.store.page_subscription(key, None, 100)) == [12, 10, 13]
    assert s.store.pending_count(key) == 3
    s.reopen()
    assert seqs(s.store.page_subscription(key, None, 100)) == [12, 10, 13]
    assert seqs(s.store.page_subscription(key, first[-1].cursor, 100)) == [10, 13]
    assert s.store.pending_count(key) == 3
    assert s.store.stats().subscriptions == {key: 3}


def test_expiry_with_and_without_removal_under_byte_bounds(
    subject: Callable[..., Subject],
) -> None:
    """``remove=False`` only looks; ``remove=True`` removes what it returns; both take
    messages oldest expiration first across database rows and window adds, bounded by
    ``max_bytes`` as a page is, sizes being the bodies' as last rewritten."""
    s = subject(history=True)
    old = s.store.add([msg(Q, i, expiration=1000 + 20 * i, body=bytes(100)) for i in range(4)])
    s.store.add([msg(Q, 99, expiration=9000), msg(Q, 98)])
    to_database(s.store)
    new = s.store.add([msg(Q2, i, expiration=1010 + 20 * i, body=bytes(100)) for i in range(4)])
    s.store.update(Q, old[0], bytes(10))
    s.store.remove(Q, [old[3]])
    order = [0, 0, 1, 1, 2, 2, 3]  # sequences by expiration, old[3] gone
    assert seqs(s.store.expire(5000, 10, remove=False, max_bytes=None)) == order
    assert seqs(s.store.expire(5000, 10, remove=False, max_bytes=150)) == order[:3]
    assert seqs(s.store.expire(5000, 3, remove=False, max_bytes=10**6)) == order[:3]
    assert s.store.count(Q) == 5 and s.store.count(Q2) == 4
    s.settle()
    gone = s.store.expire(5000, 10, max_bytes=150)
    assert [(m.id, len(m.msg)) for m in gone] == [(old[0], 10), (new[0], 100), (old[1], 100)]
    assert seqs(s.store.expire(5000, 10, remove=False, max_bytes=1)) == [1]
    s.settle()
    assert [m.id for m in s.store.expire(5000, 2, max_bytes=None)] == [new[1], old[2]]
    assert seqs(s.store.expire(1040, 10, remove=False)) == []
    s.reopen()
    assert [m.id for m in s.store.expire(5000, 10)] == [new[2], new[3]]
    assert s.store.expire(5000, 10) == []
    assert s.store.count(Q) == 2 and s.store.count(Q2) == 0
    history = dict(s.history())
    assert {i: history[i] for i in [*old[:3], *new]} == dict.fromkeys([*old[:3], *new], "expired")
    assert history[old[3]] == "acknowledged"


def test_byte_bounds_count_rewritten_bodies_at_their_new_size(
    subject: Callable[..., Subject],
) -> None:
    """``max_bytes`` of a page, a subscription's page and an expiry counts a rewritten body
    at its new size, checkpointed or not."""
    s = subject()
    key = SubscriptionKey(T, "c", "s")
    s.store.add_subscription(key)
    ids = s.store.add([msg(Q, i, body=bytes(100), expiration=1000 + i) for i in range(4)])
    tids = s.store.add([msg(T, i, body=bytes(100)) for i in range(4)])
    to_database(s.store)
    for shrunk, size in ((ids[0], 10), (ids[1], 20), (tids[0], 10), (tids[1], 20)):
        s.store.update(Q if shrunk in ids else T, shrunk, bytes(size))
    s.settle()
    assert seqs(s.store.page(Q, None, 10, max_bytes=150)) == [0, 1, 2, 3]
    assert seqs(s.store.page(Q, None, 10, max_bytes=31)) == [0, 1, 2]
    assert seqs(s.store.page_subscription(key, None, 10, max_bytes=31)) == [0, 1, 2]
    assert seqs(s.store.expire(5000, 10, remove=False, max_bytes=31)) == [0, 1, 2]
    s.store.update(Q, ids[2], bytes(300))
    assert seqs(s.store.page(Q, None, 10, max_bytes=150)) == [0, 1, 2]
    s.reopen()
    assert seqs(s.store.page(Q, None, 10, max_bytes=150)) == [0, 1, 2]
    assert seqs(s.store.page_subscription(key, None, 10, max_bytes=150)) == [0, 1, 2, 3]
    assert [len(m.msg) for m in s.store.expire(5000, 10, max_bytes=31)] == [10, 20, 300]


def test_purge_of_database_rows_and_window_adds_then_adding_again(
    subject: Callable[..., Subject],
) -> None:
    """A purge removes every message of the destination (checkpointed or not) and no other;
    messages added after it are kept, counted and listed, also after a reopen."""
    s = subject(history=True)
    stored = s.store.add([msg(Q, i) for i in range(3)] + [msg(Q2, 0)])
    to_database(s.store)
    recent = s.store.add([msg(Q, i) for i in range(3, 5)])
    s.store.remove(Q, [stored[0]])
    assert s.store.purge(Q) == 4
    assert s.store.count(Q) == 0 and s.store.destinations() == [Q2]
    assert s.store.get(stored[1]) is None and s.store.page(Q, None, 10) == []
    again = s.store.add([msg(Q, i) for i in range(5, 7)])
    s.settle()
    assert s.store.count(Q) == 2 and s.store.destinations() == [Q, Q2]
    assert seqs(s.store.page(Q, None, 10)) == [5, 6]
    assert s.store.remove(Q, [stored[2], again[0]]) == 1
    assert s.store.purge(Q2) == 1 and s.store.destinations() == [Q]
    s.reopen()
    assert s.store.count(Q) == 1 and s.store.count(Q2) == 0
    assert s.store.destinations() == [Q]
    assert seqs(s.store.page(Q, None, 10)) == [6]
    assert s.store.stats().destinations == {Q: 1}
    assert s.store.purge(Q) == 1 and s.store.destinations() == []
    history = dict(s.history())
    assert [history[i] for i in [*stored[1:3], *recent, stored[3], again[1]]] == ["purged"] * 6
    assert history[stored[0]] == history[again[0]] == "acknowledged"
