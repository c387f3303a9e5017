"""A connection the broker closes because the store refused one of its frames (its database
lost at COMMIT) gives back what it held marked ``redelivered:true`` but counted as no
redelivery: healthy messages do not reach the DLQ however often that happens."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.broker.harness import BrokerThread, connect, wait_until

P = {"persistent": "true"}
DLQ = "queue://ActiveMQ.DLQ"
BODIES = ["m0", "m1", "m2"]


def _end_session_at_commit(engine: Engine, event: str, condition: str = "TRUE") -> None:
    """Make the COMMIT of any transaction that does ``event`` (a trigger event such as
    ``DELETE ON activemq_msgs``) to a row meeting ``condition`` lose its session, so its
    outcome is unknown to the store (the database itself stays up)."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE FUNCTION end_session() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF {condition} THEN PERFORM pg_terminate_backend(pg_backend_pid()); "
                "END IF; RETURN NULL; END $$"
            )
        )
        conn.execute(
            sa.text(
                f"CREATE CONSTRAINT TRIGGER end_at_commit AFTER {event} DEFERRABLE "
                "INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_session()"
            )
        )


def _ack_refused(port: int, destination: str = "/queue/work", durable: str = "") -> None:
    """Subscribe to ``destination`` (as durable subscription ``durable`` of client c1, if
    named), receive all three, ACK m0 with a receipt and see the store refuse it (ERROR)."""
    cons, col = connect(port, client_id="c1" if durable else None)
    headers = {"activemq.subscriptionName": durable} if durable else {}
    cons.subscribe(destination, id="1", ack="client-individual", headers=headers)
    got = {m.body: m for m in col.wait_messages(3, timeout=15)}
    assert sorted(got) == BODIES
    cons.ack(got["m0"].headers["ack"], receipt="acked")
    assert col.wait(lambda: bool(col.errors), timeout=15)
    assert "store is unavailable" in col.errors[0].headers["message"]


def test_messages_of_a_connection_closed_by_a_store_refusal_stay_off_the_dlq(
    pg_broker_one_redelivery: BrokerThread, engine: Engine
) -> None:
    prod, _ = connect(pg_broker_one_redelivery.port)
    for n, body in enumerate(BODIES):
        prod.send("/queue/work", body, headers=P, receipt=f"s{n}")
    prod.disconnect(receipt="bye")
    with engine.connect() as conn:
        first_id = conn.execute(sa.text("SELECT min(id) FROM activemq_msgs")).scalar_one()
    _end_session_at_commit(engine, "DELETE ON activemq_msgs", f"OLD.id = {first_id}")

    # Twice (the maximum is 1 redelivery): the ACK of m0 is refused by the store, and the
    # broker closes the connection holding m1 and m2.
    for _ in range(2):
        _ack_refused(pg_broker_one_redelivery.port)

    with engine.begin() as conn:
        conn.execute(sa.text("DROP TRIGGER end_at_commit ON activemq_msgs"))
    cons, col = connect(pg_broker_one_redelivery.port)
    cons.subscribe("/queue/work", id="1", ack="client-individual")
    back = col.wait_messages(3, timeout=15)
    assert sorted(m.body for m in back) == BODIES
    assert {m.headers["redelivered"] for m in back} == {"true"}
    for n, m in enumerate(back):
        cons.ack(m.headers["ack"], receipt=f"a{n}")
    assert col.wait(lambda: {"a0", "a1", "a2"} <= set(col.receipts), timeout=15), col.errors
    store = pg_broker_one_redelivery.store
    assert wait_until(lambda: store.count("queue://work") == 0)
    assert store.count(DLQ) == 0
    cons.disconnect()


def test_a_durable_subscription_closed_by_store_refusals_keeps_its_messages_off_the_dlq(
    pg_broker_one_redelivery: BrokerThread, engine: Engine
) -> None:
    cons, col = connect(pg_broker_one_redelivery.port, client_id="c1")
    cons.subscribe("/topic/t", id="1", headers={"activemq.subscriptionName": "s"}, receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    cons.disconnect(receipt="gone")
    prod, _ = connect(pg_broker_one_redelivery.port)
    for n, body in enumerate(BODIES):
        prod.send("/topic/t", body, headers=P, receipt=f"s{n}")
    prod.disconnect(receipt="bye")
    _end_session_at_commit(engine, "UPDATE ON activemq_acks")  # every ACK of s
    for _ in range(2):  # the maximum is 1 redelivery
        _ack_refused(pg_broker_one_redelivery.port, "/topic/t", durable="s")

    with engine.begin() as conn:
        conn.execute(sa.text("DROP TRIGGER end_at_commit ON activemq_acks"))
    cons, col = connect(pg_broker_one_redelivery.port, client_id="c1")
    cons.subscribe(
        "/topic/t", id="1", ack="client-individual",
        headers={"activemq.subscriptionName": "s"},
    )  # fmt: skip
    back = col.wait_messages(3, timeout=15)
    assert sorted(m.body for m in back) == BODIES
    assert {m.headers["redelivered"] for m in back} == {"true"}
    for n, m in enumerate(back):
        cons.ack(m.headers["ack"], receipt=f"a{n}")
    assert col.wait(lambda: {"a0", "a1", "a2"} <= set(col.receipts), timeout=15), col.errors
    assert pg_broker_one_redelivery.store.count(DLQ) == 0
    cons.disconnect()
