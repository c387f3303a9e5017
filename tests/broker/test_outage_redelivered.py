"""A message whose ACK failed to reach the store (the database away) is delivered again
marked ``redelivered:true``, and the outage does not count towards its maximum
redeliveries."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from tests.broker.harness import BrokerThread, connect, wait_until
from tests.conftest import Databases, database_away

P = {"persistent": "true"}
DLQ = "queue://ActiveMQ.DLQ"


def test_a_queue_message_whose_ack_failed_comes_back_redelivered_and_stays_off_the_dlq(
    pg_broker_one_redelivery: BrokerThread, engine: Engine, databases: Databases
) -> None:
    prod, _ = connect(pg_broker_one_redelivery.port)
    prod.send("/queue/work", "m0", headers=P, receipt="s0")
    prod.disconnect(receipt="bye")
    cons, col = connect(pg_broker_one_redelivery.port)
    cons.subscribe("/queue/work", id="1", ack="client-individual")
    first = col.wait_messages(1)[0]
    assert first.headers["redelivered"] == "false"
    with database_away(engine, databases):
        cons.ack(first.headers["ack"])  # its store write fails: m0 comes back
        again = col.wait_messages(2)[1]
    assert again.body == "m0"
    assert again.headers["redelivered"] == "true"

    # Left unacknowledged once (maximum_redeliveries 1): delivered again, not moved to the
    # DLQ, as the failed ACK counted for no redelivery.
    cons.disconnect(receipt="gone")
    later, col2 = connect(pg_broker_one_redelivery.port)
    later.subscribe("/queue/work", id="2", ack="client-individual")
    last = col2.wait_messages(1, timeout=15)[0]
    assert (last.body, last.headers["redelivered"]) == ("m0", "true")
    later.ack(last.headers["ack"], receipt="acked")
    assert col2.wait(lambda: "acked" in col2.receipts, timeout=15), col2.errors
    store = pg_broker_one_redelivery.store
    assert wait_until(lambda: store.count("queue://work") == 0)
    assert store.count(DLQ) == 0
    later.disconnect()


def test_a_durable_subscription_message_whose_ack_failed_comes_back_redelivered(
    pg_broker_one_redelivery: BrokerThread, engine: Engine, databases: Databases
) -> None:
    cons, col = connect(pg_broker_one_redelivery.port, client_id="c1")
    cons.subscribe(
        "/topic/t", id="1", ack="client-individual",
        headers={"activemq.subscriptionName": "s"}, receipt="sub",
    )  # fmt: skip
    assert col.wait(lambda: "sub" in col.receipts)
    prod, _ = connect(pg_broker_one_redelivery.port)
    prod.send("/topic/t", "m0", headers=P, receipt="s0")
    prod.disconnect(receipt="bye")
    first = col.wait_messages(1)[0]
    assert first.headers["redelivered"] == "false"
    with database_away(engine, databases):
        cons.ack(first.headers["ack"])  # its store write fails: m0 comes back
        again = col.wait_messages(2, timeout=15)[1]
    assert again.body == "m0"
    assert again.headers["redelivered"] == "true"
    cons.ack(again.headers["ack"], receipt="acked")
    assert col.wait(lambda: "acked" in col.receipts, timeout=15), col.errors
    cons.disconnect(receipt="gone")

    # Acknowledged: a later attach of the subscription starts after it.
    prod, _ = connect(pg_broker_one_redelivery.port)
    prod.send("/topic/t", "m1", headers=P, receipt="s1")
    prod.disconnect(receipt="bye")
    back, col3 = connect(pg_broker_one_redelivery.port, client_id="c1")
    back.subscribe(
        "/topic/t", id="1", ack="client-individual",
        headers={"activemq.subscriptionName": "s"},
    )  # fmt: skip
    assert col3.wait_messages(1)[0].body == "m1"
    back.disconnect()
