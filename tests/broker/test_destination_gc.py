"""Idle destinations are forgotten (one-off reply queues must not grow memory and metrics)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mqstore.store.port import Store
from tests.broker.harness import BrokerThread, connect, running, wait_until

GC_S = 0.4


@pytest.fixture
def gc_broker(any_store: Store) -> Iterator[BrokerThread]:
    with running(any_store, destination_gc_after=GC_S) as bt:
        yield bt


def _names(bt: BrokerThread) -> set[str]:
    return set(bt.snapshot()["destinations"])


def test_idle_reply_queues_are_forgotten_and_come_back_on_use(gc_broker: BrokerThread) -> None:
    conn, client = connect(gc_broker.port)
    replies = [f"/queue/reply.{n}" for n in range(20)]
    for n, dest in enumerate(replies):
        conn.subscribe(dest, id=str(n), ack="auto")
        conn.send(dest, f"r{n}", headers={"persistent": "true"})
    assert client.wait(lambda: len(client.messages) == 20, 10)
    for n in range(20):
        conn.unsubscribe(id=str(n))
    conn.send("/queue/kept", "waits for a consumer", headers={"persistent": "true"})
    conn.subscribe("/topic/live", id="t", ack="auto")
    gone = {f"queue://reply.{n}" for n in range(20)}
    assert wait_until(lambda: not (_names(gc_broker) & gone), 10), _names(gc_broker)
    left = _names(gc_broker)
    assert "queue://kept" in left  # it holds a message
    assert "topic://live" in left  # it has a subscriber
    # A forgotten queue is made again by its next use, with nothing lost.
    conn.subscribe(replies[3], id="again", ack="auto")
    conn.send(replies[3], "again", headers={"persistent": "true"}, receipt="r-again")
    assert client.wait(lambda: any(m.body == "again" for m in client.messages), 10)
    conn.disconnect()
    other, got = connect(gc_broker.port)
    other.subscribe("/queue/kept", id="k", ack="auto")
    assert got.wait(lambda: [m.body for m in got.messages] == ["waits for a consumer"], 10)
    other.disconnect()


def test_a_topic_with_an_offline_durable_subscription_is_kept(gc_broker: BrokerThread) -> None:
    conn, client = connect(gc_broker.port, client_id="durable-1")
    conn.subscribe(
        "/topic/news", id="d", ack="auto", headers={"activemq.subscriptionName": "news"},
        receipt="sub",
    )  # fmt: skip
    assert client.wait(lambda: "sub" in client.receipts, 10)
    conn.disconnect()  # offline: the subscription stays
    time.sleep(GC_S * 4)  # several sweeps pass
    assert "topic://news" in _names(gc_broker)
    sender, _ = connect(gc_broker.port)
    sender.send("/topic/news", "while away", headers={"persistent": "true"}, receipt="s")
    sender.disconnect()
    again, got = connect(gc_broker.port, client_id="durable-1")
    again.subscribe(
        "/topic/news", id="d", ack="auto", headers={"activemq.subscriptionName": "news"}
    )
    assert got.wait(lambda: [m.body for m in got.messages] == ["while away"], 10)
    again.disconnect()
