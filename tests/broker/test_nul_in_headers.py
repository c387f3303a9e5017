"""STOMP has no escape for NUL in a header, and a NUL ends a frame: a frame with one in its
command or headers is refused with an ERROR however its bytes arrive (in one read, or byte
by byte), so it never becomes a property that would end a consumer's MESSAGE frame early.
A property holding NUL in a message another client stored reaches STOMP consumers as
U+FFFD, the frame whole."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.engine import Engine

from mqstore.openwire import ProducerId, encode, text_message
from mqstore.store.model import NewMessage
from mqstore.store.postgres import PostgresStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread
from tests.broker.test_protocol import Raw
from tests.conftest import count_rows

FRAMES = {
    "value": b"SEND\ndestination:/queue/nul\npersistent:true\nevil:a\x00b\n"
    b"content-length:5\n\nhello\x00",
    "key": b"SEND\ndestination:/queue/nul\npersistent:true\ne\x00vil:ab\n\nhello\x00",
    "command": b"SE\x00ND\ndestination:/queue/nul\n\nhello\x00",
}


@pytest.mark.parametrize("where", list(FRAMES))
@pytest.mark.parametrize("arrival", ["one-read", "byte-by-byte"])
def test_a_nul_in_the_headers_is_refused_however_the_bytes_arrive(
    pg_broker: BrokerThread, engine: Engine, where: str, arrival: str
) -> None:
    raw = Raw(pg_broker.port)
    assert raw.connect().startswith(b"CONNECTED\n")
    data = FRAMES[where]
    if arrival == "one-read":
        raw.send(data)
    else:
        raw.sock.setsockopt(6, 1, 1)  # TCP_NODELAY: each byte its own segment
        for i in range(len(data)):
            try:
                raw.send(data[i : i + 1])
            except OSError:
                break  # refused and closed
            time.sleep(0.001)
    error = raw.frame()
    assert error.startswith(b"ERROR\n"), error
    assert b"NUL before the end of the headers" in error, error
    assert raw.closed()
    assert count_rows(engine, "activemq_msgs") == 0


def test_a_stored_property_holding_nul_is_delivered_as_a_replacement_character(
    pg_store: PostgresStore,
) -> None:
    msg = text_message(
        "hello",
        destination="queue://nulprop",
        producer_id=ProducerId("ID:other-1", 1, 1),
        sequence=1,
        properties={"note": "a\x00b"},
    )
    pg_store.add([NewMessage("queue://nulprop", msg.msgid_prod or "", msg.msgid_seq or 0,
                          encode(msg), msg.priority)])  # fmt: skip
    pg_broker = BrokerThread(pg_store, FAST).start()
    try:
        _delivered_whole(pg_broker)
    finally:
        pg_broker.close()


def _delivered_whole(pg_broker: BrokerThread) -> None:
    raw = Raw(pg_broker.port)
    assert raw.connect().startswith(b"CONNECTED\n")
    raw.send(b"SUBSCRIBE\nid:1\ndestination:/queue/nulprop\nack:auto\nreceipt:s\n\n\x00")
    frames = [raw.frame(), raw.frame()]
    message = next(f for f in frames if f.startswith(b"MESSAGE\n"))
    head, _, body = message.partition(b"\n\n")
    assert body == b"hello"
    assert "note:a\ufffdb".encode() in head.split(b"\n"), head
    raw.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
    assert raw.frame() == b"RECEIPT\nreceipt-id:bye\n\n"
