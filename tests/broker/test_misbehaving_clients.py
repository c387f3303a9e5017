"""Clients that misbehave over real sockets: the broker stays bounded and lets them go.

A client that trickles its CONNECT frame is closed once ``connect_timeout`` has passed since
it connected, a client dropped for silence that never reads has its socket released, and a
client-ack consumer reset with messages unacknowledged has them delivered to another one.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
from collections.abc import Iterator

import pytest

from mqstore.broker.memory_store import MemoryStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until
from tests.broker.test_protocol import Raw


@pytest.fixture
def bt(memory_store: MemoryStore) -> Iterator[BrokerThread]:
    config = dataclasses.replace(FAST, connect_timeout=1.0, heartbeat_ms=(100, 100))
    broker = BrokerThread(memory_store, config).start()
    yield broker
    broker.close()


def _sockets() -> set[str]:
    """The sockets this process (the broker's thread among it) holds open."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:"):
            out.add(target)
    return out


def _broker_socket(bt: BrokerThread, client: socket.socket) -> str:
    """The broker's end of ``client``'s connection, as /proc names it."""
    broker = bt.broker
    assert broker is not None
    peer = "{}:{}".format(*client.getsockname())

    async def fileno() -> int:
        (conn,) = [c for c in broker.connections if c.peer == peer]
        return int(conn.writer.get_extra_info("socket").fileno())

    return os.readlink(f"/proc/self/fd/{bt.call(fileno())}")


def test_a_client_that_trickles_its_connect_frame_is_closed_after_the_connect_timeout(
    bt: BrokerThread,
) -> None:
    """connect_timeout counts from the connection, not from the last byte: a client sending
    a byte now and then never keeps an unauthenticated connection (and its slot) for ever."""
    raw = Raw(bt.port)
    raw.sock.settimeout(0.3)
    reply = b""
    for byte in b"CONNECT\naccept-version:1.2\nhost:" + b"h" * 40:  # 0.3 s a byte: 15 s
        try:
            raw.sock.send(bytes([byte]))
        except OSError:
            break  # closed
        try:
            reply = raw.sock.recv(65536)
            break  # an answer (or end-of-file)
        except TimeoutError:
            continue
    assert reply.startswith(b"ERROR") and b"no CONNECT frame received" in reply, reply
    assert raw.closed()


def test_a_client_dropped_for_silence_that_never_reads_has_its_socket_released(
    bt: BrokerThread,
) -> None:
    """A consumer that negotiated heart-beats and froze (reads nothing, sends nothing) is
    dropped, and its socket closed although what the broker wrote to it can never be sent:
    such clients do not hold a file descriptor and a write buffer each for ever."""
    producer, col = connect(bt.port)
    body = "x" * 10_000
    for _ in range(1000):  # 10 MB: more than the socket buffers and max_pending_bytes
        producer.send("/queue/flood", body, headers={"persistent": "true"})
    producer.send("/queue/flood", "last", headers={"persistent": "true"}, receipt="last")
    assert col.wait(lambda: "last" in col.receipts)

    frozen = socket.socket()
    frozen.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    frozen.connect(("127.0.0.1", bt.port))
    frozen.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:100,100\n\n\x00")
    frozen.sendall(b"SUBSCRIBE\ndestination:/queue/flood\nid:1\nack:client\n\n\x00")
    assert wait_until(lambda: len(bt.broker.connections) == 2)  # type: ignore[union-attr]
    held = _broker_socket(bt, frozen)
    # it never reads nor sends again: the broker drops it, and lets the socket go
    assert wait_until(lambda: held not in _sockets(), timeout=30)
    assert wait_until(lambda: bt.snapshot()["connections"] == 1)

    consumer, ccol = connect(bt.port)  # what it held goes to the next consumer
    consumer.subscribe("/queue/flood", id="1", ack="auto")
    assert ccol.wait_messages(1001, 30)[-1].body == "last"
    frozen.close()
    for conn in (producer, consumer):
        conn.disconnect()


@pytest.mark.parametrize("ack", ["client", "client-individual"])
def test_unacknowledged_messages_of_a_reset_consumer_go_to_another_consumer(
    bt: BrokerThread, ack: str
) -> None:
    """A client-ack consumer whose connection is reset (no DISCONNECT, no FIN) gives back
    every message it did not acknowledge, to a consumer already waiting, marked redelivered."""
    other, ocol = connect(bt.port)
    other.subscribe("/queue/jobs", id="o", ack="client-individual", headers={
        "activemq.prefetchSize": "1"})  # fmt: skip
    raw = Raw(bt.port)
    assert raw.connect("heart-beat:0,0\n").startswith(b"CONNECTED")
    raw.send(f"SUBSCRIBE\ndestination:/queue/jobs\nid:r\nack:{ack}\n"
             "activemq.prefetchSize:100000\n\n\x00".encode())  # fmt: skip
    producer, pcol = connect(bt.port)
    for n in range(50):
        producer.send("/queue/jobs", str(n), headers={"persistent": "true"}, receipt=str(n))
    assert pcol.wait(lambda: len(pcol.receipts) == 50)
    first = ocol.wait_messages(1)[0]  # one of them went to the other consumer
    raw_got = 0
    while raw_got < 49:  # the rest to the one that is reset
        assert raw.frame().startswith(b"MESSAGE")
        raw_got += 1
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    raw.sock.close()

    other.ack(first.headers["ack"])
    seen = [first.body]
    while len(seen) < 50:
        frame = ocol.wait_messages(len(seen) + 1)[len(seen)]
        assert frame.headers["redelivered"] == "true"
        seen.append(frame.body)
        other.ack(frame.headers["ack"])
    assert sorted(seen, key=int) == [str(n) for n in range(50)]
    for conn in (other, producer):
        conn.disconnect()
