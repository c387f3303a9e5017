"""UNSUBSCRIBE with ``activemq.subscriptionName`` and no ``destination`` (stomp.py's
``unsubscribe`` sends none) deletes the client's durable subscription of that name, as
ActiveMQ needs only the client-id and the name; a name on several topics (as ActiveMQ
may have stored) must be told apart by a destination, and a missing client-id is named."""

from __future__ import annotations

from mqstore.broker.memory_store import MemoryStore
from mqstore.store import SubscriptionKey
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, running

NAME = {"activemq.subscriptionName": "n1"}


def test_unsubscribe_by_name_alone_deletes_the_durable_subscription(
    broker: BrokerThread,
) -> None:
    conn, col = connect(broker.port, client_id="cid")
    conn.subscribe("/topic/du", id="x", ack="auto", headers=NAME, receipt="s")
    assert col.wait(lambda: "s" in col.receipts), col.errors
    conn.disconnect()
    conn, col = connect(broker.port, client_id="cid")
    conn.unsubscribe(id="x", headers=NAME, receipt="u")
    assert col.wait(lambda: "u" in col.receipts or bool(col.errors)), col.errors
    assert not col.errors, col.errors[0].headers["message"]
    assert broker.store.get_subscription(SubscriptionKey("topic://du", "cid", "n1")) is None
    assert broker.snapshot()["durable_subscriptions"] == []
    conn.disconnect()


def test_unsubscribe_by_name_alone_of_the_active_subscription_deletes_it(
    broker: BrokerThread,
) -> None:
    conn, col = connect(broker.port, client_id="cid")
    conn.subscribe("/topic/du", id="x", ack="auto", headers=NAME, receipt="s")
    assert col.wait(lambda: "s" in col.receipts), col.errors
    conn.unsubscribe(id="x", headers=NAME, receipt="u")
    assert col.wait(lambda: "u" in col.receipts or bool(col.errors)), col.errors
    assert not col.errors, col.errors[0].headers["message"]
    assert broker.snapshot()["durable_subscriptions"] == []
    conn.disconnect()


def test_unsubscribe_by_a_name_on_two_topics_is_refused_naming_them(
    memory_store: MemoryStore,
) -> None:
    keys = [SubscriptionKey(f"topic://{t}", "cid", "n1") for t in ("A", "B")]
    for key in keys:
        memory_store.add_subscription(key)
    bt = BrokerThread(memory_store, FAST).start()
    try:
        conn, col = connect(bt.port, client_id="cid")
        conn.unsubscribe(id="x", headers=NAME, receipt="u")
        assert col.wait(lambda: bool(col.errors) or "u" in col.receipts)
        assert col.errors, "the UNSUBSCRIBE was not refused"
        told = col.errors[0].headers["message"]
        assert "/topic/A" in told and "/topic/B" in told and "destination" in told, told
        assert all(memory_store.get_subscription(k) is not None for k in keys)
    finally:
        bt.close()


def test_unsubscribe_by_name_without_a_client_id_says_the_client_id_is_missing(
    memory_store: MemoryStore,
) -> None:
    with running(memory_store) as bt:
        conn, col = connect(bt.port)
        conn.unsubscribe(id="x", headers=NAME, receipt="u")
        assert col.wait(lambda: bool(col.errors))
        told = col.errors[0].headers["message"]
        assert "client-id header on CONNECT" in told, told
