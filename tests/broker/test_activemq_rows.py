"""Rows ActiveMQ wrote, delivered to STOMP clients: raw UTF-8 text, compressed bytes, lone
surrogates; and a row whose body is malformed goes to the DLQ instead of vanishing."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from sqlalchemy.engine import Engine

from mqstore.broker import BrokerConfig
from mqstore.openwire import Message, MessageId, ProducerId, decode, encode, text_message
from mqstore.store.model import NewMessage, SubscriptionKey
from mqstore.store.port import Store
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until
from tests.unit.openwire import activemq_quirks_data as amq

PRODUCER = ProducerId("ID:amq-1-1700000000000-1:1", 1, 1)
DLQ = BrokerConfig().dlq_for("queue://Q")


def _as_message(seq: int, frame: bytes) -> Message:
    """The frame with its own JMS message id (the fixture frames share one); the body
    bytes stay as ActiveMQ wrote them."""
    return decode(frame, lazy=True).replace(message_id=MessageId(None, PRODUCER, seq, seq))


def _store(store: Store, container: str, messages: list[Message]) -> None:
    store.add(
        [
            NewMessage(container, m.msgid_prod or "", m.msgid_seq or 0, encode(m), m.priority)
            for m in messages
        ]
    )


def _malformed(seq: int) -> Message:
    """A text whose content claims to be compressed but is not a zlib stream."""
    return _as_message(seq, amq.STOMP_EMOJI).replace(compressed=True, content=b"not zlib")


def test_stomp_client_receives_activemq_rows(any_store: Store) -> None:
    frames = [
        amq.STOMP_EMOJI,
        amq.STOMP_TEXT_WITH_NUL,
        amq.STOMP_BYTES_BRIDGE_COMPRESSED,
        amq.BYTES_EMPTY_COMPRESSED,
        amq.TEXT_LONE,
    ]
    lone_headers = text_message(
        "t", destination="queue://Q", producer_id=PRODUCER, sequence=99,
        correlation_id="c\ud800", properties={"p\udc00": "v\ud83d"},
    )  # fmt: skip
    _store(any_store, "queue://Q", [_as_message(i, f) for i, f in enumerate(frames, 1)])
    _store(any_store, "queue://Q", [lone_headers])
    broker = BrokerThread(any_store, FAST).start()
    try:
        c, col = connect(broker.port)
        c.subscribe("/queue/Q", id="s", ack="auto")
        got = col.wait_messages(6)
        assert [m.body for m in got] == [
            "hi \U0001f600 there",  # what ActiveMQ's STOMP transport sends for these rows
            "a\x00b",
            "0123456789",
            "",
            "p?q",  # a lone surrogate, as Java's String.getBytes(UTF_8) writes it
            "t",
        ]
        assert got[5].headers["correlation-id"] == "c?"
        assert got[5].headers["p?"] == "v?"
        assert wait_until(lambda: any_store.count("queue://Q") == 0)
        c.disconnect()
    finally:
        broker.close()


def test_malformed_body_goes_to_the_dlq(any_store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    _store(any_store, "queue://Q", [_malformed(1), _as_message(2, amq.STOMP_TEXT_WITH_NUL)])
    broker = BrokerThread(any_store, FAST).start()
    try:
        c, col = connect(broker.port)
        c.subscribe("/queue/Q", id="s", ack="client-individual")
        (good,) = col.wait_messages(1)
        assert good.body == "a\x00b"
        c.ack(good.headers["ack"], receipt="a")
        assert col.wait(lambda: "a" in col.receipts)
        assert wait_until(lambda: any_store.count(DLQ) == 1)
        assert any_store.count("queue://Q") == 0
        assert decode(any_store.page(DLQ, None, 1)[0].msg, lazy=True).content == b"not zlib"
        assert "malformed body" in caplog.text and "moved to the DLQ" in caplog.text
        c.disconnect()
    finally:
        broker.close()


def test_malformed_body_on_a_durable_subscription_goes_to_the_dlq(any_store: Store) -> None:
    key = SubscriptionKey("topic://T", "cid-1", "sub1")
    any_store.add_subscription(key)
    _store(any_store, "topic://T", [_malformed(1), _as_message(2, amq.STOMP_EMOJI)])
    broker = BrokerThread(any_store, FAST).start()
    try:
        c, col = connect(broker.port, client_id="cid-1")
        c.subscribe(
            "/topic/T", id="d", ack="client-individual",
            headers={"activemq.subscriptionName": "sub1"},
        )  # fmt: skip
        (good,) = col.wait_messages(1)
        assert good.body == "hi \U0001f600 there"
        c.ack(good.headers["ack"], receipt="a")
        assert col.wait(lambda: "a" in col.receipts)
        assert wait_until(lambda: any_store.pending_count(key) == 0)  # acks pass the bad one
        assert wait_until(lambda: any_store.count(DLQ) == 1)
        c.disconnect()
    finally:
        broker.close()


def test_queue_browser_skips_a_malformed_body(memory_store: Store) -> None:
    _store(memory_store, "queue://Q", [_malformed(1), _as_message(2, amq.TEXT_LONE)])
    broker = BrokerThread(memory_store, FAST).start()
    try:
        c, col = connect(broker.port)
        c.subscribe("/queue/Q", id="b", headers={"browser": "true"})
        got = col.wait_messages(2)
        assert got[0].body == "p?q"
        assert got[1].headers.get("browser") == "end"
        assert memory_store.count("queue://Q") == 2  # browsing takes nothing
        c.disconnect()
    finally:
        broker.close()


def _browse(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # a UTF-8 terminal or pipe
    return subprocess.run(
        [sys.executable, "-m", "mqstore", "browse", "Q", "--dsn", dsn, *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_mqstore_browse_shows_activemq_text(engine: Engine, dsn: str) -> None:
    from mqstore.store.postgres import PostgresStore

    store = PostgresStore(engine, cleanup_interval_s=0)
    frames = [amq.TEXT_LONE, amq.STOMP_EMOJI, amq.STOMP_BYTES_BRIDGE_COMPRESSED]
    store.start()
    try:
        _store(store, "queue://Q", [_as_message(i, f) for i, f in enumerate(frames, 1)])
    finally:
        store.stop()
    as_json = _browse(dsn, "--json")
    assert as_json.returncode == 0, as_json.stderr
    views = json.loads(as_json.stdout)
    assert [v.get("decode_error") for v in views] == [None] * 3
    assert [v["body"] for v in views] == [
        "p?q",
        "hi \U0001f600 there",
        {"hex": b"0123456789".hex()},
    ]
    table = _browse(dsn)
    assert table.returncode == 0, table.stderr
    assert "p?q" in table.stdout and "hi \U0001f600 there" in table.stdout
