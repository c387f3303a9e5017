"""Until a connection's CONNECT is answered with CONNECTED nobody is authenticated, so its
frames are bounded by ``max_connect_frame_size`` (64 KiB), not by the frame limit for
messages: a frame growing past it gets an ERROR naming the limit and the connection is
closed, instead of the broker holding megabytes for it until ``connect_timeout``. Once
CONNECTED, frames (those sent along with CONNECT too) may be as large as ``max_frame_size``."""

from __future__ import annotations

import socket

import pytest
from sqlalchemy.engine import Engine

from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread
from tests.broker.test_protocol import Raw
from tests.conftest import count_rows

BIG = 1 << 20  # a message body far over the limit before CONNECT, well under max_frame_size


def _send_all(sock: socket.socket, data: bytes) -> None:
    """Send ``data`` in pieces; stop once the broker closed the connection."""
    for i in range(0, len(data), 16384):
        try:
            sock.sendall(data[i : i + 16384])
        except OSError:
            return


@pytest.mark.parametrize("content_length", [False, True])
def test_a_large_frame_before_connect_is_refused_naming_the_connect_frame_limit(
    pg_broker: BrokerThread, engine: Engine, content_length: bool
) -> None:
    """A SEND before CONNECT whose body never ends (no NUL), or whose content-length is
    large, is refused as soon as it passes the limit, well before connect_timeout."""
    assert FAST.limits.max_frame_size > BIG > 64 * 1024
    raw = Raw(pg_broker.port)
    head = b"SEND\ndestination:/queue/pre\npersistent:true\n"
    if content_length:
        head += b"content-length:%d\n" % BIG
    _send_all(raw.sock, head + b"\n" + b"a" * BIG)
    error = raw.frame()
    assert error.startswith(b"ERROR\n"), error
    assert b"max_connect_frame_size" in error and b"65536 bytes" in error, error
    assert raw.closed()
    assert count_rows(engine, "activemq_msgs") == 0


def test_a_large_connect_frame_is_refused(pg_broker: BrokerThread) -> None:
    raw = Raw(pg_broker.port)
    headers = b"".join(b"h%d:%s\n" % (i, b"v" * 9000) for i in range(10))  # 90 KB
    _send_all(raw.sock, b"CONNECT\naccept-version:1.2\n" + headers + b"\n\x00")
    error = raw.frame()
    assert error.startswith(b"ERROR\n") and b"max_connect_frame_size" in error, error
    assert raw.closed()


@pytest.mark.parametrize("pipelined", [False, True])
def test_once_connected_a_frame_may_be_as_large_as_the_frame_limit(
    pg_broker: BrokerThread, engine: Engine, pipelined: bool
) -> None:
    """A SEND sent right behind CONNECT (before CONNECTED came back) counts as after it."""
    raw = Raw(pg_broker.port)
    connect = b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"
    send = (
        b"SEND\ndestination:/queue/big\npersistent:true\nreceipt:r1\n"
        b"content-length:%d\n\n" % BIG + b"b" * BIG + b"\x00"
    )
    if pipelined:
        _send_all(raw.sock, connect + send)
        assert raw.frame().startswith(b"CONNECTED\n")
    else:
        assert raw.connect().startswith(b"CONNECTED\n")
        _send_all(raw.sock, send)
    receipt = raw.frame()
    assert receipt.startswith(b"RECEIPT\n") and b"receipt-id:r1" in receipt, receipt
    assert count_rows(engine, "activemq_msgs") == 1
