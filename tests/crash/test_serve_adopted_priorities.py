"""``mqstore serve`` (journaled or not, without prioritizedMessages) on topic rows ActiveMQ stored
with prioritizedMessages: a durable subscriber gets them in ID order whatever their
PRIORITY, and after a SIGKILL following its first acknowledgement the others come again,
none lost to the acknowledgement or to the topic cleanup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from mqstore.db import create_engine
from mqstore.openwire import encode, text_message
from tests.broker.harness import Collector, connect
from tests.interop.conftest import MqstoreServer

TOPIC = "topic://adopted"
PRODUCER = "ID:amq-1-1700000000000-1:1:1"
#: PRIORITY column of IDs 1, 2, 3 (the JMS priority ActiveMQ wrote there).
PRIORITIES = [0, 5, 0]


def _adopted(dsn: str) -> None:
    """The rows ActiveMQ with prioritizedMessages leaves: three messages and a durable
    subscription (one ACKS row, PRIORITY 0) that acknowledged none of them."""
    engine = create_engine(dsn)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, "
                    "expiration, priority, msg) VALUES (:id, :c, :prod, :id, 0, :p, :msg)"
                ),
                [
                    {
                        "id": i,
                        "c": TOPIC,
                        "prod": PRODUCER,
                        "p": p,
                        "msg": encode(
                            text_message(
                                f"m{i}",
                                destination=TOPIC,
                                producer_id=PRODUCER,
                                sequence=i,
                                priority=p,
                            )
                        ),
                    }
                    for i, p in enumerate(PRIORITIES, 1)
                ],
            )
            conn.execute(
                sa.text(
                    "INSERT INTO activemq_acks (container, sub_dest, client_id, sub_name, "
                    "last_acked_id, priority) VALUES (:c, :c, 'cid', 'sub', 0, 0)"
                ),
                {"c": TOPIC},
            )
    finally:
        engine.dispose()


def _subscriber(port: int) -> tuple[Any, Collector]:
    conn, col = connect(port, client_id="cid")
    conn.subscribe(
        "/topic/adopted",
        id="d",
        ack="client-individual",
        headers={"activemq.subscriptionName": "sub"},
    )
    return conn, col


def _server(dsn: str, base: Path, journal: bool) -> MqstoreServer:
    server = MqstoreServer(dsn, base, name="adopted", journal=journal, lock="none")
    server.env["MQSTORE_CLEANUP_INTERVAL_S"] = "1"  # the topic cleanup runs meanwhile
    return server.start()


@pytest.mark.parametrize("journal", [True, False], ids=["journaled", "database"])
def test_durable_subscriber_gets_adopted_priority_rows_in_id_order_across_a_sigkill(
    dsn: str, tmp_path: Path, journal: bool
) -> None:
    _adopted(dsn)
    server = _server(dsn, tmp_path / "data", journal)
    try:
        conn, col = _subscriber(server.port)
        first = col.wait_messages(3)
        assert [m.body for m in first] == ["m1", "m2", "m3"]
        conn.ack(first[0].headers["ack"], receipt="a1")
        assert col.wait(lambda: "a1" in col.receipts)
        server.kill()
        server = _server(dsn, tmp_path / "data", journal)
        _, col = _subscriber(server.port)
        again = col.wait_messages(2)
        assert [m.body for m in again] == ["m2", "m3"]
        assert not col.wait(lambda: len(col.messages) > 2, 2), col.bodies()
    finally:
        server.kill()
