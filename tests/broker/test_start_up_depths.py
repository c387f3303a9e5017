"""What a broker knows of its destinations right after it starts: every queue's depth and
every durable subscription's backlog as the store counts them, read in a fixed number of
statements however many destinations there are."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.store.model import Batch, NewMessage, Xid
from mqstore.store.port import Store
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect

P = {"persistent": "true"}


@pytest.fixture(params=["postgres", "prioritized", "journaled"])
def db_store(request: pytest.FixtureRequest, engine: Engine, tmp_path: Path) -> Iterator[Store]:
    """A PostgresStore (plain or prioritized) or the journaled store over one."""
    from mqstore.store.postgres import PostgresStore

    store: Store = PostgresStore(
        engine, cleanup_interval_s=0, prioritized=request.param == "prioritized"
    )
    if request.param == "journaled":
        from journal.store import JournaledStore

        store = JournaledStore(store, tmp_path / "journal", shared_lock=False)
    store.start()
    yield store
    store.stop()


def _send(port: int, dest: str, count: int) -> None:
    conn, col = connect(port)
    for i in range(count):
        conn.send(dest, f"m{i}", headers=P, receipt=f"r{i}")
    assert col.wait(lambda: len(col.receipts) == count)
    conn.disconnect()


def _depths(bt: BrokerThread) -> dict[str, int]:
    dests = bt.snapshot()["destinations"].items()
    return {name: d["depth"] for name, d in dests if name.startswith("queue://")}


def test_queue_depths_and_durable_backlogs_are_right_after_restart(db_store: Store) -> None:
    bt = BrokerThread(db_store, FAST).start()
    try:
        sub, col = connect(bt.port, client_id="cid")
        sub.subscribe(
            "/topic/news", id="d", ack="client-individual",
            headers={"activemq.subscriptionName": "s"}, receipt="sub",
        )  # fmt: skip
        assert col.wait(lambda: "sub" in col.receipts)
        sub.disconnect()
        _send(bt.port, "/queue/a", 3)
        _send(bt.port, "/queue/b", 2)
        _send(bt.port, "/topic/news", 4)
        consumer, got = connect(bt.port)
        consumer.subscribe("/queue/b", id="1", ack="client-individual")
        first = got.wait_messages(1)[0]
        consumer.ack(first.headers["ack"], receipt="ack")
        assert got.wait(lambda: "ack" in got.receipts)
        consumer.disconnect()
        # an XA-prepared add is no message of the queue yet
        xid = Xid(1, b"gtrid", b"bqual")
        db_store.xa_prepare(xid, Batch(adds=[NewMessage("queue://a", "ID:xa-prod-1", 1, b"x")]))

        bt.restart()  # the journaled store's window is not checkpointed: it counts too

        depths = _depths(bt)
        assert depths["queue://a"] == 3 == db_store.count("queue://a")
        assert depths["queue://b"] == 1 == db_store.count("queue://b")
        durables = bt.snapshot()["durable_subscriptions"]
        assert [(d["subscription"], d["backlog"]) for d in durables] == [("s", 4)]
        db_store.xa_rollback(xid)
    finally:
        bt.close()


def test_start_up_counts_depths_in_statements_that_do_not_grow_with_the_queues(
    db_store: Store, engine: Engine
) -> None:
    bt = BrokerThread(db_store, FAST).start()
    try:
        conn, col = connect(bt.port)
        for i in range(40):
            conn.send(f"/queue/many.{i}", "x", headers=P, receipt=f"r{i}")
        assert col.wait(lambda: len(col.receipts) == 40)
        conn.disconnect()
        bt.stop()
        counts: list[str] = []

        def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
            if "count(" in statement.lower():
                counts.append(statement)

        sa.event.listen(engine, "before_cursor_execute", seen)
        try:
            bt.start()
        finally:
            sa.event.remove(engine, "before_cursor_execute", seen)
        assert len(counts) <= 2, counts
        depths = _depths(bt)
        assert all(depths[f"queue://many.{i}"] == 1 for i in range(40))
    finally:
        bt.close()
