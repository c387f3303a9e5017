"""More store behaviours run against PostgresStore and JournaledStore alike.

As in ``test_contract_both.py``: "postgres", "journaled" (everything left in the window) and
"checkpointed" (a checkpoint after every step). ``reopen`` stops the store and starts a new
one on the same tables (and, journaled, on the same journal, left to replay).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from journal.store import JournaledStore
from mqstore.errors import InvalidMessageError, MessageNotFoundError, TransactionError
from mqstore.store import Ack, Batch, Outcome, Removal, SubscriptionKey, Xid
from tests.integration.conftest import msg
from tests.integration.journal.conftest import Subject, seqs

Q = "queue://orders"
Q2 = "queue://other"
T = "topic://prices"


def test_a_subscription_made_after_an_ack_past_the_newest_message_gets_later_messages(
    subject: Callable[..., Subject],
) -> None:
    """A subscription starts after the newest stored message; an acknowledgement naming a
    higher ID (of another subscription) does not move that start."""
    s = subject()
    a, b = SubscriptionKey(T, "c", "a"), SubscriptionKey(T, "c", "b")
    s.store.add_subscription(a)
    [tid] = s.store.add([msg(T, 1)])
    s.store.acknowledge([Ack(a, tid + 1000)])
    s.settle()
    sub = s.store.add_subscription(b)
    s.settle()
    s.store.add([msg(T, i) for i in range(2, 5)])
    s.settle()
    assert seqs(s.store.page_subscription(b, None, 10)) == [2, 3, 4]
    assert s.store.pending_count(b) == 3
    assert sub.last_acked_id <= tid  # below it once every subscription acked tid (elided)
    s.reopen()
    assert seqs(s.store.page_subscription(b, None, 10)) == [2, 3, 4]


def test_an_ack_for_a_subscription_that_does_not_exist_changes_nothing(
    subject: Callable[..., Subject],
) -> None:
    """Acknowledging for an unknown subscription matches no row: one made later with that
    key starts after the newest message and gets what comes after it."""
    s = subject()
    ids = s.store.add([msg(T, i) for i in range(3)])
    key = SubscriptionKey(T, "c", "later")
    s.store.acknowledge([Ack(key, ids[-1] + 5)])
    assert s.store.get_subscription(key) is None
    s.settle()
    sub = s.store.add_subscription(key, retroactive=True)
    assert sub.last_acked_id == -1
    s.settle()
    assert seqs(s.store.page_subscription(key, None, 10)) == [0, 1, 2]
    new = s.store.add([msg(T, i) for i in range(3, 5)])
    s.settle()
    assert new[0] <= ids[-1] + 5  # the ack moved no sequence
    assert seqs(s.store.page_subscription(key, None, 10)) == [0, 1, 2, 3, 4]
    assert s.store.pending_count(key) == 5


def test_expired_messages_come_back_with_their_updated_bodies(
    subject: Callable[..., Subject],
) -> None:
    s = subject(history=True)
    ids = s.store.add([msg(Q, 1, expiration=1000), msg(Q, 2, expiration=2000)])
    s.settle()
    s.store.update(Q, ids[0], b"redelivered-1")
    s.store.update(Q, ids[1], b"redelivered-2")
    rows = s.store.expire(now_ms=5000, limit=10, remove=False)
    assert [r.msg for r in rows] == [b"redelivered-1", b"redelivered-2"]
    rows = s.store.expire(now_ms=5000, limit=10)
    assert [r.msg for r in rows] == [b"redelivered-1", b"redelivered-2"]
    s.settle()
    assert s.store.count(Q) == 0
    assert s.history() == [(ids[0], "expired"), (ids[1], "expired")]


def test_history_keeps_the_body_a_message_had_when_it_was_removed(
    subject: Callable[..., Subject],
) -> None:
    """With history bodies on, the history row of a message rewritten (a redelivery count,
    say) and then acknowledged, expired or purged holds the rewritten body."""
    s = subject(history=True, history_bodies=True)
    stored = s.store.add([msg(Q, 1), msg(Q, 2, expiration=1000), msg(Q, 3), msg(Q, 4)])
    if isinstance(s.store, JournaledStore):
        s.store.checkpoint()  # rows in the database, rewritten and removed in the window
    recent = s.store.add([msg(Q, 5)])
    ids = stored + recent
    for i in ids:
        s.store.update(Q, i, b"rewritten-%d" % i)
    s.settle()
    s.store.update(Q, stored[3], b"rewritten again")
    assert s.store.remove(Q, [stored[0], recent[0]]) == 2
    assert [m.msg for m in s.store.expire(now_ms=5000, limit=10)] == [b"rewritten-%d" % stored[1]]
    s.store.remove(Q, [stored[3]])
    assert s.store.purge(Q) == 1
    assert s.history_bodies() == {
        stored[0]: b"rewritten-%d" % stored[0],
        stored[1]: b"rewritten-%d" % stored[1],
        stored[2]: b"rewritten-%d" % stored[2],
        stored[3]: b"rewritten again",
        recent[0]: b"rewritten-%d" % recent[0],
    }


def test_removal_counts_and_history_outcomes(subject: Callable[..., Subject]) -> None:
    s = subject(history=True)
    ids = s.store.add([msg(Q, i) for i in range(6)])
    other = s.store.add([msg(Q2, 100)])
    s.settle()
    more = s.store.add([msg(Q, i) for i in range(6, 9)])
    assert s.store.remove(Q, [ids[0], more[0], other[0], 10**9]) == 2  # other queue: not here
    assert s.store.remove(Q, [ids[0], more[0]]) == 0
    assert s.store.remove(Q, [ids[1], ids[1]]) == 1
    s.settle()
    assert s.store.remove(Q, [ids[2]], Outcome.DEAD_LETTERED) == 1
    assert s.store.count(Q) == 5 and s.store.count(Q2) == 1
    assert s.store.purge(Q) == 5
    assert s.store.purge(Q) == 0
    s.settle()
    assert s.store.stats().destinations == {Q2: 1}
    with pytest.raises(MessageNotFoundError):
        s.store.update(Q, more[1], b"gone")
    with pytest.raises(MessageNotFoundError):
        s.store.update(Q, other[0], b"wrong queue")
    outcomes = dict(s.history())
    assert outcomes[ids[0]] == "acknowledged" and outcomes[more[0]] == "acknowledged"
    assert outcomes[ids[2]] == "dead-lettered"
    assert outcomes[ids[3]] == "purged" and outcomes[more[2]] == "purged"
    assert other[0] not in outcomes


def test_deleting_subscriptions_while_messages_are_pending(
    subject: Callable[..., Subject],
) -> None:
    s = subject(history=True)
    a, b = SubscriptionKey(T, "c", "a"), SubscriptionKey(T, "c", "b")
    s.store.add_subscription(a)
    s.store.add_subscription(b)
    ids = s.store.add([msg(T, i) for i in range(4)])
    s.settle()
    s.store.acknowledge([Ack(a, ids[1])])
    s.store.delete_subscription(b)
    s.settle()
    assert s.store.count(T) == 4  # the next cleanup removes what only b held back
    assert s.store.pending_count(a) == 2
    assert s.store.stats().subscriptions == {a: 2}
    s.store.cleanup()
    assert s.store.count(T) == 2
    s.store.delete_subscription(a)
    s.settle()
    assert s.store.count(T) == 0 and s.store.destinations() == []
    s.store.delete_subscription(a)  # already gone: nothing to do
    assert {i: o for i, o in s.history()} == dict.fromkeys(ids, "acknowledged")


def test_cleanup_counts_each_acknowledged_topic_message_it_removed_once(
    subject: Callable[..., Subject],
) -> None:
    """cleanup() returns how many topic messages every subscription acknowledged were
    removed since the last call (the journaled store drops some at its checkpoints), and
    the ``cleaned`` counter adds them up."""
    s = subject(history=True)
    a, b = SubscriptionKey(T, "c", "a"), SubscriptionKey(T, "c", "b")
    s.store.add_subscription(a)
    s.store.add_subscription(b)
    ids = s.store.add([msg(T, i) for i in range(5)])
    s.settle()
    s.store.acknowledge([Ack(a, ids[3]), Ack(b, ids[2])])
    assert s.store.cleanup() == 3
    assert s.store.cleanup() == 0
    more = s.store.add([msg(T, i) for i in range(5, 8)])
    s.store.acknowledge([Ack(a, more[2]), Ack(b, more[1])])
    s.settle()
    assert s.store.cleanup() == 4
    assert s.store.count(T) == 1
    assert s.store.stats().counters["cleaned"] == 7
    assert dict(s.history()) == dict.fromkeys([*ids, *more[:2]], "acknowledged")


def test_messages_of_a_topic_whose_last_subscription_is_deleted_count_as_cleaned(
    subject: Callable[..., Subject],
) -> None:
    """Deleting a topic's last subscription removes its messages: the ``cleaned`` counter
    counts them, the ``removed`` counter (consumers' removals) does not."""
    s = subject()
    a = SubscriptionKey(T, "c", "a")
    s.store.add_subscription(a)
    s.store.add([msg(T, i) for i in range(3)])
    s.settle()
    s.store.add([msg(T, 3)])
    s.store.delete_subscription(a)
    s.settle()
    assert s.store.count(T) == 0
    counters = s.store.stats().counters
    assert (counters["cleaned"], counters["removed"]) == (4, 0)


def test_prioritized_acks_are_per_priority(subject: Callable[..., Subject]) -> None:
    s = subject(prioritized=True)
    key = SubscriptionKey(T, "c", "p")
    s.store.add_subscription(key)
    ids = s.store.add([msg(T, i, priority=(9 if i % 2 else 1)) for i in range(6)])
    s.settle()
    s.store.acknowledge([Ack(key, ids[3], priority=9)])
    s.settle()
    assert seqs(s.store.page_subscription(key, None, 10)) == [5, 0, 2, 4]
    got = s.store.get_subscription(key)
    assert got is not None and got.last_acked_id < ids[0]
    s.store.acknowledge([Ack(key, ids[2], priority=1), Ack(key, ids[0], priority=1)])
    assert seqs(s.store.page_subscription(key, None, 10)) == [5, 4]
    assert s.store.stats().subscriptions == {key: 2}
    s.reopen()
    assert seqs(s.store.page_subscription(key, None, 10)) == [5, 4]
    assert s.store.pending_count(key) == 2


def test_paging_with_cursors_across_priorities_removals_and_a_restart(
    subject: Callable[..., Subject],
) -> None:
    """A cursor taken before removals, adds and a checkpoint (or a restart) goes on where it
    was; a later add above the cursor's priority is not returned (restart from None)."""
    s = subject(prioritized=True)
    ids = s.store.add([msg(Q, i, priority=i % 3 * 4, body=bytes(10 * i)) for i in range(12)])
    s.settle()
    first = s.store.page(Q, None, 5)
    order = sorted(range(12), key=lambda i: (-(i % 3 * 4), i))
    assert seqs(first) == order[:5]  # 2, 5, 8, 11 (priority 8), then 1 (priority 4)
    s.store.remove(Q, [first[0].id, ids[4], ids[3]])
    s.store.add([msg(Q, i, priority=i % 3 * 4, body=bytes(10)) for i in range(12, 15)])
    s.settle()
    rest = s.store.page(Q, first[-1].cursor, 100)
    assert seqs(rest) == [7, 10, 13, 0, 6, 9, 12]
    assert seqs(s.store.page(Q, first[-1].cursor, 100, max_bytes=171)) == [7, 10, 13]
    assert seqs(s.store.page(Q, first[-1].cursor, 3, max_bytes=10**6)) == [7, 10, 13]
    assert seqs(s.store.page(Q, None, 3)) == [5, 8, 11]
    s.reopen()
    assert seqs(s.store.page(Q, first[-1].cursor, 100)) == seqs(rest)
    assert s.store.count(Q) == 12
    assert s.store.stats().destinations == {Q: 12}


def test_an_xa_branch_with_no_work_is_refused(subject: Callable[..., Subject]) -> None:
    s = subject()
    s.store.add([msg(Q, 1)])
    with pytest.raises(TransactionError):
        s.store.xa_prepare(Xid(1, b"g", b"b"), Batch())
    with pytest.raises(TransactionError):
        s.store.xa_commit(Xid(1, b"g", b"b"))
    with pytest.raises(TransactionError):
        s.store.xa_rollback(Xid(1, b"g", b"b"))
    assert s.store.xa_recover() == [] and s.store.count(Q) == 1


def test_invalid_input_is_refused_alike(subject: Callable[..., Subject]) -> None:
    s = subject()
    [mid] = s.store.add([msg(Q, 1)])
    s.settle()
    for call in (
        lambda: s.store.remove("orders", [mid]),
        lambda: s.store.purge("orders"),
        lambda: s.store.commit(Batch(removes=[Removal("orders", mid)])),
        lambda: s.store.add_subscription(SubscriptionKey(Q, "c", "s")),
        lambda: s.store.update("queue://", mid, b"x"),
    ):
        with pytest.raises(InvalidMessageError):
            call()
    assert s.store.count(Q) == 1 and s.store.subscriptions() == []


def test_recovery_keeps_removals_purges_updates_and_subscriptions(
    subject: Callable[..., Subject],
) -> None:
    s = subject()
    key = SubscriptionKey(T, "c", "s")
    ids = s.store.add([msg(Q, i) for i in range(4)])
    s.settle()
    s.store.add_subscription(key)
    tids = s.store.add([msg(T, i) for i in range(3)])
    s.store.remove(Q, [ids[0]])
    s.store.update(Q, ids[1], b"updated")
    s.store.acknowledge([Ack(key, tids[0])])
    s.store.purge(Q2)
    s.reopen()
    assert seqs(s.store.page(Q, None, 10)) == [1, 2, 3]
    got = s.store.get(ids[1])
    assert got is not None and got.msg == b"updated"
    assert seqs(s.store.page_subscription(key, None, 10)) == [1, 2]
    assert s.store.destinations() == [Q, T]
    new = s.store.add([msg(Q, 9)])
    assert new[0] > tids[-1]
