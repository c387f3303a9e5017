"""Consumed messages whose removal the store has not yet applied stay within a queue's
memory window: while the store is slow, paging waits for it instead of taking more of the
backlog into memory, and once it catches up the whole backlog comes through, in order."""

from __future__ import annotations

import dataclasses

import pytest

from mqstore.store import Store
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, HeldCommit, connect, wait_until

P = {"persistent": "true"}
WINDOW = 20
BACKLOG = 100


def test_an_auto_ack_consumer_gets_no_more_than_the_window_while_removals_wait(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    removals = HeldCommit(pg_store, monkeypatch, when=lambda batch: bool(batch.removes))
    bt = BrokerThread(pg_store, dataclasses.replace(FAST, memory_window=WINDOW)).start()
    try:
        prod, pcol = connect(bt.port)
        for i in range(BACKLOG):
            prod.send("/queue/slow", f"m{i}", headers=P, receipt=f"r{i}")
        assert pcol.wait(lambda: len(pcol.receipts) == BACKLOG), pcol.errors
        removals.armed = True
        cons, col = connect(bt.port)
        cons.subscribe("/queue/slow", id="s", ack="auto")
        assert removals.held.wait(10)

        def stats() -> dict[str, int]:
            st: dict[str, int] = bt.snapshot()["destinations"]["queue://slow"]
            return st

        # Either more than the window came through (the store was not waited for), or the
        # queue holds a window of consumed messages and waits for their removal.
        assert wait_until(
            lambda: len(col.messages) > WINDOW or stats().get("settling", 0) == WINDOW
        )
        assert len(col.messages) <= WINDOW
        assert stats()["in_memory"] + stats()["settling"] <= WINDOW
        removals.hold.set()
        assert col.bodies() == [f"m{i}" for i in range(len(col.messages))]
        col.wait_messages(BACKLOG, timeout=30)
        assert col.bodies() == [f"m{i}" for i in range(BACKLOG)]
        assert wait_until(lambda: stats()["depth"] == 0 and stats()["settling"] == 0)
        assert wait_until(lambda: bt.snapshot()["memory"]["used"] == 0)
        assert stats()["in_memory_bytes"] == 0
        cons.disconnect()
        prod.disconnect()
    finally:
        removals.hold.set()
        bt.close()
