"""A frame refused once its headers are read, before its body is (too large for the
broker, a malformed content-length), gets an ERROR with the ``receipt-id`` of its
``receipt`` header, as STOMP 1.2 asks of an ERROR about a frame that wanted a receipt."""

from __future__ import annotations

import socket

import pytest

from mqstore.broker.memory_store import MemoryStore
from tests.broker.harness import read_frame, running


def _headers(frame: bytes) -> dict[str, str]:
    command, *lines = frame.split(b"\n\n", 1)[0].decode().split("\n")
    assert command == "ERROR", frame[:300]
    return dict(line.split(":", 1) for line in reversed(lines))


@pytest.mark.parametrize(
    ("length", "told"),
    [(str(200 << 20), "too large"), ("12x", "content-length must be a number")],
)
def test_an_error_about_a_frame_whose_headers_were_read_carries_its_receipt(
    memory_store: MemoryStore, length: str, told: str
) -> None:
    with running(memory_store) as bt:
        sock = socket.create_connection(("127.0.0.1", bt.port), timeout=10)
        sock.sendall(b"CONNECT\naccept-version:1.0\nhost:h\n\n\x00")
        assert read_frame(sock).startswith(b"CONNECTED")
        head = f"SEND\ndestination:/queue/big\nreceipt:r-big\ncontent-length:{length}\n\n"
        sock.sendall(head.encode())
        headers = _headers(read_frame(sock))
        assert told in headers["message"], headers
        assert headers.get("receipt-id") == "r-big", headers
        sock.close()
