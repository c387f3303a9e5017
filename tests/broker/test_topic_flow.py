"""Slow and fast non-durable topic subscribers: producer flow control on bytes, the opt-in
drop-oldest mode, and a connection's outbound frames bounded by bytes."""

from __future__ import annotations

import dataclasses
import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from mqstore.broker.memory_store import MemoryStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until
from tests.broker.test_protocol import Raw

BIG = 512 * 1024

#: An auto-ack subscriber that reads its socket as fast as it can, in its own process.
SUBSCRIBER = r"""
import socket, sys
port, expected = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\x00"
          b"SUBSCRIBE\ndestination:/topic/burst\nid:1\nack:auto\nreceipt:s\n\n\x00")
frames, ready = -2, False  # CONNECTED and RECEIPT come first
s.settimeout(15)  # idle this long: no more is coming (a guard, not a measurement)
try:
    while frames < expected:
        data = s.recv(1 << 20)
        if not data:
            break
        frames += data.count(b"\x00")
        if not ready and frames >= 0:
            ready = True
            print("ready", flush=True)
except TimeoutError:
    pass
print(frames, flush=True)
"""


class StalledReader(Raw):
    """A subscriber that stops reading; its receive buffer is sized before it connects, so
    the TCP window opens again as soon as it reads."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        self.buf = b""

    def subscribe(self, dest: str) -> None:
        assert self.connect("heart-beat:0,0\n").startswith(b"CONNECTED")
        self.send(f"SUBSCRIBE\ndestination:{dest}\nid:1\nack:auto\nreceipt:s\n\n\x00".encode())
        assert self.frame().startswith(b"RECEIPT")

    def subscribe_durable(self, dest: str, client_id: str, name: str) -> None:
        """Connect as ``client_id`` and subscribe durably to topic ``dest`` as ``name``."""
        head = f"heart-beat:0,0\nclient-id:{client_id}\n"
        assert self.connect(head).startswith(b"CONNECTED")
        self.send(
            f"SUBSCRIBE\ndestination:{dest}\nid:1\nack:auto\n"
            f"activemq.subscriptionName:{name}\nreceipt:s\n\n\x00".encode()
        )
        assert self.frame().startswith(b"RECEIPT")

    def numbers(self, until: int) -> list[int]:
        """Read MESSAGE frames up to the one with header ``n:until``; their ``n`` headers."""
        seen: list[int] = []
        while not seen or seen[-1] != until:
            frame = self.frame(30)
            assert frame.startswith(b"MESSAGE"), frame[:200]
            head = frame.split(b"\n\n", 1)[0].decode()
            seen.append(int(dict(h.split(":", 1) for h in head.split("\n")[1:])["n"]))
        return seen


class Producer(threading.Thread):
    """Pipelines SENDs (no receipts) on a raw socket, then DISCONNECTs with a receipt."""

    def __init__(self, port: int, dest: str, count: int, size: int) -> None:
        super().__init__(daemon=True)
        self.raw = Raw(port)
        assert self.raw.connect("heart-beat:0,0\n").startswith(b"CONNECTED")
        self.dest, self.count, self.size = dest, count, size
        self.receipt: bytes | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        body = b"x" * self.size
        frames = (
            f"SEND\ndestination:{self.dest}\nn:{n}\ncontent-length:{self.size}\n\n".encode()
            + body
            + b"\x00"
            for n in range(self.count)
        )
        try:
            self.raw.sock.settimeout(None)
            self.raw.send(b"".join(frames) + b"DISCONNECT\nreceipt:bye\n\n\x00")
            self.receipt = self.raw.frame(60)
        except BaseException as exc:  # reported by the test
            self.error = exc


def _topic(bt: BrokerThread, name: str) -> dict[str, Any]:
    stats: dict[str, Any] = bt.snapshot()["destinations"][f"topic://{name}"]
    return stats


def _held_bound(bt: BrokerThread, size: int) -> int:
    """The most a subscriber may hold: the high-water mark, plus the message that crossed it."""
    return bt.config.topic_high_water + size + 4096


@pytest.fixture
def bt(memory_store: MemoryStore) -> Iterator[BrokerThread]:
    broker = BrokerThread(memory_store, FAST).start()
    yield broker
    broker.close()


def test_auto_ack_topic_deliveries_count_as_dequeued(bt: BrokerThread) -> None:
    cons, col = connect(bt.port)
    cons.subscribe("/topic/auto", id="s", ack="auto", receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    prod, pcol = connect(bt.port)
    for i in range(10):
        prod.send("/topic/auto", f"m{i}", receipt=f"r{i}")
    assert pcol.wait(lambda: len(pcol.receipts) == 10)
    col.wait_messages(10)
    assert wait_until(lambda: _topic(bt, "auto")["dequeued"] == 10)
    assert _topic(bt, "auto")["enqueued"] == 10
    prod.disconnect()
    cons.disconnect()


def test_fast_subscriber_in_another_process_gets_every_message_of_a_burst(
    bt: BrokerThread,
) -> None:
    producers, per = 4, 10_000
    sub = subprocess.Popen(
        [sys.executable, "-c", SUBSCRIBER, str(bt.port), str(producers * per)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sub.stdout is not None and sub.stdout.readline().strip() == "ready"
        threads = [Producer(bt.port, "/topic/burst", per, 16) for _ in range(producers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
            assert t.error is None and t.receipt is not None and t.receipt.startswith(b"RECEIPT")
        received = int(sub.stdout.readline())
    finally:
        sub.kill()
        sub.wait()
    assert received == producers * per
    assert _topic(bt, "burst")["dropped"] == 0


def test_stalled_subscriber_holds_bounded_memory_then_gets_everything(bt: BrokerThread) -> None:
    reader = StalledReader(bt.port)
    reader.subscribe("/topic/prices")
    count = 96  # 48 MiB: more than the socket buffers and the high-water mark together
    producer = Producer(bt.port, "/topic/prices", count, BIG)
    producer.start()
    assert wait_until(lambda: _topic(bt, "prices")["blocked_producers"] == 1, timeout=30)
    held = _topic(bt, "prices")
    assert held["pending_bytes"] <= _held_bound(bt, BIG)
    assert held["enqueued"] < count and held["dropped"] == 0
    assert producer.receipt is None  # it waits, nothing is lost

    assert reader.numbers(until=count - 1) == list(range(count))
    producer.join(60)
    assert producer.error is None and producer.receipt is not None
    assert producer.receipt.startswith(b"RECEIPT")
    assert wait_until(lambda: _topic(bt, "prices")["pending_bytes"] == 0)
    assert _topic(bt, "prices")["blocked_producers"] == 0


def test_stalled_subscriber_holds_back_only_producers_to_its_topic(bt: BrokerThread) -> None:
    reader = StalledReader(bt.port)
    reader.subscribe("/topic/slow")
    producer = Producer(bt.port, "/topic/slow", 96, BIG)
    producer.start()
    assert wait_until(lambda: _topic(bt, "slow")["blocked_producers"] == 1, timeout=30)

    other, col = connect(bt.port)
    other.subscribe("/topic/fast", id="t", ack="auto")
    other.subscribe("/queue/work", id="q", ack="auto", receipt="subs")
    assert col.wait(lambda: "subs" in col.receipts)
    sender, scol = connect(bt.port)
    sender.send("/topic/fast", "news", receipt="t")
    sender.send("/queue/work", "job", headers={"persistent": "true"}, receipt="q")
    assert scol.wait(lambda: {"t", "q"} <= set(scol.receipts))
    col.wait_messages(2)
    assert sorted(col.bodies()) == ["job", "news"]
    assert _topic(bt, "slow")["blocked_producers"] == 1

    reader.sock.close()  # the slow subscriber goes away: the producer goes on
    producer.join(60)
    assert producer.error is None and producer.receipt is not None
    assert producer.receipt.startswith(b"RECEIPT")
    assert _topic(bt, "slow")["blocked_producers"] == 0
    sender.disconnect()
    other.disconnect()


def test_opt_in_pending_limit_drops_oldest_and_says_so(
    memory_store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    bt = BrokerThread(memory_store, dataclasses.replace(FAST, topic_pending_limit=100)).start()
    try:
        reader = StalledReader(bt.port)
        reader.subscribe("/topic/lossy")
        count = 4000  # 16 MiB
        with caplog.at_level(logging.WARNING, logger="mqstore.broker"):
            producer = Producer(bt.port, "/topic/lossy", count, 4096)
            producer.start()
            producer.join(60)  # never held back
            assert producer.error is None and producer.receipt is not None
        stats = _topic(bt, "lossy")
        assert stats["dropped"] > 0 and stats["blocked_producers"] == 0
        assert stats["pending_messages"] <= 100
        assert stats["pending_bytes"] <= _held_bound(bt, 4096)
        warning = [r.getMessage() for r in caplog.records if "appears to be slow" in r.message]
        assert warning and "'1'" in warning[0] and "topic://lossy" in warning[0]
        metrics = generate_latest(bt.broker.metrics.registry).decode()  # type: ignore[union-attr]
        sample = f'mqstore_topic_dropped_total{{destination="topic://lossy"}} {stats["dropped"]}.0'
        assert sample in metrics

        got = reader.numbers(until=count - 1)  # the newest messages are the ones kept
        assert len(got) == count - stats["dropped"]
        assert got == sorted(got)
    finally:
        bt.close()


def test_pending_limit_drops_nothing_of_a_durable_subscriber_its_producers_wait(
    memory_store: MemoryStore,
) -> None:
    """The pending limit is for non-durable subscribers (as ActiveMQ's): a durable one's
    non-persistent messages are never dropped, so producers wait for it instead."""
    cfg = dataclasses.replace(
        FAST, topic_pending_limit=100, topic_high_water=1 << 20, topic_low_water=512 * 1024
    )  # a mark far below the 16 MiB sent, whatever the connection and sockets hold
    bt = BrokerThread(memory_store, cfg).start()
    try:
        reader = StalledReader(bt.port)
        reader.subscribe_durable("/topic/kept", "slow", "d")
        count = 4000  # 16 MiB
        producer = Producer(bt.port, "/topic/kept", count, 4096)
        producer.start()
        assert wait_until(lambda: _topic(bt, "kept")["blocked_producers"] == 1, 30)
        assert _topic(bt, "kept")["dropped"] == 0
        assert reader.numbers(until=count - 1) == list(range(count))
        producer.join(60)
        assert producer.error is None and producer.receipt is not None
        assert _topic(bt, "kept")["dropped"] == 0
    finally:
        bt.close()


def test_stalled_queue_consumer_holds_bounded_outbound_bytes(bt: BrokerThread) -> None:
    prod, pcol = connect(bt.port)
    for i in range(64):
        prod.send("/queue/big", "x" * BIG, headers={"persistent": "true", "n": str(i)},
                  receipt=f"r{i}")  # fmt: skip
    assert pcol.wait(lambda: len(pcol.receipts) == 64)
    prod.disconnect()
    reader = StalledReader(bt.port)
    reader.subscribe("/queue/big")
    assert wait_until(lambda: _queue(bt, "big")["in_memory"] < 64)
    assert wait_until(lambda: _outbound(bt) > 0)
    assert _outbound(bt) <= bt.config.max_pending_bytes + BIG + 4096
    assert reader.numbers(until=63) == list(range(64))


def _queue(bt: BrokerThread, name: str) -> dict[str, Any]:
    stats: dict[str, Any] = bt.snapshot()["destinations"][f"queue://{name}"]
    return stats


def _outbound(bt: BrokerThread) -> int:
    """The most unwritten bytes any connection holds."""
    broker = bt.broker
    assert broker is not None

    async def most() -> int:
        return max(
            (
                sum(len(data) for data, _ in c._out) + c.writer.transport.get_write_buffer_size()
                for c in broker.connections
            ),
            default=0,
        )

    result: int = bt.call(most())
    return result


@pytest.mark.parametrize("pending_limit", [0, 10], ids=["flow-control", "drop-oldest"])
def test_messages_larger_than_the_high_water_mark_still_reach_a_reader(
    memory_store: MemoryStore, pending_limit: int
) -> None:
    cfg = dataclasses.replace(
        FAST, topic_high_water=256 * 1024, topic_low_water=128 * 1024,
        topic_pending_limit=pending_limit,
    )  # fmt: skip
    bt = BrokerThread(memory_store, cfg).start()
    try:
        cons, col = connect(bt.port)
        cons.subscribe("/topic/huge", id="s", ack="auto", receipt="sub")
        assert col.wait(lambda: "sub" in col.receipts)
        prod, pcol = connect(bt.port)
        for i in range(3):
            prod.send("/topic/huge", f"{i}" * (1024 * 1024), receipt=f"r{i}")
        assert pcol.wait(lambda: len(pcol.receipts) == 3)
        assert [m.body[0] for m in col.wait_messages(3)] == ["0", "1", "2"]
        assert _topic(bt, "huge")["dropped"] == 0
        prod.disconnect()
        cons.disconnect()
    finally:
        bt.close()


def test_a_stalled_durable_subscriber_holds_back_non_persistent_producers(
    bt: BrokerThread,
) -> None:
    reader = StalledReader(bt.port)
    reader.subscribe_durable("/topic/ticks", "slow-app", "ticks")
    count = 96  # 48 MiB of non-persistent messages: only memory holds them
    producer = Producer(bt.port, "/topic/ticks", count, BIG)
    producer.start()
    assert wait_until(lambda: _topic(bt, "ticks")["blocked_producers"] == 1, timeout=30)
    assert bt.broker is not None
    sub = next(iter(bt.broker.topics["topic://ticks"].durables.values()))
    assert sub.volatile_bytes <= _held_bound(bt, BIG)
    assert producer.receipt is None  # it waits, nothing is lost

    assert reader.numbers(until=count - 1) == list(range(count))
    producer.join(60)
    assert producer.error is None and producer.receipt is not None
    assert wait_until(lambda: _topic(bt, "ticks")["blocked_producers"] == 0)
