"""A JMS property named like a header the broker sets per delivery (ack, subscription,
redelivered) never hides that header: the client acknowledges what it was sent."""

from __future__ import annotations

from mqstore.broker.memory_store import MemoryStore
from mqstore.openwire import Destination, ProducerId, encode, text_message
from mqstore.store.model import NewMessage
from tests.broker.harness import running
from tests.broker.test_protocol import Raw

PRODUCER = ProducerId("ID:jms-app-1-1700000000000-1:1", 1, 1)
SHADOWS = {"ack": "from-the-producer", "subscription": "theirs", "redelivered": "true"}


def _headers(frame: bytes) -> list[tuple[str, str]]:
    head = frame.split(b"\n\n", 1)[0].decode().split("\n")[1:]
    return [(k, v) for k, _, v in (line.partition(":") for line in head)]


def test_a_message_with_properties_named_ack_and_subscription_is_acknowledged(
    memory_store: MemoryStore,
) -> None:
    msg = text_message(
        "hello", destination=Destination.parse("queue://jms"), producer_id=PRODUCER,
        sequence=1, persistent=True, properties=SHADOWS,
    )  # fmt: skip
    row = NewMessage("queue://jms", msg.msgid_prod or "", msg.msgid_seq or 0, encode(msg), 4)
    memory_store.add([row])
    with running(memory_store) as broker:
        client = Raw(broker.port)
        assert client.connect().startswith(b"CONNECTED")
        client.send(b"SUBSCRIBE\nid:mine\ndestination:/queue/jms\nack:client-individual\n\n\x00")
        frame = client.frame()
        headers = _headers(frame)
        names = [k for k, _ in headers]
        for name in SHADOWS:
            assert names.count(name) == 1, headers
        got = dict(headers)
        assert got["subscription"] == "mine" and got["redelivered"] == "false"
        client.send(f"ACK\nid:{got['ack']}\nreceipt:done\n\n\x00".encode())
        assert client.frame() == b"RECEIPT\nreceipt-id:done\n\n"
        assert memory_store.count("queue://jms") == 0
