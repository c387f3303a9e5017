"""Deliveries a consumer has not acknowledged stay in memory, so they count against the
queue's memory window until acknowledged or returned: a consumer with a huge prefetch that
never acknowledges, or one that acknowledges in a transaction it never commits, is sent no
more than the window holds; messages returned by a consumer that leaves are trimmed back to
the window (the store keeps the rest); a prefetch is lowered to ``max_prefetch``. Nothing is
lost or reordered: everything comes through once acknowledged."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqstore.broker.subscriptions import MESSAGE_OVERHEAD
from mqstore.store import Store
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, Collector, connect, wait_until

P = {"persistent": "true"}
SIZE = 64 * 1024
WINDOW_BYTES = 256 * 1024
COUNT = 40
#: What the window holds: its bytes, and one more message (the last one taken may pass them).
MOST = WINDOW_BYTES // (SIZE + MESSAGE_OVERHEAD) + 1
HUGE = {"activemq.prefetchSize": "100000000"}


@pytest.fixture(params=["postgres", "journaled"])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    from mqstore.store.postgres import PostgresStore

    store: Store = PostgresStore(request.getfixturevalue("engine"), cleanup_interval_s=0)
    if request.param == "journaled":
        from journal.store import JournaledStore

        store = JournaledStore(store, tmp_path / "journal", shared_lock=False)
    store.start()
    yield store
    store.stop()


def _bodies(n: int) -> list[str]:
    return [f"{i:04d}" + "x" * (SIZE - 4) for i in range(n)]


def _send(bt: BrokerThread, dest: str, bodies: list[str]) -> None:
    prod, pcol = connect(bt.port)
    for i, body in enumerate(bodies):
        prod.send(dest, body, headers=P, receipt=f"r{i}")
    assert pcol.wait(lambda: len(pcol.receipts) == len(bodies), timeout=30), pcol.errors
    prod.disconnect()


def _queue(bt: BrokerThread, name: str) -> dict[str, int]:
    st: dict[str, int] = bt.snapshot()["destinations"][f"queue://{name}"]
    return st


def _settled_at(bt: BrokerThread, name: str, col: Collector, most: int) -> None:
    """Wait until the consumer got more than ``most`` messages, or the queue holds nothing
    waiting but its deliveries in flight (all the consumer got), counted in memory."""

    def held() -> bool:
        st = _queue(bt, name)
        return (
            st["in_memory"] == 0
            and st["in_memory_bytes"] > 0
            and st["in_flight"] == len(col.messages)
        )

    assert wait_until(lambda: len(col.messages) > most or held(), timeout=20)


def test_a_huge_prefetch_that_never_acks_gets_no_more_than_the_window(stored: Store) -> None:
    bt = BrokerThread(stored, dataclasses.replace(FAST, memory_window_bytes=WINDOW_BYTES))
    bt.start()
    try:
        bodies = _bodies(COUNT)
        _send(bt, "/queue/big", bodies)
        cons, col = connect(bt.port)
        cons.subscribe("/queue/big", id="s", ack="client-individual", headers=HUGE)
        _settled_at(bt, "big", col, MOST)
        assert 0 < len(col.messages) <= MOST
        assert _queue(bt, "big")["in_memory_bytes"] <= WINDOW_BYTES + SIZE + MESSAGE_OVERHEAD
        acked = 0
        while acked < COUNT:  # acknowledging makes room for the rest
            col.wait_messages(acked + 1, timeout=20)
            for m in list(col.messages)[acked:]:
                cons.ack(m.headers["ack"])
                acked += 1
        assert col.bodies() == bodies
        assert wait_until(lambda: _queue(bt, "big")["depth"] == 0)
        assert wait_until(lambda: bt.snapshot()["memory"]["used"] == 0)
        cons.disconnect()
    finally:
        bt.close()


def test_acks_in_a_transaction_never_committed_get_no_more_than_the_window(
    stored: Store,
) -> None:
    bt = BrokerThread(stored, dataclasses.replace(FAST, memory_window_bytes=WINDOW_BYTES))
    bt.start()
    try:
        bodies = _bodies(COUNT)
        _send(bt, "/queue/tx", bodies)
        mode: dict[str, Any] = {"tx": "t1"}
        conn: list[Any] = []

        def ack(frame: Any) -> None:
            conn[0].ack(frame.headers["ack"], transaction=mode["tx"])

        col = Collector(on_message=ack)
        cons, _ = connect(bt.port, listener=col)
        conn.append(cons)
        cons.begin("t1")
        cons.subscribe(
            "/queue/tx", id="s", ack="client-individual", headers={"activemq.prefetchSize": "2"}
        )
        _settled_at(bt, "tx", col, MOST)
        assert 0 < len(col.messages) <= MOST
        mode["tx"] = None  # the rest acknowledged one by one, once the transaction commits
        cons.commit("t1")
        col.wait_messages(COUNT, timeout=30)
        assert col.bodies() == bodies
        assert wait_until(lambda: _queue(bt, "tx")["depth"] == 0)
        assert wait_until(lambda: bt.snapshot()["memory"]["used"] == 0)
        cons.disconnect()
    finally:
        bt.close()


def test_messages_returned_by_a_consumer_that_leaves_are_trimmed_to_the_window(
    stored: Store,
) -> None:
    window = 20
    bt = BrokerThread(stored, dataclasses.replace(FAST, memory_window=window)).start()
    try:
        bodies = [f"m{i:03d}" for i in range(100)]
        prod, pcol = connect(bt.port)
        for i, body in enumerate(bodies):
            prod.send("/queue/back", body, headers=P, receipt=f"r{i}")
        assert pcol.wait(lambda: len(pcol.receipts) == len(bodies), timeout=30), pcol.errors
        prod.disconnect()
        first, fcol = connect(bt.port)
        first.subscribe(
            "/queue/back", id="s", ack="client-individual", headers={"activemq.prefetchSize": "15"}
        )
        fcol.wait_messages(15)
        # the queue paged in more behind the 15 in flight
        assert wait_until(lambda: _queue(bt, "back")["in_memory"] > window - 15)
        first.disconnect()
        assert wait_until(lambda: _queue(bt, "back")["in_flight"] == 0)
        assert wait_until(lambda: _queue(bt, "back")["consumers"] == 0)
        assert _queue(bt, "back")["in_memory"] <= window
        second, scol = connect(bt.port)
        second.subscribe("/queue/back", id="s", ack="auto")
        scol.wait_messages(len(bodies), timeout=30)
        assert scol.bodies() == bodies
        assert [m.headers["redelivered"] for m in scol.messages] == ["true"] * 15 + ["false"] * 85
        assert wait_until(lambda: _queue(bt, "back")["depth"] == 0)
        assert wait_until(lambda: bt.snapshot()["memory"]["used"] == 0)
        second.disconnect()
    finally:
        bt.close()


def test_a_prefetch_beyond_max_prefetch_is_lowered_to_it(stored: Store) -> None:
    bt = BrokerThread(stored, dataclasses.replace(FAST, max_prefetch=5)).start()
    try:
        bodies = [f"m{i}" for i in range(20)]
        prod, pcol = connect(bt.port)
        for i, body in enumerate(bodies):
            prod.send("/queue/cap", body, headers=P, receipt=f"r{i}")
        assert pcol.wait(lambda: len(pcol.receipts) == len(bodies), timeout=30), pcol.errors
        prod.disconnect()
        cons, col = connect(bt.port)
        cons.subscribe("/queue/cap", id="s", ack="client", headers=HUGE)
        col.wait_messages(5)
        assert wait_until(lambda: _queue(bt, "cap")["in_flight"] == 5)
        assert len(col.messages) == 5
        cons.ack(col.messages[-1].headers["ack"])  # cumulative: frees room for 5 more
        col.wait_messages(10)
        assert wait_until(lambda: _queue(bt, "cap")["in_flight"] == 5)
        assert len(col.messages) == 10
        assert col.bodies() == bodies[:10]
        cons.disconnect()
    finally:
        bt.close()
