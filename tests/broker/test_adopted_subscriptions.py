"""Durable subscriptions ActiveMQ stored with a message selector. This broker does not
evaluate selectors, so it refuses to resume one (an ERROR that names it and says what to
do) rather than deliver the messages its selector excludes; the topic keeps storing
messages for it, and an UNSUBSCRIBE deletes it. Other rows ActiveMQ writes to
ACTIVEMQ_ACKS (virtual-topic queue markers, a SUB_DEST other than the topic) are served
as before."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import takeover
from mqstore.store import PostgresStore, Store, SubscriptionKey
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, Collector, connect, drain
from tests.conftest import load_activemq_fixture

KEY = SubscriptionKey("topic://T", "cid", "sub")
#: How ActiveMQ stores the selector of a STOMP client's SUBSCRIBE.
SELECTOR = "convert_string_expressions:colour = 'red'"
DUR = {"activemq.subscriptionName": "sub"}


def _publish(port: int, topic: str, colours: list[str]) -> None:
    prod, col = connect(port)
    for i, colour in enumerate(colours):
        headers = {"persistent": "true", "colour": colour}
        prod.send(topic, f"{colour}-{i}", headers=headers, receipt=f"p{i}")
    assert col.wait(lambda: len(col.receipts) == len(colours))
    prod.disconnect()


def _subscribe(port: int, client_id: str, name: str, topic: str) -> tuple[Any, Collector]:
    """A client subscribing to durable subscription ``name``: once its receipt or an ERROR
    came back."""
    conn, col = connect(port, client_id=client_id)
    headers = {"activemq.subscriptionName": name}
    conn.subscribe(topic, id="d", ack="client-individual", headers=headers, receipt="s")
    assert col.wait(lambda: bool(col.errors) or "s" in col.receipts)
    return conn, col


def _refused(col: Collector) -> str:
    """The ERROR a refused SUBSCRIBE got; the broker closed the connection, nothing sent."""
    assert col.errors, f"the SUBSCRIBE was not refused; got {col.bodies()}"
    assert col.disconnected.wait(10)
    assert col.messages == []
    message: str = col.errors[0].headers["message"]
    return message


def test_a_subscription_with_a_selector_is_refused_and_keeps_its_messages(
    any_store: Store,
) -> None:
    any_store.add_subscription(KEY, selector=SELECTOR)
    broker = BrokerThread(any_store, FAST).start()
    try:
        _publish(broker.port, "/topic/T", ["red", "blue"])
        _, col = _subscribe(broker.port, "cid", "sub", "/topic/T")
        message = _refused(col)
        for part in ("'sub'", "'cid'", SELECTOR, "UNSUBSCRIBE", "ActiveMQ"):
            assert part in message, message
        assert any_store.pending_count(KEY) == 2
        _publish(broker.port, "/topic/T", ["red"])  # the topic keeps storing for it
        assert any_store.pending_count(KEY) == 3
        broker.restart()
        _, col = _subscribe(broker.port, "cid", "sub", "/topic/T")
        _refused(col)
        sub = any_store.get_subscription(KEY)
        assert sub is not None and sub.selector == SELECTOR
        assert any_store.pending_count(KEY) == 3
    finally:
        broker.close()


def test_resuming_with_the_stored_selector_is_refused_with_the_way_out(
    any_store: Store,
) -> None:
    """The client that made it on ActiveMQ subscribes with its selector header again."""
    any_store.add_subscription(KEY, selector=SELECTOR)
    broker = BrokerThread(any_store, FAST).start()
    try:
        _publish(broker.port, "/topic/T", ["red"])
        conn, col = connect(broker.port, client_id="cid")
        headers = {**DUR, "selector": "colour = 'red'"}
        conn.subscribe("/topic/T", id="d", ack="client-individual", headers=headers)
        assert col.wait(lambda: bool(col.errors))
        message = _refused(col)
        assert "'sub'" in message and "UNSUBSCRIBE" in message, message
        assert any_store.pending_count(KEY) == 1
    finally:
        broker.close()


def test_unsubscribe_deletes_a_subscription_with_a_selector(any_store: Store) -> None:
    """The documented way out: delete it, then subscribe again without a selector; the new
    subscription gets what is published from then on."""
    any_store.add_subscription(KEY, selector=SELECTOR)
    broker = BrokerThread(any_store, FAST).start()
    try:
        _publish(broker.port, "/topic/T", ["blue"])
        conn, col = connect(broker.port, client_id="cid")
        conn.unsubscribe("d", headers={"destination": "/topic/T", **DUR}, receipt="u")
        assert col.wait(lambda: "u" in col.receipts), col.errors
        assert any_store.get_subscription(KEY) is None
        conn.subscribe("/topic/T", id="d", ack="auto", headers=DUR, receipt="s")
        assert col.wait(lambda: "s" in col.receipts), col.errors
        sub = any_store.get_subscription(KEY)
        assert sub is not None and sub.selector is None
        _publish(broker.port, "/topic/T", ["green"])
        assert [m.body for m in col.wait_messages(1)] == ["green-0"]
        conn.disconnect()
    finally:
        broker.close()


def test_a_subscription_with_a_selector_is_not_moved_to_another_topic(any_store: Store) -> None:
    """Its name on another topic would delete it with its stored messages: refused too."""
    any_store.add_subscription(KEY, selector=SELECTOR)
    broker = BrokerThread(any_store, FAST).start()
    try:
        _publish(broker.port, "/topic/T", ["red"])
        _, col = _subscribe(broker.port, "cid", "sub", "/topic/U")
        message = _refused(col)
        assert SELECTOR in message and "topic://T" in message, message
        assert any_store.get_subscription(KEY) is not None
        assert any_store.pending_count(KEY) == 1
    finally:
        broker.close()


def _activemq_database(engine: Engine) -> None:
    """The ActiveMQ fixture, with subA given a selector as ActiveMQ's STOMP stores it, a
    virtual-topic marker row (PRIORITY 11), and a subscription subC whose SUB_DEST is the
    wildcard it was made on (as ActiveMQ writes for a wildcard durable subscriber)."""
    load_activemq_fixture(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE activemq_acks SET selector = :s WHERE sub_name = 'subA'"),
            {"s": "convert_string_expressions:seq = '5'"},
        )
        conn.execute(
            sa.text(
                "INSERT INTO activemq_acks (container, sub_dest, client_id, sub_name, selector, "
                "last_acked_id, priority) VALUES (:q, :q, :q, :q, NULL, 0, 11), "
                "('topic://FIXTURE.T', 'topic://FIXTURE.>', 'fix-sub-c', 'subC', NULL, 0, 0)"
            ),
            {"q": "queue://Consumer.A.VirtualTopic.V"},
        )


def test_adopted_activemq_subscriptions(empty_engine: Engine) -> None:
    """After adopt (which warns about subA's selector), subA is refused and keeps T4 and T5;
    subB and subC get T1..T5; the queue is served, and the marker row is no subscription."""
    _activemq_database(empty_engine)
    report = takeover.adopt(empty_engine)
    warnings = [a for a in report.actions if a.startswith("warning:")]
    assert len(warnings) == 1, report.actions
    assert "fix-sub-a" in warnings[0] and "seq = '5'" in warnings[0]
    assert "subB" not in warnings[0] and "subC" not in warnings[0]
    store = PostgresStore(empty_engine, cleanup_interval_s=0)
    store.start()
    broker = BrokerThread(store, FAST).start()
    try:
        _, col = _subscribe(broker.port, "fix-sub-a", "subA", "/topic/FIXTURE.T")
        assert "seq = '5'" in _refused(col)
        assert store.pending_count(SubscriptionKey("topic://FIXTURE.T", "fix-sub-a", "subA")) == 2
        for client_id, name in (("fix-sub-b", "subB"), ("fix-sub-c", "subC")):
            conn, col = _subscribe(broker.port, client_id, name, "/topic/FIXTURE.T")
            got = col.wait_messages(5)
            assert [m.body for m in got] == [f"topic msg {i}" for i in range(1, 6)]
            conn.disconnect()
        assert len(drain(broker.port, "/queue/FIXTURE.Q")) == 12
        durables = broker.snapshot()["durable_subscriptions"]
        assert sorted((d["destination"], d["subscription"]) for d in durables) == [
            ("topic://FIXTURE.T", name) for name in ("subA", "subB", "subC")
        ]
    finally:
        broker.close()
        store.stop()
