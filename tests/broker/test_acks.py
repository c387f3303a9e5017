"""Ack modes, transactions, priorities, prefetch and exclusive consumers."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from mqstore.broker.memory_store import MemoryStore
from mqstore.errors import DatabaseUnavailableError
from mqstore.store import Batch
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until

P = {"persistent": "true"}


def _fill(broker: BrokerThread, dest: str, n: int, **extra: str) -> None:
    prod, col = connect(broker.port)
    for i in range(n):
        prod.send(dest, f"m{i}", headers={**P, **extra}, receipt=f"r{i}")
    assert col.wait(lambda: len(col.receipts) == n)
    prod.disconnect()


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_client_individual_redelivers_unacked(broker: BrokerThread, version: str) -> None:
    _fill(broker, "/queue/ci", 3)
    cons, col = connect(broker.port, version=version)
    cons.subscribe("/queue/ci", id="s", ack="client-individual")
    msgs = col.wait_messages(3)
    for m in (msgs[0], msgs[2]):
        if version == "1.2":
            cons.ack(m.headers["ack"], receipt="a" + m.body)
        elif version == "1.1":
            cons.ack(m.headers["message-id"], "s", receipt="a" + m.body)
        else:
            cons.ack(m.headers["message-id"], receipt="a" + m.body)
    assert col.wait(lambda: len(col.receipts) == 2)
    cons.disconnect()
    again, col2 = connect(broker.port, version=version)
    again.subscribe("/queue/ci", id="s", ack="auto")
    got = col2.wait_messages(1)
    assert [m.body for m in got] == ["m1"]
    assert got[0].headers["redelivered"] == "true"
    assert wait_until(lambda: broker.snapshot()["destinations"]["queue://ci"]["depth"] == 0)
    again.disconnect()


def test_client_ack_is_cumulative(broker: BrokerThread) -> None:
    _fill(broker, "/queue/cc", 4)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/cc", id="s", ack="client")
    msgs = col.wait_messages(4)
    cons.ack(msgs[2].headers["ack"], receipt="r")
    assert col.wait(lambda: "r" in col.receipts)
    cons.disconnect()
    again, col2 = connect(broker.port)
    again.subscribe("/queue/cc", id="s", ack="client")
    assert [m.body for m in col2.wait_messages(1)] == ["m3"]
    again.disconnect()


def test_auto_ack_removes_from_store(broker: BrokerThread) -> None:
    _fill(broker, "/queue/aa", 3)
    assert broker.store.count("queue://aa") == 3
    cons, col = connect(broker.port)
    cons.subscribe("/queue/aa", id="s")
    col.wait_messages(3)
    assert wait_until(lambda: broker.store.count("queue://aa") == 0)
    cons.disconnect()


def test_transaction_commit_and_abort(broker: BrokerThread) -> None:
    prod, pcol = connect(broker.port)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/tx", id="s", ack="client-individual")
    prod.begin("t1")
    prod.send("/queue/tx", "a", headers=P, transaction="t1")
    prod.send("/queue/tx", "b", headers=P, transaction="t1")
    prod.send("/queue/sync", "x", receipt="sync")
    assert pcol.wait(lambda: "sync" in pcol.receipts)
    assert broker.store.count("queue://tx") == 0 and not col.messages
    prod.commit("t1", receipt="c1")
    assert pcol.wait(lambda: "c1" in pcol.receipts)
    assert broker.store.count("queue://tx") == 2
    msgs = col.wait_messages(2)
    prod.begin("t2")
    prod.send("/queue/tx", "dropped", headers=P, transaction="t2")
    prod.abort("t2", receipt="a2")
    assert pcol.wait(lambda: "a2" in pcol.receipts)
    # acks inside an aborted transaction: both messages come back, redelivered
    cons.begin("t3")
    for m in msgs:
        cons.ack(m.headers["ack"], transaction="t3")
    cons.abort("t3")
    again = col.wait_messages(4)[2:]
    assert sorted(m.body for m in again) == ["a", "b"]
    assert all(m.headers["redelivered"] == "true" for m in again)
    cons.begin("t4")
    for m in again:
        cons.ack(m.headers["ack"], transaction="t4")
    cons.commit("t4", receipt="c4")
    assert col.wait(lambda: "c4" in col.receipts)
    assert broker.store.count("queue://tx") == 0
    prod.disconnect()
    cons.disconnect()


def _send_priorities(broker: BrokerThread) -> None:
    prod, pcol = connect(broker.port)
    for i, prio in enumerate([1, 4, 9, 4, 7]):
        prod.send(
            "/queue/prio", f"{prio}-{i}", headers={**P, "priority": str(prio)}, receipt=str(i)
        )
    assert pcol.wait(lambda: len(pcol.receipts) == 5)
    prod.disconnect()


def test_plain_mode_delivers_fifo_like_activemq(broker: BrokerThread) -> None:
    """Without prioritizedMessages ActiveMQ ignores JMS priority on queues: FIFO."""
    _send_priorities(broker)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/prio", id="s")
    assert [m.body for m in col.wait_messages(5)] == ["1-0", "4-1", "9-2", "4-3", "7-4"]
    assert col.messages[2].headers["priority"] == "9"
    cons.disconnect()


def test_priority_order(prio_broker: BrokerThread) -> None:
    broker = prio_broker
    _send_priorities(broker)
    prod, _ = connect(broker.port)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/prio", id="s")
    assert [m.body for m in col.wait_messages(5)] == ["9-2", "7-4", "4-1", "4-3", "1-0"]
    assert col.messages[0].headers["priority"] == "9"
    prod.disconnect()
    cons.disconnect()


def test_prefetch_one_shares_work(broker: BrokerThread) -> None:
    _fill(broker, "/queue/fair", 10)
    slow, fast = [], []
    conns = []
    for sink in (slow, fast):
        c, col = connect(broker.port)
        c.subscribe(
            "/queue/fair", id="s", ack="client-individual",
            headers={"activemq.prefetchSize": "1"},
        )  # fmt: skip
        conns.append((c, col, sink))
    # each consumer holds exactly one unacked message; nothing more is pushed
    for _, col, _ in conns:
        col.wait_messages(1)
    assert all(len(col.messages) == 1 for _, col, _ in conns)
    deadline = time.monotonic() + 10

    def drain(c: Any, col: Any, sink: list[str]) -> None:
        seen = 0
        while len(slow) + len(fast) < 10 and time.monotonic() < deadline:
            if not col.wait(lambda n=seen: len(col.messages) > n, 0.05):
                continue
            m = col.messages[seen]
            seen += 1
            time.sleep(0.02)  # both consumers are slow
            sink.append(m.body)
            c.ack(m.headers["ack"])

    threads = [threading.Thread(target=drain, args=x) for x in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert len(slow) + len(fast) == 10
    assert len(slow) >= 3 and len(fast) >= 3
    for c, _, _ in conns:
        c.disconnect()


def test_exclusive_consumer(broker: BrokerThread) -> None:
    a, acol = connect(broker.port)
    b, bcol = connect(broker.port)
    a.subscribe("/queue/ex", id="s", headers={"activemq.exclusive": "true"}, receipt="ra")
    assert acol.wait(lambda: "ra" in acol.receipts)
    b.subscribe("/queue/ex", id="s", receipt="rb")
    assert bcol.wait(lambda: "rb" in bcol.receipts)
    _fill(broker, "/queue/ex", 6)
    acol.wait_messages(6)
    assert not bcol.messages
    a.disconnect()
    b.disconnect()


def test_topic_copies_and_no_storage_without_durables(broker: BrokerThread) -> None:
    subs = [connect(broker.port) for _ in range(2)]
    for i, (c, col) in enumerate(subs):
        c.subscribe("/topic/news", id="t", receipt=f"s{i}")
        assert col.wait(lambda i=i, col=col: f"s{i}" in col.receipts)
    _fill(broker, "/topic/news", 3)
    for _, col in subs:
        assert col.bodies() == ["m0", "m1", "m2"] or col.wait_messages(3)
        assert [m.body for m in col.wait_messages(3)] == ["m0", "m1", "m2"]
    assert broker.store.count("topic://news") == 0
    for c, _ in subs:
        c.disconnect()


class _FailingCommits(MemoryStore):
    """A store whose commits of new messages fail while ``failing`` is set."""

    failing = False

    def commit(self, batch: Batch) -> list[int]:
        if self.failing and batch.adds:
            raise DatabaseUnavailableError("the database is restarting")
        return super().commit(batch)


def test_a_transaction_whose_commit_fails_leaves_no_store_usage_behind() -> None:
    store = _FailingCommits()
    store.start()
    bt = BrokerThread(store, FAST).start()
    try:
        prod, pcol = connect(bt.port)
        store.failing = True
        prod.begin("t")
        for _ in range(5):
            prod.send("/queue/f", "x" * 1000, headers={"persistent": "true"}, transaction="t")
        prod.commit("t", receipt="c")
        assert pcol.wait(lambda: bool(pcol.errors))
        assert "c" not in pcol.receipts
        assert store.count("queue://f") == 0
        assert bt.snapshot()["store_usage"]["used"] == 0
    finally:
        bt.close()
        store.stop()


def _queued(bt: BrokerThread, dest: str, count: int) -> None:
    prod, pcol = connect(bt.port)
    for i in range(count):
        prod.send(dest, f"m{i}", headers={"persistent": "true"}, receipt=f"r{i}")
    assert pcol.wait(lambda: len(pcol.receipts) == count)
    prod.disconnect()


def test_an_ack_in_a_transaction_frees_prefetch_credit_at_once(broker: BrokerThread) -> None:
    _queued(broker, "/queue/tp", 3)
    cons, col = connect(broker.port)
    headers = {"activemq.prefetchSize": "1"}
    cons.subscribe("/queue/tp", id="s", ack="client-individual", headers=headers)
    [m0] = col.wait_messages(1)
    cons.begin("t")
    cons.ack(m0.headers["ack"], transaction="t")
    assert [m.body for m in col.wait_messages(2)] == ["m0", "m1"]  # before the COMMIT
    cons.commit("t", receipt="c")
    assert col.wait(lambda: "c" in col.receipts)
    cons.disconnect()


def test_a_message_acked_in_a_transaction_cannot_be_acked_outside_it(
    broker: BrokerThread,
) -> None:
    _queued(broker, "/queue/td", 3)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/td", id="s", ack="client-individual")
    msgs = col.wait_messages(3)
    cons.begin("t")
    cons.ack(msgs[0].headers["ack"], transaction="t")
    cons.ack(msgs[0].headers["ack"])
    assert col.wait(lambda: bool(col.errors))
    assert "already settled in transaction" in col.errors[0].headers["message"]
    # The connection closed, so its transaction was aborted: every message comes back once.
    again, col2 = connect(broker.port)
    again.subscribe("/queue/td", id="s", ack="auto")
    assert sorted(m.body for m in col2.wait_messages(3)) == ["m0", "m1", "m2"]
    time.sleep(0.3)
    assert len(col2.messages) == 3
    again.disconnect()


def test_a_repeated_ack_in_one_transaction_removes_the_message_once(
    broker: BrokerThread,
) -> None:
    _queued(broker, "/queue/tw", 2)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/tw", id="s", ack="client-individual")
    msgs = col.wait_messages(2)
    cons.begin("t")
    for m in (msgs[0], msgs[1], msgs[0]):  # the first ACK retried
        cons.ack(m.headers["ack"], transaction="t")
    cons.commit("t", receipt="c")
    assert col.wait(lambda: "c" in col.receipts) and not col.errors
    assert wait_until(lambda: broker.store.count("queue://tw") == 0)
    assert broker.snapshot()["destinations"]["queue://tw"]["depth"] == 0
    cons.disconnect()


def test_a_stomp_10_unsubscribe_naming_the_destination_ends_a_subscription_with_an_id(
    mem_broker: BrokerThread,
) -> None:
    """STOMP 1.0 (and ActiveMQ) let UNSUBSCRIBE name the destination instead of the id."""
    _fill(mem_broker, "/queue/u10", 2)
    cons, col = connect(mem_broker.port, version="1.0")
    cons.subscribe("/queue/u10", id="sub-1", ack="client")
    assert [m.body for m in col.wait_messages(2)] == ["m0", "m1"]
    cons.unsubscribe(destination="/queue/u10", receipt="gone")
    assert col.wait(lambda: "gone" in col.receipts or bool(col.errors))
    assert not col.errors, col.errors[0].headers
    # the unacknowledged messages go to the next consumer; the first one gets no more
    other, col2 = connect(mem_broker.port)
    other.subscribe("/queue/u10", id="s", ack="auto")
    again = col2.wait_messages(2)
    assert [(m.body, m.headers["redelivered"]) for m in again] == [("m0", "true"), ("m1", "true")]
    _fill(mem_broker, "/queue/u10", 1)
    col2.wait_messages(3)
    assert len(col.messages) == 2
    cons.disconnect()
    other.disconnect()


def test_acks_in_a_transaction_outlive_the_unsubscribe_that_follows_them(
    broker: BrokerThread,
) -> None:
    """ACK in a transaction, UNSUBSCRIBE, COMMIT: the COMMIT consumes what was acked; only
    the messages never acked go to the next consumer."""
    _queued(broker, "/queue/tu", 3)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/tu", id="s", ack="client-individual")
    msgs = col.wait_messages(3)
    cons.begin("t")
    cons.ack(msgs[0].headers["ack"], transaction="t")
    cons.ack(msgs[2].headers["ack"], transaction="t")
    cons.unsubscribe(id="s", receipt="u")
    cons.commit("t", receipt="c")
    assert col.wait(lambda: "c" in col.receipts or bool(col.errors))
    assert not col.errors, col.errors[0].headers
    other, col2 = connect(broker.port)
    other.subscribe("/queue/tu", id="s", ack="auto")
    assert [m.body for m in col2.wait_messages(1)] == ["m1"]
    assert wait_until(lambda: broker.store.count("queue://tu") == 0)
    time.sleep(0.3)
    assert len(col2.messages) == 1
    assert broker.snapshot()["destinations"]["queue://tu"]["depth"] == 0
    cons.disconnect()
    other.disconnect()


def test_acks_in_a_transaction_aborted_after_an_unsubscribe_come_back_once(
    broker: BrokerThread,
) -> None:
    _queued(broker, "/queue/ta", 2)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/ta", id="s", ack="client-individual")
    msgs = col.wait_messages(2)
    cons.begin("t")
    cons.ack(msgs[0].headers["ack"], transaction="t")
    cons.unsubscribe(id="s", receipt="u")
    other, col2 = connect(broker.port)
    other.subscribe("/queue/ta", id="s", ack="auto")
    assert [m.body for m in col2.wait_messages(1)] == ["m1"]  # only the one never acked
    cons.abort("t", receipt="a")
    assert col.wait(lambda: "a" in col.receipts or bool(col.errors))
    assert not col.errors, col.errors[0].headers
    again = col2.wait_messages(2)
    assert (again[1].body, again[1].headers["redelivered"]) == ("m0", "true")
    assert wait_until(lambda: broker.store.count("queue://ta") == 0)
    time.sleep(0.3)
    assert len(col2.messages) == 2
    cons.disconnect()
    other.disconnect()
