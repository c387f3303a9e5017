"""STOMP behaviours where mqstore answers as ActiveMQ 5.17 does.

Each test runs against mqstore's broker (in-memory store) and, as evidence of what ActiveMQ
does, against one real ActiveMQ 5.17 (KahaDB) started once for the module.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import pytest

from mqstore.broker.memory_store import MemoryStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread
from tests.interop.activemq_broker import ActiveMQBroker, ActiveMQConfig
from tests.interop.stomp_client import connect

_names = itertools.count()


@pytest.fixture(scope="module")
def real_activemq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The STOMP port of one ActiveMQ 5.17 for the whole module."""
    broker = ActiveMQBroker(ActiveMQConfig(), tmp_path_factory.mktemp("amq")).start()
    yield broker.cfg.stomp_port
    broker.stop()


@pytest.fixture
def mqstore_broker() -> Iterator[int]:
    """The STOMP port of mqstore's broker on the in-memory store."""
    store = MemoryStore()
    store.start()
    bt = BrokerThread(store, FAST).start()
    yield bt.port
    bt.close()
    store.stop()


@pytest.fixture(params=["mqstore", "activemq"])
def port(request: pytest.FixtureRequest) -> int:
    """The STOMP port of the broker under test."""
    name = "mqstore_broker" if request.param == "mqstore" else "real_activemq"
    return int(request.getfixturevalue(name))


def unique(stem: str) -> str:
    """A destination or client name no other test of the module uses."""
    return f"{stem}.{next(_names)}"


@pytest.mark.parametrize(
    "send_to, subscribe_to",
    [("{}", "/queue/{}"), ("/queue/{}", "{}"), (" {} ", "/queue/{}")],
)
def test_a_destination_without_a_prefix_is_the_queue_of_that_name(
    port: int, send_to: str, subscribe_to: str
) -> None:
    """A SEND or SUBSCRIBE to ``orders`` means ``/queue/orders``, as ActiveMQ's STOMP falls
    back to: the message is delivered with ``destination:/queue/orders``."""
    name = unique("ORDERS")
    producer, _ = connect(port)
    producer.send(send_to.format(name), "hello", headers={"receipt": "r1"})
    producer.disconnect(receipt="bye")
    consumer, inbox = connect(port)
    consumer.subscribe(subscribe_to.format(name), id="1", ack="auto")
    got = inbox.wait_for(1)
    assert (got[0].headers["destination"], got[0].body) == (f"/queue/{name}", b"hello")
    consumer.disconnect(receipt="bye")


def test_a_topic_subscriber_does_not_get_a_send_to_a_bare_name(port: int) -> None:
    """The bare name is a queue, never a topic of that name."""
    name = unique("PRICES")
    consumer, topic_inbox = connect(port)
    consumer.subscribe(f"/topic/{name}", id="t", ack="auto")
    consumer.subscribe(f"/queue/{name}", id="q", ack="auto", headers={"receipt": "subs"})
    producer, _ = connect(port)
    producer.send(name, "to the queue", headers={"receipt": "r1"})
    producer.disconnect(receipt="bye")
    got = topic_inbox.wait_for(1)
    assert [(m.headers["subscription"], m.body) for m in got] == [("q", b"to the queue")]
    consumer.disconnect(receipt="bye")


@pytest.mark.parametrize(
    "sent, stored",
    [("10", "9"), ("-1", "0"), ("265", "9"), ("200", "0"), ("-200", "9"), ("9", "9")],
)
def test_a_priority_outside_0_to_9_is_taken_as_activemq_stores_it(
    port: int, sent: str, stored: str
) -> None:
    """ActiveMQ casts ``priority`` to a Java byte and clamps it to 0..9 instead of refusing
    the SEND: ``10`` arrives as 9, ``-1`` as 0, ``200`` (byte -56) as 0."""
    name = f"/queue/{unique('PRIO')}"
    conn, inbox = connect(port)
    conn.send(name, f"p{sent}", headers={"priority": sent, "receipt": "r1"})
    conn.subscribe(name, id="1", ack="auto")
    got = inbox.wait_for(1)
    assert (got[0].body, got[0].headers["priority"]) == (f"p{sent}".encode(), stored)
    conn.disconnect(receipt="bye")


@pytest.mark.parametrize(
    "body, headers, length",
    [
        (b"text", {}, None),
        (b"", {}, None),
        (b"", {"content-length": "0"}, "0"),
        (b"a\x00b\x00\xff", {"content-length": "5"}, "5"),
    ],
    ids=["text", "empty-text", "empty-bytes", "binary-with-nuls"],
)
def test_content_length_marks_a_bytes_message_and_only_it(
    port: int, body: bytes, headers: dict[str, str], length: str | None
) -> None:
    """A MESSAGE carries ``content-length`` when it is a BytesMessage (even an empty one) and
    not when it is a TextMessage: clients such as ActiveMQ-CPP and NMS pick the JMS message
    type from it."""
    name = f"/queue/{unique('SIZED')}"
    conn, inbox = connect(port)
    conn.send(name, body, headers={**headers, "receipt": "r1"})
    conn.subscribe(name, id="1", ack="auto")
    got = inbox.wait_for(1)[0]
    assert (got.body, got.headers.get("content-length")) == (body, length)
    conn.disconnect(receipt="bye")


def test_a_text_holding_nul_still_arrives_whole(mqstore_broker: int) -> None:
    """A TextMessage whose text holds U+0000 keeps a content-length (ActiveMQ would end its
    frame at the NUL), so the client reads all of it."""
    conn, inbox = connect(mqstore_broker)
    body = b"before\x00after"
    headers = {"content-length": str(len(body)), "amq-msg-type": "text", "receipt": "r1"}
    conn.send("/queue/TEXT.NUL", body, headers=headers)
    conn.subscribe("/queue/TEXT.NUL", id="1", ack="auto")
    got = inbox.wait_for(1)[0]
    assert (got.body, got.headers.get("content-length")) == (body, str(len(body)))
    conn.disconnect(receipt="bye")


def test_a_durable_subscription_to_a_queue_is_refused(port: int) -> None:
    """``activemq.subscriptionName`` on a queue gets an ERROR, as ActiveMQ's "cannot durably
    subscribe to a Queue destination", not a plain queue consumer."""
    conn, inbox = connect(port, client_id=unique("cid"))
    name = f"/queue/{unique('DURQ')}"
    conn.subscribe(name, id="1", ack="auto", headers={"activemq.subscriptionName": "s"})
    with inbox.cond:
        assert inbox.cond.wait_for(lambda: inbox.errors, timeout=15)
    assert "cannot durably subscribe to a queue" in inbox.errors[0].lower()
    assert inbox.messages == []
    # ActiveMQ keeps the connection open after an ERROR; mqstore closes it, and may do so
    # between the check and the DISCONNECT.
    if conn.is_connected():
        with contextlib.suppress(OSError):
            conn.disconnect()
