"""A SEND over the broker's message size limit gets an ERROR that says the message is too
large and names the setting and its value (MQSTORE_MAX_MESSAGE_BYTES), not a malformed
frame: a frame over the frame limit (the setting plus room for headers) as soon as that is
known, a message under it but over the limit as stored with the SEND's receipt-id. Neither
is stored, and the broker goes on taking messages of allowed size."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from mqstore.broker import BrokerConfig
from mqstore.broker.frames import Limits
from mqstore.store.postgres import PostgresStore
from tests.broker.harness import BrokerThread, connect, read_frame
from tests.conftest import count_rows

LIMIT = 10_000
SETTING = f"MQSTORE_MAX_MESSAGE_BYTES={LIMIT}"


@pytest.fixture
def limited(engine: Engine) -> Iterator[BrokerThread]:
    """A broker whose store and frames take messages of at most LIMIT bytes."""
    store = PostgresStore(engine, cleanup_interval_s=0, max_message_bytes=LIMIT)
    store.start()
    config = BrokerConfig(heartbeat_ms=(0, 0), limits=Limits.for_messages(LIMIT))
    bt = BrokerThread(store, config).start()
    try:
        yield bt
    finally:
        bt.close()
        store.stop()


def _connected(port: int, version: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"CONNECT\naccept-version:{version}\nhost:h\n\n\x00".encode())
    assert read_frame(sock).startswith(b"CONNECTED")
    return sock


def _error_headers(frame: bytes, version: str) -> dict[str, str]:
    """The headers of an ERROR frame, their escapes (1.1 and 1.2) decoded."""
    head = frame.split(b"\n\n", 1)[0].decode()
    command, *lines = head.split("\n")
    assert command == "ERROR", frame[:300]
    headers: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(":")
        if version != "1.0":
            assert ":" not in value, line  # a colon is sent as \c
            value = value.replace("\\c", ":").replace("\\n", "\n").replace("\\\\", "\\")
        headers.setdefault(key, value)
    return headers


def _warned(caplog: pytest.LogCaptureFixture, sock: socket.socket) -> bool:
    """Whether the broker logged the refusal as a warning naming the client's address."""
    host, port = sock.getsockname()[:2]
    return any(
        r.levelno == logging.WARNING
        and "message too large" in r.getMessage()
        and f"{host}:{port}" in r.getMessage()
        for r in caplog.records
    )


def _closed(sock: socket.socket) -> bool:
    try:
        while chunk := sock.recv(65536):
            assert b"MESSAGE" not in chunk and b"RECEIPT" not in chunk, chunk
    except ConnectionResetError:
        pass
    return True


def _a_message_still_goes(bt: BrokerThread, engine: Engine) -> None:
    conn, col = connect(bt.port)
    conn.send("/queue/sized", "fits", headers={"persistent": "true"}, receipt="ok")
    assert col.wait(lambda: "ok" in col.receipts), col.errors
    assert count_rows(engine, "activemq_msgs") == 1
    conn.subscribe("/queue/sized", id="1", ack="auto")
    assert [m.body for m in col.wait_messages(1)] == ["fits"]
    conn.disconnect()


@pytest.mark.parametrize("content_length", [True, False], ids=["content-length", "up-to-nul"])
def test_a_frame_over_the_limit_is_refused_as_too_large_naming_the_setting(
    limited: BrokerThread, engine: Engine, content_length: bool, caplog: pytest.LogCaptureFixture
) -> None:
    frame_limit = limited.config.limits.max_frame_size
    sock = _connected(limited.port, "1.2")
    if content_length:  # refused from its headers, before its 2 MB body comes
        sock.sendall(b"SEND\ndestination:/queue/sized\npersistent:true\ncontent-length:2000000\n\n")
    else:  # refused once one byte more than the limit came, with no NUL yet
        head = b"SEND\ndestination:/queue/sized\npersistent:true\n\n"
        sock.sendall(head + b"x" * (frame_limit + 1 - len(head)))
    headers = _error_headers(read_frame(sock), "1.2")
    message = headers["message"]
    assert message.startswith("message too large"), message
    assert "malformed" not in message
    assert SETTING in message and str(frame_limit) in message, message
    assert _closed(sock)
    assert _warned(caplog, sock)
    sock.close()
    assert count_rows(engine, "activemq_msgs") == 0
    _a_message_still_goes(limited, engine)


@pytest.mark.parametrize("version", ["1.0", "1.2"])
def test_a_message_over_the_limit_as_stored_is_refused_with_its_receipt_id(
    limited: BrokerThread, engine: Engine, version: str, caplog: pytest.LogCaptureFixture
) -> None:
    body = b"y" * (LIMIT * 2)
    assert len(body) < limited.config.limits.max_frame_size
    sock = _connected(limited.port, version)
    sock.sendall(
        b"SEND\ndestination:/queue/sized\npersistent:true\nreceipt:big\n"
        b"content-length:%d\n\n%s\x00" % (len(body), body)
    )
    frame = read_frame(sock)
    headers = _error_headers(frame, version)
    message = headers["message"]
    assert headers.get("receipt-id") == "big"
    assert message.startswith("message too large"), message
    assert "malformed" not in message and "max_message_bytes" not in message
    assert SETTING in message, message
    assert f"body {len(body)} bytes" in message, message
    assert message.encode() in frame.split(b"\n\n", 1)[1]  # the body says it too
    assert _closed(sock)
    assert _warned(caplog, sock)
    sock.close()
    assert count_rows(engine, "activemq_msgs") == 0
    _a_message_still_goes(limited, engine)
