"""XA two-phase commit on ActiveMQ's XID columns (reference §6)."""

from __future__ import annotations

import base64
import struct
import threading
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import TransactionError
from mqstore.store import Ack, Batch, PostgresStore, Removal, SubscriptionKey, Xid
from tests.integration.conftest import StoreFactory, msg

Q = "queue://xa"
T = "topic://xa"
SUB = SubscriptionKey(T, "client", "sub")
XID = Xid(0x1234, b"global-tx-1", b"branch-7")


def _seqs(rows: list) -> list[int]:  # type: ignore[type-arg]
    return [r.msgid_seq for r in rows]


def _xid_column(engine: Engine, table: str) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(sa.text(f"SELECT xid FROM {table} WHERE xid IS NOT NULL")).scalars()
        )


def test_xid_column_follows_activemqs_layout() -> None:
    raw = base64.b64decode(XID.encode("-", last_ack=0x0102030405060708, priority=7))
    assert raw[0:1] == b"-"
    assert struct.unpack(">q", raw[1:9])[0] == 0x0102030405060708
    assert raw[9] == 7
    assert struct.unpack(">i", raw[10:14])[0] == 0x1234
    assert struct.unpack(">h", raw[14:16])[0] == len(b"global-tx-1")
    assert raw[16:] == b"global-tx-1branch-7"
    assert Xid.decode(XID.encode("+")) == (XID, "+", 0, 0)
    # Standard alphabet with padding, as Java's Base64 and printBase64Binary write it.
    assert XID.encode("+") == base64.standard_b64encode(base64.b64decode(XID.encode("+"))).decode()


def test_prepared_work_is_invisible_and_stored_with_xids(
    store: PostgresStore, engine: Engine
) -> None:
    store.add_subscription(SUB)
    [queued] = store.add([msg(Q, 1)])
    [topic] = store.add([msg(T, 1)])
    store.xa_prepare(
        XID,
        Batch(adds=[msg(Q, 2), msg(T, 2)], removes=[Removal(Q, queued)], acks=[Ack(SUB, topic)]),
    )
    assert store.page(Q, None, 10) == []  # the prepared removal hides the row too
    assert store.count(Q) == 0
    assert _seqs(store.page_subscription(SUB, None, 10)) == [1]
    assert store.pending_count(SUB) == 1

    msgs = sorted(Xid.decode(x)[1] for x in _xid_column(engine, "activemq_msgs"))
    assert msgs == ["+", "+", "-"]
    [ack_xid] = _xid_column(engine, "activemq_acks")
    assert Xid.decode(ack_xid) == (XID, "-", topic, 0)  # new LAST_ACKED_ID inside the XID
    assert store.get_subscription(SUB).last_acked_id < topic  # type: ignore[union-attr]


def test_recover_after_restart_then_commit(make_store: StoreFactory) -> None:
    store = make_store()
    store.add_subscription(SUB)
    [queued] = store.add([msg(Q, 1)])
    [topic] = store.add([msg(T, 1)])
    store.xa_prepare(
        XID, Batch(adds=[msg(Q, 2)], removes=[Removal(Q, queued)], acks=[Ack(SUB, topic)])
    )
    store.stop()

    again = make_store()  # a new instance: only the tables remember
    [prepared] = again.xa_recover()
    assert prepared.xid == XID
    assert [m.msgid_seq for m in prepared.adds] == [2]
    assert [m.id for m in prepared.removes] == [queued]
    assert prepared.acks == (Ack(SUB, topic, 0),)

    [later] = again.add([msg(Q, 3)])  # committed after the prepare, before the commit
    again.xa_commit(XID)
    rows = again.page(Q, None, 10)
    assert _seqs(rows) == [3, 2]  # the committed add moved to a fresh ID after `later`
    assert rows[1].id > later > prepared.adds[0].id
    assert again.page_subscription(SUB, None, 10) == []
    assert again.get_subscription(SUB).last_acked_id == topic  # type: ignore[union-attr]
    assert again.xa_recover() == []
    with pytest.raises(TransactionError, match="no prepared XA transaction"):
        again.xa_commit(XID)


def test_rollback_undoes_everything(store: PostgresStore, engine: Engine) -> None:
    store.add_subscription(SUB)
    [queued] = store.add([msg(Q, 1)])
    [topic] = store.add([msg(T, 1)])
    store.xa_prepare(
        XID,
        Batch(adds=[msg(Q, 2), msg(T, 2)], removes=[Removal(Q, queued)], acks=[Ack(SUB, topic)]),
    )
    store.xa_rollback(XID)
    assert _seqs(store.page(Q, None, 10)) == [1]
    assert store.page(Q, None, 10)[0].id == queued
    assert _seqs(store.page_subscription(SUB, None, 10)) == [1]
    assert _xid_column(engine, "activemq_msgs") == []
    assert _xid_column(engine, "activemq_acks") == []
    assert store.xa_recover() == []
    with engine.connect() as conn:
        outcomes = conn.execute(
            sa.text("SELECT msgid_seq, outcome FROM mqstore_history ORDER BY msgid_seq")
        ).all()
    assert [tuple(r) for r in outcomes] == [(2, "xa-rolled-back"), (2, "xa-rolled-back")]


def test_prepare_twice_and_conflicting_removal_are_refused(store: PostgresStore) -> None:
    [queued] = store.add([msg(Q, 1)])
    store.xa_prepare(XID, Batch(removes=[Removal(Q, queued)]))
    with pytest.raises(TransactionError, match="already prepared"):
        store.xa_prepare(XID, Batch(adds=[msg(Q, 5)]))
    other = Xid(1, b"other", b"")
    with pytest.raises(TransactionError, match="already in another transaction"):
        store.xa_prepare(other, Batch(adds=[msg(Q, 6)], removes=[Removal(Q, queued)]))
    assert [p.xid for p in store.xa_recover()] == [XID]  # the failed prepare left nothing


def _racing(
    store: PostgresStore, first: Callable[[], object], second: Callable[[], object]
) -> list[str]:
    """Run ``first`` and ``second`` on two threads, ``second`` starting while ``first`` is
    inside its database transaction, where ``first`` waits up to a second (or until
    ``second`` has read the prepared work too); each one's outcome: ``"ok"`` or its
    TransactionError's message."""
    first_inside, second_read = threading.Event(), threading.Event()
    on = threading.current_thread

    def read_by_second(read: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any) -> Any:
            work = read(*args)
            if on().name == "second":
                second_read.set()
            return work

        return watched

    def held_on_first(take: Callable[..., Any]) -> Callable[..., Any]:
        def held(*args: Any) -> Any:
            if on().name == "first":
                first_inside.set()
                second_read.wait(1.0)
            return take(*args)

        return held

    outcomes: dict[str, str] = {}

    def run(name: str, call: Callable[[], object]) -> None:
        if name == "second":
            first_inside.wait(5.0)
        try:
            call()
            outcomes[name] = "ok"
        except TransactionError as exc:
            outcomes[name] = str(exc)

    with (
        mock.patch.object(store.xa, "_prepared", read_by_second(store.xa._prepared)),
        mock.patch.object(store, "next_ids", held_on_first(store.next_ids)),  # prepare
        mock.patch.object(store, "reserve_ids", held_on_first(store.reserve_ids)),  # commit
    ):
        threads = [
            threading.Thread(target=run, args=(name, call), name=name)
            for name, call in (("first", first), ("second", second))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    return [outcomes["first"], outcomes["second"]]


def test_two_prepares_of_one_xid_at_once_are_one_prepare_and_one_refusal(
    store: PostgresStore,
) -> None:
    outcomes = _racing(
        store,
        lambda: store.xa_prepare(XID, Batch(adds=[msg(Q, 1)])),
        lambda: store.xa_prepare(XID, Batch(adds=[msg(Q, 2)])),
    )
    assert outcomes[0] == "ok"
    assert "already prepared" in outcomes[1]
    [prepared] = store.xa_recover()
    assert _seqs(list(prepared.adds)) == [1]  # not both batches under one XID


@pytest.mark.parametrize("loser", ["commit", "rollback"])
def test_a_commit_and_a_rollback_of_one_xid_at_once_are_one_outcome(
    store: PostgresStore, loser: str
) -> None:
    store.xa_prepare(XID, Batch(adds=[msg(Q, 1)]))
    finish = {"commit": lambda: store.xa_commit(XID), "rollback": lambda: store.xa_rollback(XID)}
    outcomes = _racing(store, finish["commit"], finish[loser])
    assert outcomes[0] == "ok"
    assert "no prepared XA transaction" in outcomes[1]
    assert _seqs(store.page(Q, None, 10)) == [1]  # committed, once
    assert store.xa_recover() == []


def test_a_second_prepared_ack_of_one_subscription_is_refused(store: PostgresStore) -> None:
    store.add_subscription(SUB)
    [first, second] = store.add([msg(T, 1), msg(T, 2)])
    store.xa_prepare(XID, Batch(acks=[Ack(SUB, first)]))
    other = Xid(1, b"other", b"")
    with pytest.raises(TransactionError, match="already in another XA transaction"):
        store.xa_prepare(other, Batch(acks=[Ack(SUB, second)]))
    with pytest.raises(TransactionError, match="no such subscription"):
        store.xa_prepare(other, Batch(acks=[Ack(SubscriptionKey(T, "client", "gone"), 1)]))
    assert [p.xid for p in store.xa_recover()] == [XID]
    store.xa_commit(XID)
    assert [m.id for m in store.page_subscription(SUB, None, 10)] == [second]


def test_prioritized_prepared_ack_carries_its_priority(
    make_store: StoreFactory, engine: Engine
) -> None:
    store = make_store(prioritized=True)
    store.add_subscription(SUB)
    ids = store.add([msg(T, 1, priority=9), msg(T, 2, priority=3)])
    store.xa_prepare(XID, Batch(acks=[Ack(SUB, ids[0], priority=9)]))
    [ack_xid] = _xid_column(engine, "activemq_acks")
    assert Xid.decode(ack_xid)[2:] == (ids[0], 9)
    assert _seqs(store.page_subscription(SUB, None, 10)) == [1, 2]
    store.xa_commit(XID)
    assert _seqs(store.page_subscription(SUB, None, 10)) == [2]
    assert _xid_column(engine, "activemq_acks") == []


def _activemq_prepared_ack(engine: Engine, sub: SubscriptionKey, last_ack: int, xid: Xid) -> None:
    """Prepare an ack as ActiveMQ does in plain mode: XID byte 9 holds the message's JMS
    priority (its ack cache keeps ``message.getPriority()``), the ACKS row's PRIORITY is 0."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE activemq_acks SET xid = :xid WHERE container = :c "
                "AND client_id = :client AND sub_name = :sub"
            ),
            {
                "xid": xid.encode("-", last_ack, priority=4),
                "c": sub.container,
                "client": sub.client_id,
                "sub": sub.sub_name,
            },
        )


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_activemqs_plain_mode_prepared_ack_with_a_jms_priority_is_finished(
    store: PostgresStore, engine: Engine, outcome: str
) -> None:
    store.add_subscription(SUB)
    [first, second] = store.add([msg(T, 1), msg(T, 2)])
    store.acknowledge([Ack(SUB, second)])  # a commit of an older ack does not advance
    _activemq_prepared_ack(engine, SUB, first, XID)
    [prepared] = store.xa_recover()
    assert prepared.acks == (Ack(SUB, first, 0),)  # the PRIORITY column it names
    getattr(store, f"xa_{outcome}")(XID)
    assert _xid_column(engine, "activemq_acks") == []
    assert store.xa_recover() == []
    store.xa_prepare(XID, Batch(acks=[Ack(SUB, second)]))  # the row takes a new prepared ack


def test_an_xid_too_long_for_the_xid_column_is_refused(store: PostgresStore) -> None:
    too_long = Xid(1, b"g" * 100, b"b" * 100)  # XA allows 64 bytes each
    with pytest.raises(TransactionError, match="at most 250"):
        store.xa_prepare(too_long, Batch(adds=[msg(Q, 1)]))
    assert store.xa_recover() == []
    store.xa_prepare(Xid(1, b"g" * 64, b"b" * 64), Batch(adds=[msg(Q, 1)]))  # the largest fits


def test_several_acks_of_one_subscription_in_a_transaction_prepare_as_the_newest(
    store: PostgresStore, engine: Engine
) -> None:
    """A durable subscriber that acknowledges two messages in one XA transaction: the
    prepare was refused (its second ack found the ACKS row already holding the first)."""
    store.add_subscription(SUB)
    [first, second, third] = store.add([msg(T, 1), msg(T, 2), msg(T, 3)])
    store.xa_prepare(XID, Batch(acks=[Ack(SUB, second), Ack(SUB, first)]))
    [ack_xid] = _xid_column(engine, "activemq_acks")
    assert Xid.decode(ack_xid) == (XID, "-", second, 0)  # the newest, as commit() keeps it
    store.xa_commit(XID)
    assert [m.id for m in store.page_subscription(SUB, None, 10)] == [third]


def test_finishing_one_transaction_reads_no_other_transactions_rows(
    store: PostgresStore, engine: Engine
) -> None:
    """Other transactions in doubt (a stuck one, many at once) hold prepared rows with
    bodies: a prepare, commit or rollback reads its own transaction's rows only, so its
    cost does not grow with theirs."""
    body = b"b" * 10_000
    others = [Xid(1, f"other-{n}".encode(), b"") for n in range(20)]
    for n, other in enumerate(others):
        store.xa_prepare(
            other, Batch(adds=[msg(Q, 1000 + 10 * n + i, body=body) for i in range(5)])
        )
    [queued] = store.add([msg(Q, 1)])
    fetched: list[int] = []

    def count_msgs_rows(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "activemq_msgs" in statement:
            fetched.append(cursor.rowcount)

    sa.event.listen(engine, "after_cursor_execute", count_msgs_rows)
    try:
        store.xa_prepare(XID, Batch(adds=[msg(Q, 2), msg(Q, 3)], removes=[Removal(Q, queued)]))
        store.xa_commit(XID)
        store.xa_prepare(XID, Batch(adds=[msg(Q, 4)]))
        store.xa_rollback(XID)
    finally:
        sa.event.remove(engine, "after_cursor_execute", count_msgs_rows)

    assert sum(fetched) == 3 + 1  # the commit's and the rollback's own rows, nothing more
    assert _seqs(store.page(Q, None, 10)) == [2, 3]
    recovered = {p.xid: p for p in store.xa_recover()}
    assert set(recovered) == set(others)
    assert all(m.msg == body for p in recovered.values() for m in p.adds)
