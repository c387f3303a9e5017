"""Individual dead-letter queues of destinations whose DLQ name would not fit ActiveMQ's
250-character CONTAINER column: their dead letters go to the shared DLQ, one warning per
destination, and nothing is lost or retried without end."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from mqstore.broker import BrokerConfig, RedeliveryPolicy
from mqstore.openwire import decode
from mqstore.store.model import SubscriptionKey
from mqstore.store.port import Store
from tests.broker.harness import BrokerThread, connect, wait_until

#: 238 characters stored (queue://...), but 257 as queue://ActiveMQ.DLQ.Queue.<name>
LONG = "L" * 230
SHARED_DLQ = "queue://ActiveMQ.DLQ"
CONFIG = BrokerConfig(
    heartbeat_ms=(0, 0),
    redelivery=RedeliveryPolicy(
        maximum_redeliveries=0, initial_redelivery_delay=0, redelivery_delay=0
    ),
    expiry_interval=0.2,
    individual_dlq=True,
)


@pytest.fixture(params=["postgres", "journaled"])
def db_store(request: pytest.FixtureRequest, engine: Engine, tmp_path: Path) -> Iterator[Store]:
    from mqstore.store.postgres import PostgresStore

    store: Store = PostgresStore(engine, cleanup_interval_s=0)
    if request.param == "journaled":
        from journal.store import JournaledStore

        store = JournaledStore(store, tmp_path / "journal", shared_lock=False)
    store.start()
    yield store
    store.stop()


@pytest.fixture
def dlq_broker(db_store: Store) -> Iterator[BrokerThread]:
    bt = BrokerThread(db_store, CONFIG).start()
    yield bt
    bt.close()


def _dead(store: Store, container: str) -> list[tuple[str, str]]:
    """(text, original destination) of the messages ``container`` holds."""
    out = []
    for row in store.page(container, None, 100):
        msg = decode(row.msg)
        assert msg.original_destination is not None
        out.append((msg.text, msg.original_destination.qualified_name))
    return sorted(out)


def _warnings(caplog: pytest.LogCaptureFixture, container: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
        and container in r.getMessage()
        and "shared DLQ" in r.getMessage()
    ]


def test_nacked_messages_of_a_queue_with_a_long_name_go_to_the_shared_dlq(
    dlq_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mqstore")
    store, queue = dlq_broker.store, f"queue://{LONG}"
    conn, col = connect(dlq_broker.port)
    for i in range(3):
        conn.send(f"/queue/{LONG}", f"poison-{i}", headers={"persistent": "true"}, receipt=f"r{i}")
    assert col.wait(lambda: len(col.receipts) == 3)
    conn.subscribe(f"/queue/{LONG}", id="1", ack="client-individual")
    msgs = col.wait_messages(3)
    for i, m in enumerate(msgs):
        conn.nack(m.headers["ack"], receipt=f"n{i}")
    assert col.wait(lambda: all(f"n{i}" in col.receipts for i in range(3)))
    assert wait_until(lambda: store.count(queue) == 0 and store.count(SHARED_DLQ) == 3)
    time.sleep(0.5)  # nothing comes back to the consumer
    assert col.errors == []
    assert not col.disconnected.is_set()
    assert len(col.messages) == 3
    assert _dead(store, SHARED_DLQ) == [(f"poison-{i}", queue) for i in range(3)]
    assert len(_warnings(caplog, queue)) == 1
    assert not [r for r in caplog.records if "moving messages to the DLQ failed" in r.getMessage()]
    conn.disconnect()


def test_expired_messages_of_a_queue_with_a_long_name_go_to_the_shared_dlq(
    dlq_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mqstore")
    store, queue = dlq_broker.store, f"queue://{LONG}E"
    conn, col = connect(dlq_broker.port)
    expires = str(int(time.time() * 1000) + 300)
    for i in range(2):
        conn.send(
            f"/queue/{LONG}E", f"expiring-{i}",
            headers={"persistent": "true", "expires": expires}, receipt=f"r{i}",
        )  # fmt: skip
    assert col.wait(lambda: len(col.receipts) == 2)
    assert wait_until(lambda: store.count(queue) == 0 and store.count(SHARED_DLQ) == 2)
    time.sleep(1.0)  # several more expiry sweeps
    assert _dead(store, SHARED_DLQ) == [(f"expiring-{i}", queue) for i in range(2)]
    assert len(_warnings(caplog, queue)) == 1
    assert not [r for r in caplog.records if "moving messages to the DLQ failed" in r.getMessage()]
    conn.disconnect()


def test_durable_subscription_on_a_topic_with_a_long_name_dead_letters_to_the_shared_dlq(
    dlq_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mqstore")
    store, topic = dlq_broker.store, f"topic://{LONG}"
    conn, col = connect(dlq_broker.port, client_id="cid-long")
    conn.subscribe(
        f"/topic/{LONG}", id="d", ack="client-individual",
        headers={"activemq.subscriptionName": "s"}, receipt="sub",
    )  # fmt: skip
    assert col.wait(lambda: "sub" in col.receipts)
    conn.send(f"/topic/{LONG}", "poison", headers={"persistent": "true"}, receipt="r")
    msg = col.wait_messages(1)[0]
    conn.nack(msg.headers["ack"], receipt="n")
    assert col.wait(lambda: "n" in col.receipts)
    key = SubscriptionKey(topic, "cid-long", "s")
    assert wait_until(lambda: store.pending_count(key) == 0 and store.count(SHARED_DLQ) == 1)
    time.sleep(0.5)
    assert col.errors == [] and len(col.messages) == 1
    assert _dead(store, SHARED_DLQ) == [("poison", topic)]
    assert len(_warnings(caplog, topic)) == 1
    conn.disconnect()


def test_queue_whose_individual_dlq_name_fits_keeps_its_own_dlq() -> None:
    config = dataclasses.replace(CONFIG)
    longest = "F" * (250 - len("queue://ActiveMQ.DLQ.Queue."))
    assert config.dlq_for(f"queue://{longest}") == f"queue://ActiveMQ.DLQ.Queue.{longest}"
    assert config.dlq_for(f"queue://{longest}x") == SHARED_DLQ
    assert config.dlq_for(f"topic://{LONG}") == SHARED_DLQ
    assert config.dlq_for("topic://t") == "queue://ActiveMQ.DLQ.Topic.t"
