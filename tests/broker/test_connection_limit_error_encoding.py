"""The ERROR frame that turns away a client past ``max_connections`` is written in the
STOMP version its CONNECT frame offered: a 1.0 client reads its message as sent (1.0 has
no header escapes), a 1.2 client reads the 1.2 escapes of it."""

from __future__ import annotations

import socket

import pytest

from mqstore.store import Store
from tests.broker.harness import read_frame, running


def _message_header(frame: bytes) -> bytes:
    head = frame.split(b"\n\n", 1)[0]
    [value] = [
        line[len(b"message:") :] for line in head.split(b"\n") if line.startswith(b"message:")
    ]
    return value


@pytest.mark.parametrize(
    ("connect", "in_use"),
    [
        (b"CONNECT\n\n\x00", b"all are in use: try again later"),
        (b"CONNECT\naccept-version:1.0\n\n\x00", b"all are in use: try again later"),
        (b"CONNECT\naccept-version:1.0,1.1,1.2\n\n\x00", b"all are in use\\c try again later"),
    ],
    ids=["no-accept-version", "1.0", "1.2"],
)
def test_a_refused_client_reads_the_error_in_the_version_it_offered(
    memory_store: Store, connect: bytes, in_use: bytes
) -> None:
    with running(memory_store, max_connections=1) as bt:
        first = socket.create_connection(("127.0.0.1", bt.port), timeout=10)
        first.sendall(b"CONNECT\naccept-version:1.2\n\n\x00")
        assert read_frame(first).startswith(b"CONNECTED")
        refused = socket.create_connection(("127.0.0.1", bt.port), timeout=10)
        refused.sendall(connect)
        frame = read_frame(refused)
        assert frame.startswith(b"ERROR\n")
        assert _message_header(frame).endswith(in_use)
        refused.close()
        first.close()
