"""``activemq.noLocal:true`` on a non-durable topic subscription: the messages its own
connection publishes are not delivered to it (other subscriptions, of that connection
too, get them). On a durable subscription or a queue, where ActiveMQ evaluates it as a
selector, it is refused as selectors are."""

from __future__ import annotations

import pytest

from mqstore.broker.memory_store import MemoryStore
from tests.broker.harness import BrokerThread, connect, running

NO_LOCAL = {"activemq.noLocal": "true"}


def test_a_no_local_subscriber_gets_only_other_connections_messages(
    broker: BrokerThread,
) -> None:
    own, own_col = connect(broker.port)
    own.subscribe("/topic/nl", id="local", ack="auto", headers=NO_LOCAL)
    own.subscribe("/topic/nl", id="all", ack="auto", receipt="s")
    assert own_col.wait(lambda: "s" in own_col.receipts), own_col.errors
    other, other_col = connect(broker.port)
    own.send("/topic/nl", "mine", headers={"persistent": "true"}, receipt="m")
    assert own_col.wait(lambda: "m" in own_col.receipts), own_col.errors
    other.send("/topic/nl", "theirs", receipt="t")
    assert other_col.wait(lambda: "t" in other_col.receipts), other_col.errors
    # Both reach subscription "all"; once "theirs" reached "local", "mine" would have too.
    assert own_col.wait(
        lambda: (
            [m.body for m in own_col.messages if m.headers["subscription"] == "local"] == ["theirs"]
            and len(own_col.messages) == 3
        )
    ), [(m.headers["subscription"], m.body) for m in own_col.messages]
    by_sub = [(m.headers["subscription"], m.body) for m in own_col.messages]
    assert sorted(by_sub) == [("all", "mine"), ("all", "theirs"), ("local", "theirs")]
    own.disconnect()
    other.disconnect()


@pytest.mark.parametrize(
    ("destination", "durable", "what"),
    [("/topic/nl", True, "durable subscription"), ("/queue/nl", False, "queue")],
)
def test_no_local_is_refused_where_it_would_need_a_selector(
    memory_store: MemoryStore, destination: str, durable: bool, what: str
) -> None:
    with running(memory_store) as bt:
        conn, col = connect(bt.port, client_id="cid")
        headers = {**NO_LOCAL, **({"activemq.subscriptionName": "n"} if durable else {})}
        conn.subscribe(destination, id="1", headers=headers)
        assert col.wait(lambda: bool(col.errors))
        told = col.errors[0].headers["message"]
        assert "activemq.noLocal" in told and what in told, told
        assert col.disconnected.wait(10)
        assert bt.snapshot()["durable_subscriptions"] == []
