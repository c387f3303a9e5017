"""Non-persistent messages to a queue: only memory holds them, so producers wait (ActiveMQ's
producer flow control) while a queue holds more than ``queue_high_water`` bytes of them,
waiting or unacknowledged, and go on, losing nothing, once consumers take them."""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from mqstore.app import broker_config
from mqstore.broker import BrokerConfig
from mqstore.broker.memory_store import MemoryStore
from mqstore.errors import ConfigError
from mqstore.settings import load_settings
from mqstore.store.port import Store
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until
from tests.broker.test_protocol import Raw
from tests.broker.test_topic_flow import StalledReader

SIZE = 64 * 1024
COUNT = 100  # 6.4 MiB: six times the high-water mark
CFG = dataclasses.replace(FAST, queue_high_water=1 << 20, queue_low_water=512 * 1024)


class StompProducer(threading.Thread):
    """A stomp.py producer of ``count`` messages (header ``n``), each with a receipt it does
    not wait for: sends pipeline until TCP pushes back."""

    def __init__(
        self, port: int, dest: str, count: int = COUNT, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.conn, self.col = connect(port)
        self.dest, self.count, self.headers = dest, count, headers or {}
        self.error: BaseException | None = None

    def run(self) -> None:
        body = "x" * SIZE
        try:
            for n in range(self.count):
                self.conn.send(self.dest, body, headers={"n": str(n), **self.headers},
                               receipt=f"r{n}")  # fmt: skip
        except BaseException as exc:  # reported by the test
            self.error = exc

    @property
    def receipts(self) -> list[str]:
        return list(self.col.receipts)

    def finish(self) -> None:
        """Every receipt came, in order."""
        assert self.col.wait(lambda: len(self.col.receipts) == self.count, 60)
        self.join(10)
        assert self.error is None
        assert self.receipts == [f"r{n}" for n in range(self.count)]
        self.conn.disconnect()


def _queue(bt: BrokerThread, name: str) -> dict[str, Any]:
    stats: dict[str, Any] = bt.snapshot()["destinations"][f"queue://{name}"]
    return stats


def _blocked(bt: BrokerThread, name: str) -> int:
    stats = bt.snapshot()["destinations"].get(f"queue://{name}")
    return int(stats["blocked_producers"]) if stats else 0


def _bound(bt: BrokerThread) -> int:
    """The most a queue may hold: the high-water mark plus the message that crossed it."""
    return bt.config.queue_high_water + SIZE + 4096


def _held_back(
    bt: BrokerThread,
    name: str,
    producer: StompProducer,
    settled: Callable[[dict[str, Any]], bool] = lambda stats: True,
) -> dict[str, Any]:
    """Wait until ``producer`` waits for room with a receipt for each SEND taken, and the
    queue's figures pass ``settled``; the figures then. (A consumer's connection may still
    take messages after the first wait, letting a few more SENDs in, and a snapshot may
    come between a SEND and its dispatch: a receipt the queue never took never matches.)"""
    seen: list[tuple[dict[str, Any], list[str]]] = []

    def waiting() -> bool:
        stats = bt.snapshot()["destinations"].get(f"queue://{name}")
        if stats is None:
            return False  # no SEND has made the queue yet
        seen[:] = [(stats, list(producer.receipts))]
        return (
            stats["blocked_producers"] == 1
            and len(seen[0][1]) == stats["enqueued"]
            and settled(stats)
        )

    assert wait_until(waiting, timeout=30), seen
    [(stats, receipts)] = seen
    assert stats["non_persistent_bytes"] <= _bound(bt)
    taken = stats["enqueued"]
    assert taken < producer.count
    # Its SENDs up to the mark were taken; the next one is not: no receipt (nothing is lost).
    assert receipts == [f"r{n}" for n in range(taken)]
    return stats


def _numbers(messages: list[Any]) -> list[int]:
    return [int(m.headers["n"]) for m in messages]


@pytest.fixture
def bt(memory_store: MemoryStore) -> Iterator[BrokerThread]:
    broker = BrokerThread(memory_store, CFG).start()
    yield broker
    broker.close()


def test_producer_to_a_queue_without_consumer_waits_then_every_message_arrives_in_order(
    any_store: Store,
) -> None:
    bt = BrokerThread(any_store, CFG).start()
    try:
        producer = StompProducer(bt.port, "/queue/idle")
        producer.start()
        stats = _held_back(bt, "idle", producer)
        assert stats["in_memory"] == stats["enqueued"] <= _bound(bt) // SIZE
        assert bt.broker is not None
        metrics = generate_latest(bt.broker.metrics.registry).decode()
        assert 'mqstore_queue_blocked_producers{destination="queue://idle"} 1.0' in metrics

        cons, col = connect(bt.port)
        cons.subscribe("/queue/idle", id="s", ack="auto")
        assert _numbers(col.wait_messages(COUNT, 60)) == list(range(COUNT))
        producer.finish()
        assert wait_until(lambda: _queue(bt, "idle")["non_persistent_bytes"] == 0)
        assert _queue(bt, "idle")["blocked_producers"] == 0
        cons.disconnect()
    finally:
        bt.close()


def test_a_full_queue_holds_back_only_its_own_non_persistent_producers(bt: BrokerThread) -> None:
    producer = StompProducer(bt.port, "/queue/full")
    producer.start()
    _held_back(bt, "full", producer)

    other, col = connect(bt.port)
    other.subscribe("/queue/other", id="o", ack="auto", receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    sender, scol = connect(bt.port)
    sender.send("/queue/other", "job", receipt="np")  # another queue: not held back
    sender.send("/queue/full", "kept", headers={"persistent": "true"}, receipt="p")
    assert scol.wait(lambda: {"np", "p"} <= set(scol.receipts))
    assert col.wait_messages(1)[0].body == "job"
    assert _blocked(bt, "full") == 1 and _queue(bt, "other")["blocked_producers"] == 0

    cons, ccol = connect(bt.port)
    cons.subscribe("/queue/full", id="f", ack="auto")
    got = ccol.wait_messages(COUNT + 1, 60)
    assert _numbers([m for m in got if m.body != "kept"]) == list(range(COUNT))
    producer.finish()
    for conn in (sender, other, cons):
        conn.disconnect()


def test_a_stalled_consumer_holds_back_producers_then_gets_every_message(
    bt: BrokerThread,
) -> None:
    reader = StalledReader(bt.port)
    reader.subscribe("/queue/stalled")
    count = 400  # 25 MiB: more than its connection's outbound bytes, socket buffers and queue
    producer = StompProducer(bt.port, "/queue/stalled", count)
    producer.start()
    _held_back(bt, "stalled", producer)
    assert reader.numbers(until=count - 1) == list(range(count))
    producer.finish()


@pytest.mark.parametrize("settle", ["ack", "nack"])
def test_unacknowledged_messages_hold_back_producers_until_settled(
    bt: BrokerThread, settle: str
) -> None:
    cons, col = connect(bt.port)
    cons.subscribe("/queue/later", id="s", ack="client-individual", receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    producer = StompProducer(bt.port, "/queue/later")
    producer.start()
    # Every message taken went out to the consumer, which holds it unacknowledged.
    stats = _held_back(bt, "later", producer, settled=lambda s: s["in_memory"] == 0)
    assert stats["in_flight"] == stats["enqueued"]

    settled = 0
    while settled < COUNT:  # ACK (or NACK: dropped, non-persistent) as messages come
        assert col.wait(lambda n=settled: len(col.messages) > n, 30)
        for m in list(col.messages)[settled:]:
            getattr(cons, settle)(m.headers["ack"])
            settled += 1
    assert _numbers(col.messages) == list(range(COUNT))
    producer.finish()
    assert wait_until(lambda: _queue(bt, "later")["non_persistent_bytes"] == 0)
    assert "queue://ActiveMQ.DLQ" not in bt.snapshot()["destinations"]  # dropped, not moved
    cons.disconnect()


def test_expired_messages_make_room_without_a_consumer(bt: BrokerThread) -> None:
    expires = str(int(time.time() * 1000) + 2000)
    producer = StompProducer(bt.port, "/queue/stale", headers={"expires": expires})
    producer.start()
    _held_back(bt, "stale", producer)
    producer.finish()  # the expiry sweep dropped what waited: the producer went on
    assert wait_until(lambda: _queue(bt, "stale")["non_persistent_bytes"] == 0)
    assert _queue(bt, "stale")["depth"] == 0


def test_transactions_commit_sends_when_there_is_room_and_free_it_at_commit(
    bt: BrokerThread,
) -> None:
    producer = StompProducer(bt.port, "/queue/tx")
    producer.start()
    _held_back(bt, "tx", producer)

    tx, tcol = connect(bt.port)
    tx.begin("t")
    for n in range(2):
        tx.send("/queue/tx", "in-tx", headers={"t": str(n)}, transaction="t", receipt=f"s{n}")
    assert tcol.wait(lambda: {"s0", "s1"} <= set(tcol.receipts))  # held until COMMIT
    tx.commit("t", receipt="commit")
    assert wait_until(lambda: _blocked(bt, "tx") == 2)  # the COMMIT waits for room
    assert "commit" not in tcol.receipts

    cons, col = connect(bt.port)
    cons.subscribe("/queue/tx", id="s", ack="client-individual")
    held = col.wait_messages(_queue(bt, "tx")["enqueued"])
    cons.begin("a")
    for m in held:
        cons.ack(m.headers["ack"], transaction="a", receipt=f"a{m.headers['n']}")
    assert col.wait(lambda: len(col.receipts) == len(held))
    # Acked in a transaction not yet committed: still held, so producers still wait.
    assert _blocked(bt, "tx") == 2
    cons.commit("a", receipt="acked")
    assert col.wait(lambda: "acked" in col.receipts)

    settled = len(held)
    while settled < COUNT + 2:
        assert col.wait(lambda n=settled: len(col.messages) > n, 30)
        for m in list(col.messages)[settled:]:
            cons.ack(m.headers["ack"])
            settled += 1
    assert tcol.wait(lambda: "commit" in tcol.receipts)
    plain = [m for m in col.messages if "t" not in m.headers]
    assert _numbers(plain) == list(range(COUNT))
    assert [m.headers["t"] for m in col.messages if "t" in m.headers] == ["0", "1"]
    producer.finish()
    for conn in (tx, cons):
        conn.disconnect()


@pytest.mark.parametrize("close", ["fin", "reset"])
def test_a_producer_that_goes_away_while_held_back_is_let_go(bt: BrokerThread, close: str) -> None:
    setup, scol = connect(bt.port)
    setup.send("/queue/jobs", "job", headers={"persistent": "true"}, receipt="job")
    assert scol.wait(lambda: "job" in scol.receipts)
    filler = StompProducer(bt.port, "/queue/gone")
    filler.start()
    _held_back(bt, "gone", filler)

    raw = Raw(bt.port)  # takes a job, then sends to the full queue and goes away
    assert raw.connect("heart-beat:0,0\nclient-id:app\n").startswith(b"CONNECTED")
    raw.send(b"SUBSCRIBE\ndestination:/queue/jobs\nid:j\nack:client\n\n\x00")
    assert raw.frame().startswith(b"MESSAGE")
    raw.send(b"SEND\ndestination:/queue/gone\nn:lost\nreceipt:x\n\nlost\x00")
    assert wait_until(lambda: _blocked(bt, "gone") == 2)
    connections = bt.snapshot()["connections"]
    if close == "reset":
        raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    raw.sock.close()

    assert wait_until(lambda: _blocked(bt, "gone") == 1)
    assert wait_until(lambda: bt.snapshot()["connections"] == connections - 1)
    again, acol = connect(bt.port, client_id="app")  # its client-id is free again
    again.subscribe("/queue/jobs", id="j", ack="auto")
    job = acol.wait_messages(1)[0]  # its unacknowledged job went back
    assert job.body == "job" and job.headers["redelivered"] == "true"

    cons, col = connect(bt.port)
    cons.subscribe("/queue/gone", id="s", ack="auto")
    assert _numbers(col.wait_messages(COUNT, 60)) == list(range(COUNT))  # not "lost"
    filler.finish()
    assert _queue(bt, "gone")["enqueued"] == COUNT
    for conn in (setup, again, cons):
        conn.disconnect()


def test_queue_high_water_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    default = broker_config(load_settings())
    assert (default.queue_high_water, default.queue_low_water) == (64 << 20, 32 << 20)
    monkeypatch.setenv("MQSTORE_QUEUE_HIGH_WATER_MB", "2")
    config = broker_config(load_settings())
    assert (config.queue_high_water, config.queue_low_water) == (2 << 20, 1 << 20)
    with pytest.raises(ConfigError, match="queue_low_water"):
        BrokerConfig(queue_high_water=1 << 20, queue_low_water=2 << 20)
