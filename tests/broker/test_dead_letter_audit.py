"""Dead letters: one DLQ copy per message however many subscribers NACK it, NACK names one
message in every ack mode, and the expiry sweep never moves a message twice."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from mqstore.broker.memory_store import MemoryStore
from mqstore.store.model import EXPIRE_MAX_BYTES, Batch, Outcome, StoredMessage
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, Collector, connect, wait_until

P = {"persistent": "true"}
DLQ = "queue://ActiveMQ.DLQ"


def _subscriber(bt: BrokerThread, dest: str, client_id: str | None = None) -> tuple[Any, Collector]:
    conn, col = connect(bt.port, client_id=client_id)
    headers = {"activemq.subscriptionName": "s"} if client_id else {}
    conn.subscribe(dest, id="1", ack="client-individual", headers=headers, receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    return conn, col


def _publish(bt: BrokerThread, dest: str, body: str) -> None:
    prod, col = connect(bt.port)
    prod.send(dest, body, headers=P, receipt="sent")
    assert col.wait(lambda: "sent" in col.receipts)
    prod.disconnect()


def _nack(conn: Any, col: Collector, receipt: str) -> None:
    msg = col.wait_messages(1)[-1]
    conn.nack(msg.headers["ack"], receipt=receipt)


def _dlq_bodies(bt: BrokerThread) -> list[str]:
    """What the DLQ holds (read, and so consumed, by an auto-ack consumer)."""
    count = bt.store.count(DLQ)
    conn, col = connect(bt.port)
    conn.subscribe("/queue/ActiveMQ.DLQ", id="dlq", ack="auto", receipt="dlq")
    assert col.wait(lambda: "dlq" in col.receipts)
    col.wait_messages(count)
    conn.disconnect()
    return col.bodies()


@pytest.mark.parametrize("together", [False, True], ids=["one-after-the-other", "at-once"])
def test_subscribers_of_a_topic_nacking_one_message_stay_connected(
    broker: BrokerThread, together: bool
) -> None:
    subs = [_subscriber(broker, "/topic/t") for _ in range(3)]
    _publish(broker, "/topic/t", "bad")
    for i, (conn, col) in enumerate(subs):
        _nack(conn, col, f"n{i}")
        if not together:
            assert col.wait(lambda c=col, r=f"n{i}": r in c.receipts)  # type: ignore[misc]
    for i, (conn, col) in enumerate(subs):
        assert col.wait(lambda c=col, r=f"n{i}": r in c.receipts)  # type: ignore[misc]
        assert not col.errors
        assert conn.is_connected()
    assert _dlq_bodies(broker) == ["bad"]
    for conn, _ in subs:
        conn.disconnect()


def test_a_copy_already_consumed_from_the_dlq_is_not_added_again(broker: BrokerThread) -> None:
    """ActiveMQ's DLQ audit remembers the copies it added, not only those still stored."""
    subs = [_subscriber(broker, "/topic/t") for _ in range(2)]
    _publish(broker, "/topic/t", "bad")
    first, first_col = subs[0]
    _nack(first, first_col, "n0")
    assert first_col.wait(lambda: "n0" in first_col.receipts)
    assert _dlq_bodies(broker) == ["bad"]  # read, so the DLQ holds nothing now
    second, second_col = subs[1]
    _nack(second, second_col, "n1")
    assert second_col.wait(lambda: "n1" in second_col.receipts)
    _publish(broker, "/topic/t", "next")  # after the NACK's work, in the broker's order
    for conn, col in subs:
        assert col.wait_messages(2)[-1].body == "next"
        conn.disconnect()
    assert broker.store.count(DLQ) == 0


@pytest.mark.parametrize("restart_between", [False, True])
def test_durable_subscribers_nacking_one_message_never_get_it_again(
    broker: BrokerThread, restart_between: bool
) -> None:
    c1, col1 = _subscriber(broker, "/topic/orders", "c1")
    c2, col2 = _subscriber(broker, "/topic/orders", "c2")
    _publish(broker, "/topic/orders", "poison")
    _nack(c1, col1, "n1")
    assert col1.wait(lambda: "n1" in col1.receipts)
    col2.wait_messages(1)
    if restart_between:  # the DLQ copy is stored; the broker remembers nothing of it
        c2.disconnect()
        broker.restart()
        c2, col2 = _subscriber(broker, "/topic/orders", "c2")
    _nack(c2, col2, "n2")
    assert col2.wait(lambda: "n2" in col2.receipts)
    assert not col1.errors and not col2.errors
    c1.disconnect()
    c2.disconnect()

    broker.restart()
    again = [_subscriber(broker, "/topic/orders", cid) for cid in ("c1", "c2")]
    _publish(broker, "/topic/orders", "next")
    for conn, col in again:
        assert col.wait_messages(1)[0].body == "next"  # the poison message is acknowledged
        conn.disconnect()
    assert _dlq_bodies(broker) == ["poison"]


def test_nack_in_client_mode_dead_letters_only_that_message(broker: BrokerThread) -> None:
    prod, pcol = connect(broker.port)
    for i in range(5):
        prod.send("/queue/work", f"m{i}", headers=P, receipt=f"r{i}")
    assert pcol.wait(lambda: len(pcol.receipts) == 5)
    prod.disconnect()
    cons, col = connect(broker.port)
    cons.subscribe("/queue/work", id="s", ack="client")
    msgs = col.wait_messages(5)
    cons.nack(msgs[2].headers["ack"], receipt="nack")
    assert col.wait(lambda: "nack" in col.receipts)
    assert broker.store.count(DLQ) == 1
    cons.ack(msgs[4].headers["ack"], receipt="ack")  # cumulative: m0, m1, m3, m4
    assert col.wait(lambda: "ack" in col.receipts)
    assert broker.store.count("queue://work") == 0
    cons.disconnect()
    assert _dlq_bodies(broker) == ["m2"]


class _RacingExpiryStore(MemoryStore):
    """The expiry sweep's read and a DLQ move race: the move commits right after the read,
    and its completion runs on the broker's loop before the read's result is used."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.read = threading.Event()
        self.moved = threading.Event()

    def commit(self, batch: Batch) -> list[int]:
        expiring = any(r.outcome is Outcome.EXPIRED for r in batch.removes)
        if expiring and not self.moved.is_set():
            self.read.wait(10)
        ids = super().commit(batch)
        if expiring:
            self.moved.set()
        return ids

    def expire(
        self,
        now_ms: int,
        limit: int,
        *,
        remove: bool = True,
        max_bytes: int | None = EXPIRE_MAX_BYTES,
    ) -> list[StoredMessage]:
        rows = super().expire(now_ms, limit, remove=remove, max_bytes=max_bytes)
        if rows and not self.read.is_set() and self.loop is not None:
            self.read.set()
            self.moved.wait(10)

            async def turn() -> None:
                """Runs after the completions the writer handed to the loop before it."""

            asyncio.run_coroutine_threadsafe(turn(), self.loop).result(10)
        return rows


def test_expiry_sweep_moves_a_message_once_when_its_move_completes_during_the_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _RacingExpiryStore()
    store.start()
    bt = BrokerThread(store, FAST)
    store.loop = bt.loop
    bt.start()
    try:
        with caplog.at_level(logging.INFO, logger="mqstore.broker"):
            prod, col = connect(bt.port)
            expires = str(int(time.time() * 1000) + 300)
            prod.send("/queue/e", "E1", headers={**P, "expires": expires}, receipt="r")
            assert col.wait(lambda: "r" in col.receipts)
            prod.disconnect()
            assert wait_until(lambda: store.moved.is_set() and store.read.is_set())
            sweeps = store.calls.get("expire", 0)
            assert wait_until(lambda: store.calls.get("expire", 0) >= sweeps + 2)
        queue = bt.snapshot()["destinations"]["queue://e"]
        assert queue["depth"] == 0 and queue["dequeued"] == 1
        assert store.count("queue://e") == 0 and store.count(DLQ) == 1
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert "not adding duplicate" not in caplog.text  # the sweep did not even try
    finally:
        bt.close()
        store.stop()
