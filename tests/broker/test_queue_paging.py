"""A queue's backlog beyond the memory window: paged in exactly once, in order, with its
store usage released when consumed, and no bookkeeping left behind."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from mqstore.store import Cursor, Store, StoredMessage
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, Collector, connect, wait_until

P = {"persistent": "true"}


def test_a_drained_backlog_releases_its_store_usage_and_bookkeeping(any_store: Store) -> None:
    bt = BrokerThread(any_store, dataclasses.replace(FAST, memory_window=10)).start()
    try:
        prod, pcol = connect(bt.port)
        for i in range(50):  # 40 of them wait in the store for a page
            prod.send("/queue/u", f"m{i}", headers=P, receipt=f"r{i}")
        assert pcol.wait(lambda: len(pcol.receipts) == 50)
        assert bt.snapshot()["store_usage"]["used"] > 0
        cons, col = connect(bt.port)
        cons.subscribe("/queue/u", id="s", ack="auto")
        assert [m.body for m in col.wait_messages(50)] == [f"m{i}" for i in range(50)]
        assert wait_until(lambda: bt.snapshot()["destinations"]["queue://u"]["depth"] == 0)
        assert wait_until(lambda: bt.snapshot()["store_usage"]["used"] == 0)
        queue = bt.broker.queues["queue://u"]
        assert wait_until(lambda: not queue.tracked and not queue.gone and not queue._paging)
        cons.disconnect()
        prod.disconnect()
    finally:
        bt.close()


def test_paged_messages_do_not_hold_producers_back_once_consumed(memory_store: Store) -> None:
    cfg = dataclasses.replace(
        FAST, memory_window=4, store_usage_limit=40_000, producer_block_timeout=2.0
    )
    bt = BrokerThread(memory_store, cfg).start()
    try:
        prod, pcol = connect(bt.port)
        cons, col = connect(bt.port)
        for rnd in range(5):  # each round: 15 sends (about 30 KB), all consumed
            for i in range(15):
                prod.send("/queue/b", "x" * 2000, headers=P, receipt=f"r{rnd}-{i}")
            sent = 15 * (rnd + 1)
            assert pcol.wait(lambda n=sent: len(pcol.receipts) == n, timeout=10), pcol.errors
            cons.subscribe("/queue/b", id=f"s{rnd}", ack="auto")
            col.wait_messages(15 * (rnd + 1))
            assert wait_until(lambda: memory_store.count("queue://b") == 0)
            cons.unsubscribe(f"s{rnd}")
        assert not pcol.errors
    finally:
        bt.close()


def _send(prod: Any, pcol: Collector, dest: str, bodies: list[str], priority: int) -> None:
    """Persistent sends at ``priority``, each with a receipt, all of them waited for."""
    before = len(pcol.receipts)
    for body in bodies:
        prod.send(dest, body, headers={**P, "priority": str(priority)}, receipt=f"{dest}-{body}")
    assert pcol.wait(lambda: len(pcol.receipts) == before + len(bodies))


def test_a_high_priority_message_beyond_a_full_window_is_delivered(
    prioritized_store: Store,
) -> None:
    bt = BrokerThread(prioritized_store, dataclasses.replace(FAST, memory_window=10)).start()
    try:
        prod, pcol = connect(bt.port)
        _send(prod, pcol, "/queue/w", [f"a{i}" for i in range(15)], priority=4)
        cons, col = connect(bt.port)
        cons.subscribe("/queue/w", id="s1", ack="auto")
        col.wait_messages(15)  # took a page: the queue has a cursor now
        assert wait_until(lambda: prioritized_store.count("queue://w") == 0)
        cons.unsubscribe("s1", receipt="u1")
        assert col.wait(lambda: "u1" in col.receipts)
        for i in range(10):  # fills the window
            prod.send("/queue/w", f"b{i}", headers={**P, "priority": "4"}, receipt=f"b{i}")
        prod.send("/queue/w", "urgent", headers={**P, "priority": "9"}, receipt="u")
        assert pcol.wait(lambda: len(pcol.receipts) == 26)
        cons.subscribe("/queue/w", id="s2", ack="auto")
        later = [m.body for m in col.wait_messages(26)][15:]
        assert sorted(later) == sorted(["urgent"] + [f"b{i}" for i in range(10)])
    finally:
        bt.close()


class _SlowPages:
    """Makes ``store.page`` return late while ``slow`` is set (a page read in flight)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.slow = False
        real = store.page

        def page(
            container: str, after: Cursor | None, limit: int, max_bytes: int | None = None
        ) -> list[StoredMessage]:
            rows = real(container, after, limit, max_bytes)
            if self.slow:
                time.sleep(0.8)
            return rows

        monkeypatch.setattr(store, "page", page)


def test_a_high_priority_message_stored_during_a_page_read_is_delivered(
    prioritized_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = _SlowPages(prioritized_store, monkeypatch)
    bt = BrokerThread(prioritized_store, dataclasses.replace(FAST, memory_window=10)).start()
    try:
        prod, pcol = connect(bt.port)
        _send(prod, pcol, "/queue/p", [f"low{i}" for i in range(15)], priority=3)
        pages.slow = True
        cons, col = connect(bt.port)
        cons.subscribe("/queue/p", id="s", ack="auto")
        col.wait_messages(10)  # the window; the next page is being read now
        time.sleep(0.2)
        prod.send("/queue/p", "urgent", headers={**P, "priority": "9"}, receipt="u")
        assert pcol.wait(lambda: "u" in pcol.receipts)
        pages.slow = False
        got: list[Any] = [m.body for m in col.wait_messages(16)]
        assert sorted(got) == sorted([f"low{i}" for i in range(15)] + ["urgent"])
    finally:
        bt.close()
