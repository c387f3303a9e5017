"""A durable subscription name subscribed to another topic is one subscription that moved,
as in ActiveMQ: the old topic's subscription goes, so its messages are not kept for ever."""

from __future__ import annotations

from tests.broker.harness import BrokerThread, connect

P = {"persistent": "true"}


def _durable(name: str) -> dict[str, str]:
    return {"activemq.subscriptionName": name}


def test_a_durable_subscription_moved_to_another_topic_stops_keeping_the_old_topics_messages(
    broker: BrokerThread,
) -> None:
    sub, _ = connect(broker.port, client_id="app")
    sub.subscribe("/topic/old", id="1", ack="auto", headers=_durable("feed"))
    sub.disconnect(receipt="bye")

    moved, col = connect(broker.port, client_id="app")
    moved.subscribe("/topic/new", id="1", ack="auto", headers=_durable("feed"), receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    subs = broker.store.subscriptions()
    assert [(s.key.container, s.key.client_id, s.key.sub_name) for s in subs] == [
        ("topic://new", "app", "feed")
    ]

    prod, pc = connect(broker.port)
    prod.send("/topic/old", "nobody reads this", headers=P, receipt="old")
    prod.send("/topic/new", "fresh", headers=P, receipt="new")
    assert pc.wait(lambda: len(pc.receipts) == 2)
    assert [m.body for m in col.wait_messages(1)] == ["fresh"]
    assert broker.store.count("topic://old") == 0  # nothing kept for a gone subscription
    names = [d["destination"] for d in broker.snapshot()["durable_subscriptions"]]
    assert names == ["topic://new"]
    moved.disconnect()
    prod.disconnect()


def test_a_durable_subscription_in_use_on_one_topic_cannot_move_to_another(
    broker: BrokerThread,
) -> None:
    conn, col = connect(broker.port, client_id="app")
    conn.subscribe("/topic/old", id="1", ack="auto", headers=_durable("feed"))
    conn.subscribe("/topic/new", id="2", ack="auto", headers=_durable("feed"))
    assert col.wait(lambda: bool(col.errors))
    told = col.errors[0].headers["message"]
    assert "in use on topic://old" in told and "unsubscribe it there first" in told
    subs = broker.store.subscriptions()
    assert [(s.key.container, s.key.sub_name) for s in subs] == [("topic://old", "feed")]


def test_deleting_a_durable_subscription_in_use_under_another_id_is_refused_and_changes_nothing(
    mem_broker: BrokerThread,
) -> None:
    conn, col = connect(mem_broker.port, client_id="app")
    conn.subscribe("/topic/feed", id="reader", ack="auto", headers=_durable("feed"))
    conn.unsubscribe(
        id="other", headers={"destination": "/topic/feed", **_durable("feed")}, receipt="u"
    )
    assert col.wait(lambda: bool(col.errors))
    told = col.errors[0].headers["message"]
    assert "in use by subscription id 'reader'" in told and "UNSUBSCRIBE that id first" in told
    subs = mem_broker.store.subscriptions()
    assert [(s.key.container, s.key.sub_name) for s in subs] == [("topic://feed", "feed")]


def test_a_durable_subscriber_unsubscribed_then_deleted_can_subscribe_again_with_its_id(
    mem_broker: BrokerThread,
) -> None:
    conn, col = connect(mem_broker.port, client_id="app")
    conn.subscribe("/topic/feed", id="reader", ack="auto", headers=_durable("feed"))
    conn.unsubscribe(id="reader", receipt="detached")
    conn.unsubscribe(
        id="reader", headers={"destination": "/topic/feed", **_durable("feed")}, receipt="gone"
    )
    conn.subscribe("/topic/feed", id="reader", ack="auto", receipt="again")
    assert col.wait(lambda: "again" in col.receipts or bool(col.errors))
    assert not col.errors, col.errors[0].headers["message"]
    assert mem_broker.store.subscriptions() == []
    prod, _ = connect(mem_broker.port)
    prod.send("/topic/feed", "live")
    assert [m.body for m in col.wait_messages(1)] == ["live"]
