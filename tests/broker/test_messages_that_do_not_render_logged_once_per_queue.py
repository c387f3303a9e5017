"""Many stored messages whose MSG does not render (a malformed body) on one queue do not
flood the log: the first is logged with what is wrong with it, the others are counted in
one line per queue at most every MALFORMED_LOG_INTERVAL; every one of them still goes to
the DLQ (or, on its DLQ, stays stored) as before."""

from __future__ import annotations

import logging
import re

import pytest

from mqstore.broker import BrokerConfig, unrenderable_log
from mqstore.openwire import MessageId, ProducerId, decode, encode
from mqstore.store.model import NewMessage, SubscriptionKey
from mqstore.store.postgres import PostgresStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until
from tests.unit.openwire import activemq_quirks_data as amq

PRODUCER = ProducerId("ID:amq-1-1700000000000-1:1", 1, 1)
DLQ = BrokerConfig().dlq_for("queue://Q")
DLQ_T = BrokerConfig().dlq_for("topic://T")
MALFORMED = 20
LOGGER = unrenderable_log.__name__


def _store_malformed(pg_store: PostgresStore, container: str) -> None:
    """``MALFORMED`` texts whose content claims to be compressed but is no zlib stream."""
    pg_store.add(
        [
            NewMessage(
                container,
                str(PRODUCER),
                seq,
                encode(
                    decode(amq.STOMP_EMOJI, lazy=True).replace(
                        message_id=MessageId(None, PRODUCER, seq, seq),
                        compressed=True,
                        content=b"not zlib",
                    )
                ),
            )
            for seq in range(1, MALFORMED + 1)
        ]
    )


def _counted(lines: list[str], container: str) -> int:
    pattern = re.compile(rf"^{re.escape(container)}: (\d+) more message\(s\) that do not render")
    return sum(int(m.group(1)) for line in lines if (m := pattern.match(line)))


@pytest.mark.parametrize("where", ["queue", "its DLQ"])
def test_a_queue_logs_its_first_message_that_does_not_render_and_counts_the_others(
    pg_store: PostgresStore,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    monkeypatch.setattr(unrenderable_log, "MALFORMED_LOG_INTERVAL", 0.3)
    caplog.set_level(logging.ERROR, logger=LOGGER)
    container = "queue://Q" if where == "queue" else DLQ
    _store_malformed(pg_store, container)
    broker = BrokerThread(pg_store, FAST).start()
    try:
        c, _ = connect(broker.port)
        c.subscribe("/queue/" + container.removeprefix("queue://"), id="s", ack="client")

        def lines() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.name == LOGGER]

        assert wait_until(lambda: _counted(lines(), container) == MALFORMED - 1), lines()
        if where == "queue":
            assert wait_until(lambda: pg_store.count(DLQ) == MALFORMED)
            assert pg_store.count("queue://Q") == 0
        else:
            assert pg_store.count(DLQ) == MALFORMED  # left stored, undelivered
        c.disconnect()
    finally:
        broker.close()
    logged = lines()
    detailed = [line for line in logged if "malformed body" in line and "more message" not in line]
    assert len(detailed) == 1, logged
    fate = "moved to the DLQ" if where == "queue" else "left in the store, not delivered"
    assert detailed[0].startswith(f"{container}: message ") and fate in detailed[0]
    assert len(logged) <= 4, logged  # the first, and a line counting the others now and then


def test_a_durable_subscription_logs_its_first_message_that_does_not_render_and_counts_the_others(
    pg_store: PostgresStore,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(unrenderable_log, "MALFORMED_LOG_INTERVAL", 0.3)
    caplog.set_level(logging.ERROR, logger=LOGGER)
    key = SubscriptionKey("topic://T", "cid-1", "sub1")
    pg_store.add_subscription(key)
    _store_malformed(pg_store, "topic://T")
    label = f"durable subscription {key}"
    broker = BrokerThread(pg_store, FAST).start()
    try:
        c, _ = connect(broker.port, client_id="cid-1")
        c.subscribe("/topic/T", id="d", ack="auto", headers={"activemq.subscriptionName": "sub1"})

        def lines() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.name == LOGGER]

        assert wait_until(lambda: _counted(lines(), label) == MALFORMED - 1), lines()
        assert wait_until(lambda: pg_store.count(DLQ_T) == MALFORMED)
        c.disconnect()
    finally:
        broker.close()
    logged = lines()
    detailed = [line for line in logged if "malformed body" in line and "more message" not in line]
    assert len(detailed) == 1 and detailed[0].startswith(f"{label}: "), logged
    assert len(logged) <= 4, logged
