"""Destination names, client-ids, logins and durable subscription names are stored or
written to the broker's log as they are: one holding a control character (a STOMP 1.2
escaped newline would forge a log line, an ESC would drive the operator's terminal) is
refused with an ERROR naming the header and the character, before anything is stored or
logged."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy.engine import Engine

from tests.broker.harness import BrokerThread
from tests.broker.test_protocol import Raw
from tests.conftest import count_rows

FORGED = "2026-01-01 00:00:00 ERROR forged line"


FRAMES = {
    "SEND escaped newline": (
        "", b"SEND\ndestination:/queue/inj\\n" + FORGED.encode() + b"\npersistent:true\n"
        b"receipt:r\n\nx\x00", "destination", "'\\n'",
    ),
    "SEND carriage return": (
        "", b"SEND\ndestination:/queue/inj\\r" + FORGED.encode() + b"\nreceipt:r\n\nx\x00",
        "destination", "'\\r'",
    ),
    "SUBSCRIBE escape": (
        "", b"SUBSCRIBE\nid:1\ndestination:/topic/a\x1b[2Jb\nreceipt:r\n\n\x00",
        "destination", "'\\x1b'",
    ),
    "SUBSCRIBE delete": (
        "", b"SUBSCRIBE\nid:1\ndestination:/queue/a\x7fb\nreceipt:r\n\n\x00",
        "destination", "'\\x7f'",
    ),
    "durable subscription name": (
        "client-id:c1\n",
        b"SUBSCRIBE\nid:1\ndestination:/topic/t\nactivemq.subscriptionName:s\\n"
        + FORGED.encode() + b"\nreceipt:r\n\n\x00",
        "activemq.subscriptionName", "'\\n'",
    ),
    "client-id": ("client-id:c\x1b]0;x\x07\n", b"", "client-id", "'\\x1b'"),
    "login": ("login:app\rINFO forged\n", b"", "login", "'\\r'"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(FRAMES))
def test_a_name_holding_a_control_character_is_refused(
    pg_broker: BrokerThread, engine: Engine, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    connect_headers, frame, header, char = FRAMES[case]
    caplog.set_level(logging.DEBUG)
    raw = Raw(pg_broker.port)
    reply = raw.connect(connect_headers)
    if frame:
        assert reply.startswith(b"CONNECTED\n"), reply
        raw.send(frame)
        reply = raw.frame()
    assert reply.startswith(b"ERROR\n"), reply
    message = reply.partition(b"\n\n")[2].decode()  # the body: unescaped
    assert f"header {header} holds the control character {char}" in message, message
    assert raw.closed()
    assert count_rows(engine, "activemq_msgs") == 0
    assert count_rows(engine, "activemq_acks") == 0
    assert not any("\n" + FORGED in r.getMessage() for r in caplog.records)


def test_printable_names_are_taken(pg_broker: BrokerThread, engine: Engine) -> None:
    raw = Raw(pg_broker.port)
    assert raw.connect("client-id:caf\u00e9 1\n").startswith(b"CONNECTED\n")
    raw.send(
        "SEND\ndestination:/queue/caf\u00e9 \\c ok\npersistent:true\nreceipt:r\n\nx\x00".encode()
    )
    assert raw.frame() == b"RECEIPT\nreceipt-id:r\n\n"
    assert count_rows(engine, "activemq_msgs") == 1
