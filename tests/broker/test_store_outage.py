"""The database goes away while consumers settle: nothing is stranded until a restart."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from mqstore.db import create_engine
from mqstore.store.postgres import PostgresStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until
from tests.conftest import Databases, count_rows, database_away


@pytest.fixture
def pg_broker(engine: Engine) -> Iterator[BrokerThread]:
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    broker = BrokerThread(store, FAST).start()
    yield broker
    broker.close()
    store.stop()


def test_a_message_whose_ack_failed_is_delivered_again_without_a_restart(
    pg_broker: BrokerThread, engine: Engine, databases: Databases
) -> None:
    prod, _ = connect(pg_broker.port)
    for i in range(3):
        prod.send("/queue/work", f"m{i}", headers={"persistent": "true"}, receipt=f"s{i}")
    prod.disconnect(receipt="bye")
    cons, col = connect(pg_broker.port)
    cons.subscribe("/queue/work", id="1", ack="client-individual", headers={
        "activemq.prefetchSize": "1"})  # fmt: skip
    first = col.wait_messages(1)[0]
    assert first.body == "m0"
    with database_away(engine, databases):
        cons.ack(first.headers["ack"], receipt="a0")
        assert col.wait(lambda: bool(col.errors)), "the failed ACK was receipted"
    told = col.errors[0].headers["message"]
    assert "store is unavailable" in told  # in words for a client: no server names
    assert str(engine.url.host) not in told and str(engine.url.database) not in told
    # The connection that saw the ERROR is gone; a new consumer on the same broker
    # gets m0 again (it is still stored), then the rest, without a broker restart.
    again, col2 = connect(pg_broker.port)
    again.subscribe("/queue/work", id="2", ack="client-individual")

    def acked_all() -> bool:
        for m in list(col2.messages):
            if m.headers.get("acked") != "yes":
                again.ack(m.headers["ack"])
                m.headers["acked"] = "yes"
        return len(col2.messages) >= 3

    assert wait_until(acked_all, timeout=15), [m.body for m in col2.messages]
    assert sorted(m.body for m in col2.messages) == ["m0", "m1", "m2"]
    again.disconnect(receipt="bye2")
    assert wait_until(lambda: pg_broker.store.count("queue://work") == 0)


def test_a_new_connection_sends_to_the_journal_while_the_database_is_away(
    engine: Engine, databases: Databases, tmp_path: Path
) -> None:
    from journal.store import JournaledStore

    store = JournaledStore(
        PostgresStore(engine, cleanup_interval_s=0), tmp_path / "journal", shared_lock=False
    )
    store.start()
    broker = BrokerThread(store, FAST).start()
    try:
        with database_away(engine, databases):
            prod, col = connect(broker.port)
            prod.send("/queue/later", "kept", headers={"persistent": "true"}, receipt="r")
            assert col.wait(lambda: "r" in col.receipts or bool(col.errors)), "no answer"
            assert col.receipts == ["r"], [e.headers.get("message") for e in col.errors]
            prod.disconnect()
        # The checkpoint applies it once the database is back
        observer = create_engine(databases.dsn_for(str(engine.url.database)))
        try:
            assert wait_until(lambda: count_rows(observer, "activemq_msgs") == 1, timeout=15)
        finally:
            observer.dispose()
        cons, got = connect(broker.port)
        cons.subscribe("/queue/later", id="1", ack="auto")
        assert [m.body for m in got.wait_messages(1)] == ["kept"]
        cons.disconnect()
    finally:
        broker.close()
        store.stop()


def test_an_outage_is_logged_once_not_every_sweep(
    pg_broker: BrokerThread, engine: Engine, databases: Databases, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mqstore.broker")
    with database_away(engine, databases):
        time.sleep(1.5)  # about seven expiry sweeps (every 0.2 s)
    assert wait_until(lambda: any("works again" in r.message for r in caplog.records))
    failed = [r for r in caplog.records if "sweep_expired failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is None
    assert "store unavailable" not in failed[0].getMessage()
