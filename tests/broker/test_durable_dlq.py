"""Durable subscriptions, dead letters, expiry, browsing."""

from __future__ import annotations

import time

from mqstore.broker import BrokerConfig, RedeliveryPolicy
from mqstore.broker.memory_store import MemoryStore
from mqstore.openwire import decode
from mqstore.store.model import Outcome, SubscriptionKey
from mqstore.store.port import Store
from tests.broker.harness import BrokerThread, connect, wait_until

P = {"persistent": "true"}


def _send(broker: BrokerThread, dest: str, bodies: list[str], **extra: str) -> None:
    prod, col = connect(broker.port)
    for i, b in enumerate(bodies):
        prod.send(dest, b, headers={**P, **extra}, receipt=f"r{i}")
    assert col.wait(lambda: len(col.receipts) == len(bodies))
    prod.disconnect()


def _durable(broker: BrokerThread, name: str = "sub1", ack: str = "client-individual") -> tuple:
    c, col = connect(broker.port, client_id="cid-1")
    c.subscribe(
        "/topic/dur", id="d", ack=ack,
        headers={"activemq.subscriptionName": name}, receipt="sub",
    )  # fmt: skip
    assert col.wait(lambda: "sub" in col.receipts)
    return c, col


def test_durable_across_reconnect_and_restart(broker: BrokerThread) -> None:
    c, col = _durable(broker)
    _send(broker, "/topic/dur", ["a", "b"])
    msgs = col.wait_messages(2)
    c.ack(msgs[0].headers["ack"], receipt="ack-a")
    assert col.wait(lambda: "ack-a" in col.receipts)
    c.disconnect()
    _send(broker, "/topic/dur", ["c", "d"])
    key = SubscriptionKey("topic://dur", "cid-1", "sub1")
    assert broker.store.pending_count(key) == 3
    snap = broker.snapshot()
    assert snap["durable_subscriptions"][0]["backlog"] == 3
    assert not snap["durable_subscriptions"][0]["active"]

    c, col = _durable(broker)
    got = col.wait_messages(3)
    assert [m.body for m in got] == ["b", "c", "d"]
    assert got[0].headers["redelivered"] == "true"
    c.ack(got[0].headers["ack"], receipt="ack-b")
    assert col.wait(lambda: "ack-b" in col.receipts)
    c.disconnect()

    broker.restart()
    _send(broker, "/topic/dur", ["e"])
    c, col = _durable(broker)
    assert [m.body for m in col.wait_messages(3)] == ["c", "d", "e"]
    for m in col.messages:
        c.ack(m.headers["ack"])
    c.unsubscribe("d", headers={"activemq.subscriptionName": "sub1"}, receipt="gone")
    assert col.wait(lambda: "gone" in col.receipts)
    assert broker.store.get_subscription(key) is None
    c.disconnect()


def test_durable_out_of_order_acks_never_skip(broker: BrokerThread) -> None:
    c, col = _durable(broker)
    _send(broker, "/topic/dur", ["a", "b", "c"])
    msgs = col.wait_messages(3)
    c.ack(msgs[2].headers["ack"], receipt="r3")
    assert col.wait(lambda: "r3" in col.receipts)
    c.disconnect()
    c, col = _durable(broker)
    assert [m.body for m in col.wait_messages(2)] == ["a", "b"]
    c.disconnect()


def test_nack_moves_to_dlq(broker: BrokerThread) -> None:
    _send(broker, "/queue/work", ["poison", "fine"])
    c, col = connect(broker.port)
    c.subscribe("/queue/work", id="s", ack="client-individual")
    msgs = col.wait_messages(2)
    c.nack(msgs[0].headers["ack"], receipt="n")
    c.ack(msgs[1].headers["ack"], receipt="a")
    assert col.wait(lambda: {"n", "a"} <= set(col.receipts))
    assert broker.store.count("queue://work") == 0
    rows = broker.store.page("queue://ActiveMQ.DLQ", None, 10)
    assert len(rows) == 1
    dead = decode(rows[0].msg)
    assert dead.text == "poison"
    assert dead.original_destination is not None
    assert dead.original_destination.qualified_name == "queue://work"
    if isinstance(broker.store, MemoryStore):
        assert Outcome.DEAD_LETTERED in {o for _, o in broker.store.history}
    c.subscribe("/queue/ActiveMQ.DLQ", id="dlq")
    m = col.wait_messages(3)[2]
    assert m.body == "poison"
    assert m.headers["original-destination"] == "/queue/work"
    c.disconnect()


def test_max_redeliveries_then_dlq(any_store: Store) -> None:
    cfg = BrokerConfig(
        heartbeat_ms=(0, 0),
        redelivery=RedeliveryPolicy(
            maximum_redeliveries=1, initial_redelivery_delay=0, redelivery_delay=0
        ),
        individual_dlq=True,
    )
    broker = BrokerThread(any_store, cfg).start()
    try:
        _send(broker, "/queue/flaky", ["x"])
        counters = []
        for _ in range(2):
            c, col = connect(broker.port)
            c.subscribe("/queue/flaky", id="s", ack="client")
            counters.append(col.wait_messages(1)[0].headers["redelivered"])
            c.disconnect()
        assert counters == ["false", "true"]
        assert wait_until(lambda: any_store.count("queue://ActiveMQ.DLQ.Queue.flaky") == 1)
        assert any_store.count("queue://flaky") == 0
        row = any_store.page("queue://ActiveMQ.DLQ.Queue.flaky", None, 1)[0]
        assert decode(row.msg).redelivery_counter == 2
    finally:
        broker.close()


def test_redelivery_counter_is_persisted(broker: BrokerThread) -> None:
    _send(broker, "/queue/rc", ["x"])
    c, col = connect(broker.port)
    c.subscribe("/queue/rc", id="s", ack="client")
    col.wait_messages(1)
    c.disconnect()
    assert wait_until(
        lambda: decode(broker.store.page("queue://rc", None, 1)[0].msg).redelivery_counter == 1
    )


def test_expired_messages_never_delivered(broker: BrokerThread) -> None:
    soon = str(int(time.time() * 1000) + 150)
    _send(broker, "/queue/exp", ["old"], expires=soon)
    prod, pcol = connect(broker.port)
    prod.send("/queue/exp", "volatile", headers={"expires": soon}, receipt="nv")
    prod.send("/queue/exp", "keep", headers=P, receipt="k")
    assert pcol.wait(lambda: {"nv", "k"} <= set(pcol.receipts))
    time.sleep(0.2)
    assert wait_until(lambda: broker.store.count("queue://ActiveMQ.DLQ") == 1)
    c, col = connect(broker.port)
    c.subscribe("/queue/exp", id="s")
    assert [m.body for m in col.wait_messages(1)] == ["keep"]
    time.sleep(0.1)
    assert len(col.messages) == 1
    assert decode(broker.store.page("queue://ActiveMQ.DLQ", None, 1)[0].msg).text == "old"
    prod.disconnect()
    c.disconnect()


def test_browse_queue(broker: BrokerThread) -> None:
    _send(broker, "/queue/br", ["a", "b", "c"])
    c, col = connect(broker.port)
    c.subscribe("/queue/br", id="b", headers={"browser": "true"})
    msgs = col.wait_messages(4)
    assert [m.body for m in msgs[:3]] == ["a", "b", "c"]
    assert msgs[3].headers["browser"] == "end"
    assert broker.store.count("queue://br") == 3
    c.disconnect()


def test_durable_nack_dead_letters_and_advances(broker: BrokerThread) -> None:
    c, col = _durable(broker, name="nk")
    _send(broker, "/topic/dur", ["bad", "good"])
    msgs = col.wait_messages(2)
    c.nack(msgs[0].headers["ack"], receipt="n")
    c.ack(msgs[1].headers["ack"], receipt="a")
    assert col.wait(lambda: {"n", "a"} <= set(col.receipts))
    key = SubscriptionKey("topic://dur", "cid-1", "nk")
    assert broker.store.pending_count(key) == 0
    rows = broker.store.page("queue://ActiveMQ.DLQ", None, 10)
    assert [decode(r.msg).text for r in rows] == ["bad"]
    c.disconnect()


def test_queue_backlog_paged_from_store_after_restart(any_store: Store) -> None:
    from dataclasses import replace

    from tests.broker.conftest import FAST

    bt = BrokerThread(any_store, replace(FAST, memory_window=8)).start()
    try:
        _send(bt, "/queue/deep", [f"m{i:03d}" for i in range(40)])
        bt.restart()
        c, col = connect(bt.port)
        c.subscribe("/queue/deep", id="s", ack="client-individual")
        got: list[str] = []
        while len(got) < 40:
            assert col.wait(lambda: len(col.messages) > len(got), 10)
            m = col.messages[len(got)]
            got.append(m.body)
            c.ack(m.headers["ack"])
        assert got == [f"m{i:03d}" for i in range(40)]
        assert bt.snapshot()["destinations"]["queue://deep"]["in_memory"] <= 8
        assert wait_until(lambda: any_store.count("queue://deep") == 0)
        c.disconnect()
    finally:
        bt.close()
