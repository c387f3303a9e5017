"""A durable subscriber resumes exactly where its acknowledgements left it, whatever order
it acked in and however it reconnected; and its store usage follows what it consumed."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
import stomp

from mqstore.store import Cursor, Store, StoredMessage, SubscriptionKey
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, Collector, connect, wait_until

P = {"persistent": "true"}
DUR = {"activemq.subscriptionName": "dur"}


def _subscribe(conn: stomp.Connection12, topic: str, prefetch: int) -> None:
    headers = {**DUR, "activemq.prefetchSize": str(prefetch)}
    conn.subscribe(topic, id="d", ack="client-individual", headers=headers)


def _create_subscription(bt: BrokerThread, topic: str) -> None:
    c, col = connect(bt.port, client_id="cid")
    c.subscribe(topic, id="d", ack="client-individual", headers=DUR, receipt="s")
    assert col.wait(lambda: "s" in col.receipts)
    c.disconnect()


def _publish(bt: BrokerThread, topic: str, bodies: list[str], **headers: str) -> None:
    prod, pcol = connect(bt.port)
    for i, body in enumerate(bodies):
        prod.send(topic, body, headers={**P, **headers}, receipt=f"r{i}")
    assert pcol.wait(lambda: len(pcol.receipts) == len(bodies))
    prod.disconnect()


def _ack(conn: stomp.Connection12, col: Collector, msg: Any) -> None:
    rid = "a-" + msg.body
    conn.ack(msg.headers["ack"], receipt=rid)
    assert col.wait(lambda: rid in col.receipts)


def test_an_ack_from_an_earlier_session_does_not_skip_unacked_messages(
    broker: BrokerThread,
) -> None:
    _create_subscription(broker, "/topic/h")
    _publish(broker, "/topic/h", [f"m{i}" for i in range(10)])
    c, col = connect(broker.port, client_id="cid")
    _subscribe(c, "/topic/h", 5)
    _ack(c, col, col.wait_messages(5)[4])  # only m4 of m0..m4
    c.disconnect()
    c, col = connect(broker.port, client_id="cid")
    _subscribe(c, "/topic/h", 1)
    first = col.wait_messages(1)[0]
    assert first.body == "m0"
    _ack(c, col, first)
    c.disconnect()
    c, col = connect(broker.port, client_id="cid")
    _subscribe(c, "/topic/h", 100)
    expected = ["m1", "m2", "m3"] + [f"m{i}" for i in range(5, 10)]
    assert [m.body for m in col.wait_messages(len(expected))] == expected
    time.sleep(0.3)
    assert len(col.messages) == len(expected)
    c.disconnect()


def test_reconnecting_while_a_page_is_read_loses_nothing(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = {"on": False}
    real = any_store.page_subscription

    def page_subscription(
        key: SubscriptionKey, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        if slow["on"]:
            time.sleep(0.8)
        return real(key, after, limit, max_bytes)

    monkeypatch.setattr(any_store, "page_subscription", page_subscription)
    bt = BrokerThread(any_store, dataclasses.replace(FAST, memory_window=10)).start()
    try:
        _create_subscription(bt, "/topic/t")
        _publish(bt, "/topic/t", [f"m{i}" for i in range(30)])
        slow["on"] = True
        c, col = connect(bt.port, client_id="cid")
        _subscribe(c, "/topic/t", 5)
        assert [m.body for m in col.wait_messages(5)] == [f"m{i}" for i in range(5)]
        c.disconnect()  # nothing acked, while the next page is being read
        c, col = connect(bt.port, client_id="cid")
        _subscribe(c, "/topic/t", 5)
        slow["on"] = False
        got: list[str] = []
        while len(got) < 30:
            msg = col.wait_messages(len(got) + 1)[len(got)]
            got.append(msg.body)
            _ack(c, col, msg)
        assert got == [f"m{i}" for i in range(30)]
        assert any_store.pending_count(SubscriptionKey("topic://t", "cid", "dur")) == 0
        c.disconnect()
    finally:
        bt.close()


def test_acking_one_priority_keeps_the_usage_of_unconsumed_other_priorities(
    prio_broker: BrokerThread,
) -> None:
    _create_subscription(prio_broker, "/topic/wm")
    _publish(prio_broker, "/topic/wm", [f"low{i}" for i in range(5)], priority="1")
    _publish(prio_broker, "/topic/wm", ["high"], priority="9")
    stored = prio_broker.snapshot()["store_usage"]["used"]
    c, col = connect(prio_broker.port, client_id="cid")
    _subscribe(c, "/topic/wm", 1)
    high = col.wait_messages(1)[0]
    assert high.body == "high"
    _ack(c, col, high)
    assert prio_broker.snapshot()["store_usage"]["used"] >= stored * 5 // 6 - 50
    c.disconnect()


def test_a_message_a_durable_subscriber_never_acks_goes_to_the_dlq_past_the_limit(
    any_store: Store,
) -> None:
    policy = dataclasses.replace(FAST.redelivery, maximum_redeliveries=1)
    bt = BrokerThread(any_store, dataclasses.replace(FAST, redelivery=policy)).start()
    try:
        _create_subscription(bt, "/topic/poison")
        _publish(bt, "/topic/poison", ["poison", "fine"])
        flags = []
        for _ in range(2):  # delivered, then redelivered once: never acknowledged
            c, col = connect(bt.port, client_id="cid")
            _subscribe(c, "/topic/poison", 1)
            flags.append(col.wait_messages(1)[0].headers["redelivered"])
            assert col.messages[0].body == "poison"
            c.disconnect()
        assert flags == ["false", "true"]
        c, col = connect(bt.port, client_id="cid")
        _subscribe(c, "/topic/poison", 1)
        assert [m.body for m in col.wait_messages(1)] == ["fine"]
        _ack(c, col, col.messages[0])
        c.disconnect()
        assert wait_until(lambda: any_store.count("queue://ActiveMQ.DLQ") == 1)
        assert any_store.pending_count(SubscriptionKey("topic://poison", "cid", "dur")) == 0
    finally:
        bt.close()


def _redelivery_counters(bt: BrokerThread, key: SubscriptionKey) -> dict[int, int]:
    """The redelivery counters the broker keeps for ``key``'s delivered, unacked messages."""
    assert bt.broker is not None
    topics = bt.broker.topics

    async def read() -> dict[int, int]:
        return dict(topics[key.container].durables[key].delivered)

    result: dict[int, int] = bt.call(read())
    return result


def test_an_unacked_message_expired_while_its_subscriber_is_offline_leaves_no_counter(
    broker: BrokerThread, any_store: Store
) -> None:
    key = SubscriptionKey("topic://ttl-unacked", "cid", "dur")
    c, col = connect(broker.port, client_id="cid")
    c.subscribe("/topic/ttl-unacked", id="d", ack="client-individual", headers=DUR, receipt="s")
    assert col.wait(lambda: "s" in col.receipts)
    expires = str(int(time.time() * 1000) + 3000)  # time enough to be delivered first
    _publish(broker, "/topic/ttl-unacked", ["a"], expires=expires)
    assert [m.body for m in col.wait_messages(1)] == ["a"]
    assert len(_redelivery_counters(broker, key)) == 1  # delivered, not acked
    c.disconnect()  # offline, "a" unacked: its counter is kept for the next session

    # The sweep removes "a" once expired; its store usage is released in the same step.
    assert wait_until(lambda: any_store.pending_count(key) == 0, 20)
    assert wait_until(lambda: broker.snapshot()["store_usage"]["used"] == 0, 20)
    assert _redelivery_counters(broker, key) == {}
