"""Protocol edges over raw sockets and stomp.py: errors, limits, auth, flow control, metrics."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from urllib.request import urlopen

import pytest
import stomp

from mqstore.broker import BrokerConfig, Limits
from mqstore.broker.memory_store import MemoryStore
from mqstore.store import Batch
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until

P = {"persistent": "true"}


class Raw:
    """A raw socket STOMP client."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, timeout: float = 5.0) -> bytes:
        self.sock.settimeout(timeout)
        while b"\x00" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(self.buf)
            self.buf += chunk
        frame, _, self.buf = self.buf.partition(b"\x00")
        return frame.lstrip(b"\n")

    def closed(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def connect(self, extra: str = "") -> bytes:
        self.send(f"CONNECT\naccept-version:1.2\nhost:x\n{extra}\n\x00".encode())
        return self.frame()


@pytest.fixture
def raw_broker(memory_store: MemoryStore) -> Iterator[BrokerThread]:
    cfg = BrokerConfig(
        heartbeat_ms=(100, 100),
        limits=Limits(max_frame_size=4096, max_headers=20, max_header_length=512),
    )
    bt = BrokerThread(memory_store, cfg).start()
    yield bt
    bt.close()


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"BOGUS\n\n\x00", b"unknown STOMP command"),
        (b"SEND\ndestination:/queue/a\nno-colon-here\n\nx\x00", b"no colon"),
        (b"SEND\ndestination:/queue/a\nbad:esc\\t\n\nx\x00", b"undefined escape"),
        (b"SEND\n\nbody\x00", b"needs a destination"),
        (b"SEND\ndestination:/dest/x\n\nbody\x00", b"unsupported destination"),
        (b"ACK\nid:nope\n\n\x00", b"unknown or already settled"),
        (b"COMMIT\ntransaction:t9\n\n\x00", b"was not begun"),
        (b"SEND\ndestination:/queue/a\ncontent-length:abc\n\nx\x00", b"content-length"),
    ],
)
def test_malformed_frames_get_error(raw_broker: BrokerThread, data: bytes, fragment: bytes) -> None:
    raw = Raw(raw_broker.port)
    assert raw.connect().startswith(b"CONNECTED")
    raw.send(data)
    reply = raw.frame()
    assert reply.startswith(b"ERROR"), reply
    assert fragment in reply
    assert raw.closed()


def test_an_error_reaches_a_client_still_sending_and_reading_late(mem_broker: BrokerThread) -> None:
    """A client pipelining SENDs behind a bad frame, with messages on their way to it, gets
    every byte the broker wrote, the ERROR last, then end-of-file: not a reset that drops
    the output the broker's kernel had not sent yet."""
    producer, col = connect(mem_broker.port)
    for n in range(300):  # 3 MB waiting for the client below
        producer.send("/queue/big", "y" * 10_000, receipt=f"r{n}")
    assert col.wait(lambda: len(col.receipts) == 300, 30)
    producer.disconnect()
    raw = Raw(mem_broker.port)
    assert raw.connect().startswith(b"CONNECTED")
    raw.send(b"SUBSCRIBE\nid:1\ndestination:/queue/big\nack:client\n\n\x00")
    assert raw.frame().startswith(b"MESSAGE\n")  # the rest fill the sockets' buffers
    send = b"SEND\ndestination:/queue/other\n\n" + b"x" * 1000 + b"\x00"
    pump = threading.Thread(target=raw.sock.sendall, args=(b"BOGUS\n\n\x00" + send * 3000,))
    pump.start()  # blocks until the broker reads again: it has stopped at BOGUS
    time.sleep(1.0)  # the bad frame is read while the client does not read
    got = raw.buf
    raw.sock.settimeout(10)
    while chunk := raw.sock.recv(1 << 20):  # a reset raises ConnectionResetError
        got += chunk
    pump.join(10)
    frames = [f.lstrip(b"\n") for f in got.split(b"\x00")]
    assert frames.pop().strip() == b""  # every frame whole
    assert frames[0].startswith(b"MESSAGE\n") and len(frames) > 100
    assert frames[-1].startswith(b"ERROR\n") and b"unknown STOMP command" in frames[-1]


def test_frame_before_connect_is_refused(raw_broker: BrokerThread) -> None:
    raw = Raw(raw_broker.port)
    raw.send(b"SEND\ndestination:/queue/a\n\nx\x00")
    reply = raw.frame()
    assert reply.startswith(b"ERROR") and b"expected a CONNECT" in reply
    assert raw.closed()


def test_oversized_frame_and_too_many_headers(raw_broker: BrokerThread) -> None:
    raw = Raw(raw_broker.port)
    raw.connect()
    raw.send(b"SEND\ndestination:/queue/a\n\n" + b"x" * 5000 + b"\x00")
    reply = raw.frame()
    assert reply.startswith(b"ERROR") and b"frame too large" in reply
    assert raw.closed()
    raw = Raw(raw_broker.port)
    raw.connect()
    raw.send(b"SEND\ndestination:/queue/a\n" + b"".join(b"h%d:v\n" % i for i in range(30)))
    reply = raw.frame()
    assert b"too many headers" in reply
    assert raw.closed()


def test_body_with_nuls_and_escaped_headers(raw_broker: BrokerThread) -> None:
    raw = Raw(raw_broker.port)
    raw.connect("heart-beat:0,0\n")
    raw.send(b"SUBSCRIBE\ndestination:/queue/bin\nid:1\nreceipt:s\n\n\x00")
    assert raw.frame().startswith(b"RECEIPT")
    body = b"a\x00b\x00c"
    raw.send(
        b"SEND\ndestination:/queue/bin\nk\\cey:v\\nal\\\\ue\ncontent-length:5\n\n" + body + b"\x00"
    )
    head = b""
    while not head.startswith(b"MESSAGE"):
        head = raw.frame()
    # the frame was split at the first NUL by our naive reader: read the rest
    assert b"content-length:5" in head
    assert b"k\\cey:v\\nal\\\\ue" in head
    assert raw.frame() == b"b"


def test_frames_sent_with_the_connect_frame_are_read_in_the_negotiated_version(
    raw_broker: BrokerThread,
) -> None:
    raw = Raw(raw_broker.port)
    raw.send(
        b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\x00"
        b"SUBSCRIBE\ndestination:/queue/piped\nid:1\n\n\x00"
        b"SEND\ndestination:/queue/piped\nk\\cey:a\\cb\\\\c\n\nhello\x00"
    )
    assert raw.frame().startswith(b"CONNECTED")
    message = raw.frame()
    assert message.startswith(b"MESSAGE"), message
    # the header k:ey = a:b\c, escaped again as 1.2 says (not taken as 1.0 literal text)
    assert b"\nk\\cey:a\\cb\\\\c\n" in message, message


def test_heartbeat_enforced(raw_broker: BrokerThread) -> None:
    raw = Raw(raw_broker.port)
    reply = raw.connect("heart-beat:100,100\n")
    assert b"heart-beat:100,100" in reply
    # the broker sends heart-beats to us
    raw.sock.settimeout(2)
    assert raw.sock.recv(10).startswith(b"\n")
    # and closes the connection when we stay silent
    t0 = time.monotonic()
    reply = raw.frame(timeout=3)
    assert reply.startswith(b"ERROR") and b"heart-beat" in reply
    assert time.monotonic() - t0 < 2


def test_version_negotiation(raw_broker: BrokerThread) -> None:
    raw = Raw(raw_broker.port)
    raw.send(b"CONNECT\naccept-version:1.1,1.0\n\n\x00")
    assert b"version:1.1" in raw.frame()
    raw = Raw(raw_broker.port)
    raw.send(b"STOMP\naccept-version:2.0\n\n\x00")
    reply = raw.frame()
    assert reply.startswith(b"ERROR") and b"supported protocol version" in reply


def test_auth(memory_store: MemoryStore, caplog: pytest.LogCaptureFixture) -> None:
    bt = BrokerThread(memory_store, BrokerConfig(heartbeat_ms=(0, 0), users={"u": "s3cret"}))
    bt.start()
    try:
        with pytest.raises(stomp.exception.ConnectFailedException):
            connect(bt.port, login="u", passcode="wrong-pass")
        with pytest.raises(stomp.exception.ConnectFailedException):
            connect(bt.port)
        c, _ = connect(bt.port, login="u", passcode="s3cret")
        c.disconnect()
    finally:
        bt.close()
    assert "wrong-pass" not in caplog.text and "s3cret" not in caplog.text


def test_duplicate_client_id_refused(mem_broker: BrokerThread) -> None:
    a, _ = connect(mem_broker.port, client_id="same")
    with pytest.raises(stomp.exception.ConnectFailedException):
        connect(mem_broker.port, client_id="same")
    a.disconnect()


def test_flow_control_blocks_then_resumes(memory_store: MemoryStore) -> None:
    cfg = BrokerConfig(heartbeat_ms=(0, 0), store_usage_limit=4000, producer_block_timeout=5)
    bt = BrokerThread(memory_store, cfg).start()
    try:
        prod, pcol = connect(bt.port)
        body = "x" * 1024
        for i in range(6):
            prod.send("/queue/full", body, headers=P, receipt=f"r{i}")
        assert pcol.wait(lambda: len(pcol.receipts) >= 3)
        time.sleep(0.2)
        stuck = len(pcol.receipts)
        assert stuck < 6
        assert bt.snapshot()["store_usage"]["blocked_producers"] == 1
        cons, col = connect(bt.port)
        cons.subscribe("/queue/full", id="s")
        col.wait_messages(6)
        assert pcol.wait(lambda: len(pcol.receipts) == 6)
        assert wait_until(lambda: bt.snapshot()["store_usage"]["used"] == 0)
        prod.disconnect()
        cons.disconnect()
    finally:
        bt.close()


def test_flow_control_timeout_error(memory_store: MemoryStore) -> None:
    cfg = BrokerConfig(heartbeat_ms=(0, 0), store_usage_limit=2000, producer_block_timeout=0.3)
    bt = BrokerThread(memory_store, cfg).start()
    try:
        prod, pcol = connect(bt.port)
        for i in range(4):
            prod.send("/queue/full", "y" * 1024, headers=P, receipt=f"r{i}")
        assert pcol.wait(lambda: bool(pcol.errors), 5)
        assert "store usage limit" in pcol.errors[0].headers["message"]
    finally:
        bt.close()


def test_sends_are_batched(mem_broker: BrokerThread) -> None:
    conns = [connect(mem_broker.port) for _ in range(4)]
    for c, _ in conns:
        for i in range(100):
            c.send("/queue/batch", str(i), headers=P, receipt=str(i))
    for _, col in conns:
        assert col.wait(lambda col=col: len(col.receipts) == 100)
    store = mem_broker.store
    assert isinstance(store, MemoryStore)
    assert store.count("queue://batch") == 400
    assert store.calls["commit"] < 400
    for c, _ in conns:
        c.disconnect()


def test_snapshot_and_metrics(memory_store: MemoryStore) -> None:
    cfg = BrokerConfig(heartbeat_ms=(0, 0), metrics_port=0)
    bt = BrokerThread(memory_store, cfg).start()
    try:
        prod, col = connect(bt.port)
        prod.send("/queue/m", "x", headers=P, receipt="r")
        assert col.wait(lambda: "r" in col.receipts)
        snap = bt.snapshot()
        assert snap["destinations"]["queue://m"]["depth"] == 1
        assert bt.broker is not None and bt.broker.metrics.port
        text = urlopen(f"http://127.0.0.1:{bt.broker.metrics.port}/metrics").read().decode()
        assert 'mqstore_destination_depth{destination="queue://m"} 1.0' in text
        assert "mqstore_destination_enqueued_total" in text
        prod.disconnect()
    finally:
        bt.close()


class _SlowCommits(MemoryStore):
    """Each commit takes 0.3 s, so sends are still being stored when the broker stops."""

    def commit(self, batch: Batch) -> list[int]:
        time.sleep(0.3)
        return super().commit(batch)


def _frames_until_closed(raw: Raw) -> list[bytes]:
    frames: list[bytes] = []
    with contextlib.suppress(EOFError, OSError):
        while True:
            frames.append(raw.frame(timeout=10))
    return frames


def _stop_while_storing(bt: BrokerThread, raw: Raw, destination: str, count: int) -> list[bytes]:
    raw.send(
        b"".join(
            b"SEND\ndestination:%s\npersistent:true\nreceipt:r%d\n\nbody%d\x00"
            % (destination.encode(), i, i)
            for i in range(count)
        )
    )
    time.sleep(0.1)  # the first commit is under way
    stopper = threading.Thread(target=bt.stop)
    stopper.start()
    frames = _frames_until_closed(raw)
    stopper.join(30)
    return frames


@pytest.fixture
def slow_broker() -> Iterator[tuple[BrokerThread, MemoryStore, Raw]]:
    """A broker committing one send at a time, slowly, and a connected raw client."""
    store = _SlowCommits()
    store.start()
    bt = BrokerThread(store, dataclasses.replace(FAST, max_batch=1)).start()
    try:
        raw = Raw(bt.port)
        assert raw.connect().startswith(b"CONNECTED")
        yield bt, store, raw
    finally:
        bt.close()
        store.stop()


def test_stop_writes_the_receipt_of_every_pipelined_send(
    slow_broker: tuple[BrokerThread, MemoryStore, Raw],
) -> None:
    bt, store, raw = slow_broker
    frames = _stop_while_storing(bt, raw, "/queue/rq", 5)
    assert store.count("queue://rq") == 5
    assert sum(f.startswith(b"RECEIPT") for f in frames) == 5


def test_stop_loses_no_message_of_an_auto_ack_consumer_on_a_closing_connection(
    slow_broker: tuple[BrokerThread, MemoryStore, Raw],
) -> None:
    bt, store, raw = slow_broker
    raw.send(b"SUBSCRIBE\ndestination:/queue/aq\nid:s\nack:auto\nreceipt:sub\n\n\x00")
    assert raw.frame().startswith(b"RECEIPT")
    frames = _stop_while_storing(bt, raw, "/queue/aq", 5)
    received = sum(f.startswith(b"MESSAGE") for f in frames)
    assert received + store.count("queue://aq") == 5


def test_a_client_that_does_not_read_its_receipts_is_held_back(memory_store: MemoryStore) -> None:
    config = dataclasses.replace(FAST, max_pending_frames=100)
    bt = BrokerThread(memory_store, config).start()
    try:
        raw = Raw(bt.port)
        raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        assert raw.connect().startswith(b"CONNECTED")
        frame = b"SEND\ndestination:/topic/nobody\nreceipt:" + b"r" * 8000 + b"\n\nx\x00"
        raw.sock.settimeout(2)
        with contextlib.suppress(TimeoutError):
            for _ in range(4000):  # 32 MB of frames, and no reply is ever read
                raw.send(frame)
        broker = bt.broker
        assert broker is not None

        async def queued() -> int:
            return sum(len(data) for c in broker.connections for data, _ in c._out)

        assert bt.call(queued()) < 2 * 1024 * 1024
    finally:
        bt.close()


def test_a_content_length_of_thousands_of_digits_gets_an_error(memory_store: MemoryStore) -> None:
    bt = BrokerThread(memory_store, BrokerConfig(heartbeat_ms=(0, 0))).start()  # 10 KiB lines
    try:
        raw = Raw(bt.port)
        raw.connect()
        raw.send(b"SEND\ndestination:/queue/a\ncontent-length:" + b"9" * 5000 + b"\n\nx\x00")
        reply = raw.frame()
        assert reply.startswith(b"ERROR") and b"frame too large" in reply, reply
        assert raw.closed()
    finally:
        bt.close()


@pytest.mark.parametrize("persistent", ["true", "false"])
def test_an_expires_beyond_a_java_long_gets_an_error(
    raw_broker: BrokerThread, persistent: str
) -> None:
    raw = Raw(raw_broker.port)
    raw.connect()
    raw.send(
        f"SEND\ndestination:/queue/a\npersistent:{persistent}\nexpires:{1 << 63}\n\nx\x00".encode()
    )
    reply = raw.frame()
    assert reply.startswith(b"ERROR") and b"expires" in reply, reply
    assert raw.closed()


@pytest.mark.parametrize("version", ["1.0", "1.2"])
def test_an_unsubscribe_without_id_or_destination_says_what_it_needs(
    raw_broker: BrokerThread, version: str
) -> None:
    raw = Raw(raw_broker.port)
    raw.send(f"CONNECT\naccept-version:{version}\nhost:x\n\n\x00".encode())
    assert raw.frame().startswith(b"CONNECTED")
    raw.send(b"UNSUBSCRIBE\nreceipt:u\n\n\x00")
    reply = raw.frame()
    assert reply.startswith(b"ERROR\n") and b"receipt-id:u" in reply, reply
    assert b"UNSUBSCRIBE needs an id header" in reply and b"or a destination header" in reply
    assert b"None" not in reply
    assert raw.closed()


def test_a_stomp_10_unsubscribe_of_an_unknown_destination_names_the_destination(
    raw_broker: BrokerThread,
) -> None:
    raw = Raw(raw_broker.port)
    raw.send(b"CONNECT\nhost:x\n\n\x00")
    assert raw.frame().startswith(b"CONNECTED")
    raw.send(b"UNSUBSCRIBE\ndestination:/queue/none\n\n\x00")
    reply = raw.frame()
    assert b"no subscription with destination '/queue/none' on this connection" in reply, reply
    assert raw.closed()
