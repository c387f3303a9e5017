"""SEND headers become what ActiveMQ's STOMP transport makes of them."""

from __future__ import annotations

import pytest

from mqstore import openwire
from mqstore.openwire import MessageKind
from mqstore.store.port import Store
from tests.broker.harness import BrokerThread, connect, running


def _stored(broker: BrokerThread, queue: str) -> openwire.Message:
    [row] = broker.store.page(queue, None, 10)  # the row a JMS reader of the database sees
    return openwire.decode(row.msg)


def test_reply_to_names_any_destination_or_stays_a_property(broker: BrokerThread) -> None:
    prod, prod_col = connect(broker.port)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/rpc", id="1", ack="auto")
    replies = ("/queue/replies", "/temp-queue/ID:c1-1:1", "client-7-inbox")
    for n, reply in enumerate(replies):
        prod.send("/queue/rpc", "ask", headers={"reply-to": reply}, receipt=f"r{n}")
    assert prod_col.wait(lambda: len(prod_col.receipts) == 3), prod_col.errors
    assert [m.headers["reply-to"] for m in col.wait_messages(3)] == list(replies)
    prod.disconnect()
    cons.disconnect()


def test_content_type_and_amq_msg_type_reach_the_consumer(broker: BrokerThread) -> None:
    prod, _ = connect(broker.port)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/typed", id="1", ack="auto")
    prod.send("/queue/typed", '{"a": 1}', content_type="application/json")
    msg = col.wait_messages(1)[0]
    assert msg.headers["content-type"] == "application/json"
    assert msg.body == '{"a": 1}'
    prod.disconnect()
    cons.disconnect()


def test_amq_msg_type_text_stores_a_text_message(broker: BrokerThread) -> None:
    prod, _ = connect(broker.port)
    body = "héllo"
    sized = {"persistent": "true", "content-length": str(len(body.encode()))}
    # content-length alone makes a BytesMessage; amq-msg-type:text asks for a TextMessage
    prod.send("/queue/jms", body, headers={**sized, "amq-msg-type": "text"})
    prod.send("/queue/raw", body, headers=sized)
    prod.disconnect(receipt="bye")
    text = _stored(broker, "queue://jms")
    assert text.kind is MessageKind.TEXT and text.text == body
    assert text.plain_properties()["amq-msg-type"] == "text"
    assert _stored(broker, "queue://raw").kind is MessageKind.BYTES


def test_an_unknown_amq_msg_type_is_refused(broker: BrokerThread) -> None:
    prod, col = connect(broker.port)
    prod.send("/queue/x", "b", headers={"amq-msg-type": "map"})
    assert col.wait(lambda: bool(col.errors))
    assert "unsupported amq-msg-type 'map'" in col.errors[0].headers["message"]


def test_typed_properties_reach_stomp_as_activemq_prints_them(broker: BrokerThread) -> None:
    from mqstore.openwire import JFloat, JInt, encode, text_message
    from mqstore.store import NewMessage

    # as a JMS producer on ActiveMQ writes them: typed properties
    frame = encode(text_message(
        "typed", destination="queue://typed", producer_id="ID:jms-1:1:1", sequence=1,
        properties={"flag": True, "ratio": JFloat(1.1), "big": 1e7, "n": JInt(3), "none": None},
    ))  # fmt: skip
    broker.store.add([NewMessage("queue://typed", "ID:jms-1:1:1", 1, frame)])
    broker.restart()  # reads the queue as the store holds it
    cons, col = connect(broker.port)
    cons.subscribe("/queue/typed", id="1", ack="auto")
    headers = col.wait_messages(1)[0].headers
    got = {k: headers[k] for k in ("flag", "ratio", "big", "n", "none")}
    assert got == {"flag": "true", "ratio": "1.1", "big": "1.0E7", "n": "3", "none": "null"}
    cons.disconnect()


def test_jms_header_names_set_the_jms_fields_as_activemq_does(broker: BrokerThread) -> None:
    # ActiveMQ's setProperties sends these names to setters (JMS_PROPERTY_SETERS): a JMS
    # reader of the row sees them as JMSType, JMSXGroupSeq, ..., never as String properties
    prod, col = connect(broker.port)
    jms = {
        "JMSXGroupID": "g", "JMSXGroupSeq": "3", "JMSType": "order", "JMSCorrelationID": "c-9",
        "JMSPriority": "7", "JMSExpiration": "4102444800000", "JMSTimestamp": "1700000000000",
        "JMSDeliveryMode": "PERSISTENT",
    }  # fmt: skip
    prod.send("/queue/jms-fields", "x", headers={**jms, "other": "kept"}, receipt="r")
    assert col.wait(lambda: "r" in col.receipts), col.errors
    prod.disconnect()
    msg = _stored(broker, "queue://jms-fields")  # stored: JMSDeliveryMode made it persistent
    assert (msg.group_id, msg.group_sequence, msg.type, msg.correlation_id) == (
        "g", 3, "order", "c-9",
    )  # fmt: skip
    assert (msg.priority, msg.expiration, msg.timestamp) == (7, 4102444800000, 1700000000000)
    assert msg.persistent and msg.plain_properties() == {"other": "kept"}


@pytest.mark.parametrize(
    "header, value",
    [("JMSXGroupSeq", "three"), ("JMSXGroupSeq", str(1 << 31)), ("JMSDeliveryMode", "yes")],
)
def test_a_jms_header_its_setter_cannot_read_is_refused(
    memory_store: Store, header: str, value: str
) -> None:
    with running(memory_store) as broker:
        prod, col = connect(broker.port)
        prod.send("/queue/jms-bad", "x", headers={header: value})
        assert col.wait(lambda: bool(col.errors))
        assert header in col.errors[0].headers["message"]


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({"reply-to": "/queue/ "}, "reply-to 'queue:// ': a blank name"),
        ({"reply-to": "/queue/a,queue://"}, "composite part 'queue://' has no name"),
        ({"reply-to": "/topic/t?a=%"}, "not properly %-encoded"),
    ],
    ids=["blank", "empty-composite-part", "bad-escape"],
)
def test_a_reply_to_activemq_could_not_read_back_is_refused(
    memory_store: Store, headers: dict[str, str], words: str
) -> None:
    """ActiveMQ fails to load a row whose reply-to it cannot parse: refused, not stored."""
    with running(memory_store) as broker:
        prod, col = connect(broker.port)
        prod.send("/queue/replies-bad", "x", headers={"persistent": "true", **headers})
        assert col.wait(lambda: bool(col.errors))
        assert words in col.errors[0].headers["message"]
        assert memory_store.count("queue://replies-bad") == 0


def test_destination_options_name_the_same_destination_and_set_the_consumer(
    memory_store: Store,
) -> None:
    """As ActiveMQ's setPhysicalName: ``?options`` are no part of the name (a consumer of
    ``/queue/orders?consumer.prefetchSize=1`` reads queue orders, with prefetch 1) and the
    name is trimmed; the CONTAINER column holds the bare name, as ActiveMQ writes it."""
    with running(memory_store) as broker:
        prod, pcol = connect(broker.port)
        for n, dest in enumerate(["/queue/orders?foo=bar", "/queue/ orders ", "/queue/orders"]):
            prod.send(dest, f"m{n}", headers={"persistent": "true"}, receipt=f"r{n}")
        assert pcol.wait(lambda: len(pcol.receipts) == 3), pcol.errors
        assert memory_store.destinations() == ["queue://orders"]
        cons, col = connect(broker.port)
        cons.subscribe("/queue/orders?consumer.prefetchSize=1", id="1", ack="client-individual")
        [first] = col.wait_messages(1)
        assert first.headers["destination"] == "/queue/orders"
        queue = broker.snapshot()["destinations"]["queue://orders"]  # prefetch 1: one out
        assert (queue["in_flight"], queue["in_memory"]) == (1, 2) and len(col.messages) == 1
        cons.ack(first.headers["ack"])
        cons.ack(col.wait_messages(2)[1].headers["ack"])
        assert [m.body for m in col.wait_messages(3)] == ["m0", "m1", "m2"]
        prod.send("/queue/?x=1", "nameless")
        assert pcol.wait(lambda: bool(pcol.errors))
        assert "has an empty name" in pcol.errors[0].headers["message"]


@pytest.mark.parametrize(
    ("frame", "words"),
    [
        ("SEND", "is composite (a,b)"),
        ("SUBSCRIBE", "is composite (a,b)"),
        ("SEND-wildcard", "is a wildcard"),
        ("SUBSCRIBE-wildcard", "is a wildcard"),
    ],
)
def test_composite_and_wildcard_destinations_are_refused(
    memory_store: Store, frame: str, words: str
) -> None:
    """ActiveMQ fans ``a,b`` out and matches ``prices.>``; taken as one destination's name,
    a subscriber would wait for ever and ActiveMQ could never load the rows."""
    dest = "/topic/prices.>" if frame.endswith("wildcard") else "/queue/a,b"
    with running(memory_store) as broker:
        conn, col = connect(broker.port)
        if frame.startswith("SEND"):
            conn.send(dest, "x", headers={"persistent": "true"})
        else:
            conn.subscribe(dest, id="1")
        assert col.wait(lambda: bool(col.errors))
        assert words in col.errors[0].headers["message"]
        assert memory_store.destinations() == []
