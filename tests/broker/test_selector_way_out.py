"""Every refusal of a durable subscription with a selector names the same way out: consume
it with ActiveMQ, or the exact UNSUBSCRIBE (destination and subscription name) that deletes
it, then subscribe again without a selector."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from mqstore.store import PostgresStore, SubscriptionKey
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect

KEY = SubscriptionKey("topic://T", "cid", "sub")
WAY_OUT = (
    "consume it with ActiveMQ, or delete it (UNSUBSCRIBE with destination /topic/T and "
    "activemq.subscriptionName 'sub'; its stored messages go with it) and subscribe again "
    "without a selector"
)


@pytest.fixture
def broker(engine: Engine) -> Iterator[BrokerThread]:
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    store.add_subscription(KEY, selector="convert_string_expressions:colour = 'red'")
    thread = BrokerThread(store, FAST).start()
    try:
        yield thread
    finally:
        thread.close()
        store.stop()


def _refusal(broker: BrokerThread, headers: dict[str, str]) -> str:
    conn, col = connect(broker.port, client_id="cid")
    conn.subscribe("/topic/T", id="d", ack="client-individual", headers=headers)
    assert col.wait(lambda: bool(col.errors)), col.bodies()
    message: str = col.errors[0].headers["message"]
    return message


def test_resuming_it_without_a_selector_names_the_unsubscribe_that_deletes_it(
    broker: BrokerThread,
) -> None:
    message = _refusal(broker, {"activemq.subscriptionName": "sub"})
    assert WAY_OUT[:1].upper() + WAY_OUT[1:] in message, message


def test_resuming_it_with_a_selector_header_names_the_unsubscribe_that_deletes_it(
    broker: BrokerThread,
) -> None:
    headers = {"activemq.subscriptionName": "sub", "selector": "colour = 'red'"}
    message = _refusal(broker, headers)
    assert message.startswith("message selectors are not supported by this broker"), message
    assert WAY_OUT in message, message


def test_a_selector_on_a_queue_gets_no_durable_subscription_advice(
    broker: BrokerThread,
) -> None:
    conn, col = connect(broker.port, client_id="cid")
    headers = {"activemq.subscriptionName": "sub", "selector": "colour = 'red'"}
    conn.subscribe("/queue/Q", id="d", ack="auto", headers=headers)
    assert col.wait(lambda: bool(col.errors)), col.bodies()
    message = col.errors[0].headers["message"]
    assert message == "message selectors are not supported by this broker", message
