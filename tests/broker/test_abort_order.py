"""ABORT gives back the messages a transaction acknowledged in the order they were first
delivered, whatever the order of the ACKs (ActiveMQ redelivers a rolled-back session's
messages in their original order), on queues, topics and durable subscriptions."""

from __future__ import annotations

import pytest

from tests.broker.harness import BrokerThread, connect

P = {"persistent": "true"}


@pytest.mark.parametrize("kind", ["queue", "topic", "durable"])
def test_abort_redelivers_in_delivery_order(broker: BrokerThread, kind: str) -> None:
    dest = "/queue/ab" if kind == "queue" else "/topic/ab"
    cons, col = connect(broker.port, client_id="c1")
    headers = {"activemq.subscriptionName": "s"} if kind == "durable" else {}
    cons.subscribe(dest, id="1", ack="client-individual", headers=headers, receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    prod, _ = connect(broker.port)
    for i in range(4):
        prod.send(dest, f"m{i}", headers=P, receipt=f"s{i}")
    first = col.wait_messages(4)
    assert [m.body for m in first] == ["m0", "m1", "m2", "m3"]

    cons.begin("tx")
    for i in (2, 0, 3, 1):  # acked in another order than delivered
        cons.ack(first[i].headers["ack"], transaction="tx")
    cons.abort("tx")
    again = col.wait_messages(8)[4:]
    assert [m.body for m in again] == ["m0", "m1", "m2", "m3"]
    assert all(m.headers["redelivered"] == "true" for m in again)
    assert not col.errors
    cons.disconnect()
    prod.disconnect()
