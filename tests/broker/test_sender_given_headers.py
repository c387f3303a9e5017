"""Headers of a SEND that ActiveMQ's STOMP transport does not keep as properties: a sender
cannot forge ``JMSXUserID``, and ``transformation`` picks the message kind (``jms-text``,
``jms-byte``) or, naming a conversion this broker does not serve, is refused."""

from __future__ import annotations

from mqstore import openwire
from mqstore.broker.memory_store import MemoryStore
from mqstore.openwire import MessageKind
from tests.broker.harness import BrokerThread, connect, drain, running


def _stored(broker: BrokerThread, queue: str) -> openwire.Message:
    [row] = broker.store.page(queue, None, 10)  # the row a JMS reader of the database sees
    return openwire.decode(row.msg)


def test_a_consumer_never_sees_a_sender_given_jmsxuserid(broker: BrokerThread) -> None:
    prod, prod_col = connect(broker.port)
    forged = {"JMSXUserID": "admin", "persistent": "true"}
    prod.send("/queue/uid", "stored", headers=forged, receipt="r1")
    assert prod_col.wait(lambda: "r1" in prod_col.receipts), prod_col.errors
    assert "JMSXUserID" not in _stored(broker, "queue://uid").plain_properties()
    cons, col = connect(broker.port)
    cons.subscribe("/topic/uid", id="t", ack="auto", receipt="s")
    assert col.wait(lambda: "s" in col.receipts), col.errors
    prod.send("/topic/uid", "fanned", headers={"JMSXUserID": "admin"}, receipt="r3")
    cons.subscribe("/queue/uid", id="q", ack="auto")
    got = col.wait_messages(2)
    assert sorted(m.body for m in got) == ["fanned", "stored"]
    assert all("JMSXUserID" not in m.headers for m in got), [m.headers for m in got]
    prod.disconnect()
    cons.disconnect()


def test_transformation_jms_text_and_jms_byte_pick_the_kind_and_are_not_properties(
    broker: BrokerThread,
) -> None:
    prod, col = connect(broker.port)
    body = "héllo"
    sized = {"persistent": "true", "content-length": str(len(body.encode()))}
    prod.send("/queue/text", body, headers={**sized, "transformation": "jms-text"}, receipt="t")
    plain = {"persistent": "true", "transformation": "jms-byte"}
    prod.send("/queue/bytes", body, headers=plain, receipt="b")
    assert col.wait(lambda: len(col.receipts) == 2), col.errors
    text, raw = _stored(broker, "queue://text"), _stored(broker, "queue://bytes")
    assert text.kind is MessageKind.TEXT and text.text == body
    assert raw.kind is MessageKind.BYTES and raw.bytes_body == body.encode()
    assert "transformation" not in text.plain_properties()
    assert "transformation" not in raw.plain_properties()
    cons, got = connect(broker.port)
    cons.subscribe("/queue/bytes", id="1", ack="auto", headers={"transformation": "jms-byte"})
    [msg] = got.wait_messages(1)
    assert msg.headers["content-length"] == str(len(body.encode()))
    assert "transformation" not in msg.headers
    prod.disconnect()
    cons.disconnect()


def test_a_send_with_an_unsupported_transformation_is_refused_naming_the_served_ones(
    memory_store: MemoryStore,
) -> None:
    with running(memory_store) as bt:
        prod, col = connect(bt.port)
        prod.send("/queue/map", '{"map": {}}', headers={"transformation": "jms-map-json"})
        assert col.wait(lambda: bool(col.errors))
        told = col.errors[0].headers["message"]
        assert "jms-map-json" in told and "jms-byte" in told and "jms-text" in told, told
        assert drain(bt.port, "/queue/map") == []


def test_a_subscribe_with_an_unsupported_transformation_is_refused(
    memory_store: MemoryStore,
) -> None:
    with running(memory_store) as bt:
        cons, col = connect(bt.port)
        cons.subscribe("/queue/obj", id="1", headers={"transformation": "jms-object-json"})
        assert col.wait(lambda: bool(col.errors))
        told = col.errors[0].headers["message"]
        assert "jms-object-json" in told and "jms-byte" in told, told
        assert col.disconnected.wait(10)
