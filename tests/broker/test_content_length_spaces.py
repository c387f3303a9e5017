"""A content-length header with spaces around its digits is read as the number (ActiveMQ
trims it); one that is not a number, or negative, still gets an ERROR."""

from __future__ import annotations

from mqstore.broker.memory_store import MemoryStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, drain
from tests.broker.test_protocol import Raw


def test_a_content_length_with_spaces_is_read_as_its_number(memory_store: MemoryStore) -> None:
    bt = BrokerThread(memory_store, FAST).start()
    try:
        spaced = Raw(bt.port)
        spaced.connect()
        spaced.send(b"SEND\ndestination:/queue/sp\ncontent-length: 5 \nreceipt:r\n\nhello\x00")
        reply = spaced.frame()
        assert reply.startswith(b"RECEIPT"), reply
        assert drain(bt.port, "/queue/sp") == ["hello"]

        negative = Raw(bt.port)
        negative.connect()
        negative.send(b"SEND\ndestination:/queue/sp\ncontent-length: -5\n\nhello\x00")
        reply = negative.frame()
        assert reply.startswith(b"ERROR") and b"content-length must be a number" in reply, reply
        assert negative.closed()
    finally:
        bt.close()
