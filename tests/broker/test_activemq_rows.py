"""Rows ActiveMQ wrote, delivered to STOMP clients: raw UTF-8 text, compressed bytes, lone
surrogates; and a row whose body is malformed goes to the DLQ instead of vanishing."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

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


def _frames_with_one_cut_short(bad: int) -> list[bytes]:
    """Three encoded text messages; the one at ``bad`` cut short, so its MSG does not decode."""
    frames = [encode(_as_message(seq, amq.TEXT_LONE)) for seq in (1, 2, 3)]
    frames[bad] = (len(frames[bad]) - 14).to_bytes(4, "big") + frames[bad][4:-10]
    return frames


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


def _dead_lettered(store: Store, bad: Message) -> Message:
    """Store ``bad`` before a good message on queue Q; a consumer gets and acks only the
    good one, and ``bad`` goes to the DLQ: the message stored there. Checks no other
    message came within 0.3 s."""
    _store(store, "queue://Q", [bad, _as_message(2, amq.STOMP_TEXT_WITH_NUL)])
    broker = BrokerThread(store, FAST).start()
    try:
        c, col = connect(broker.port)
        c.subscribe("/queue/Q", id="s", ack="client-individual")
        (good,) = col.wait_messages(1)
        assert good.body == "a\x00b"
        c.ack(good.headers["ack"], receipt="a")
        assert col.wait(lambda: "a" in col.receipts)
        assert wait_until(lambda: store.count(DLQ) == 1)
        assert store.count("queue://Q") == 0
        time.sleep(0.3)
        assert len(col.messages) == 1
        c.disconnect()
        return decode(store.page(DLQ, None, 1)[0].msg, lazy=True)
    finally:
        broker.close()


def test_malformed_body_goes_to_the_dlq(any_store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    assert _dead_lettered(any_store, _malformed(1)).content == b"not zlib"
    assert "malformed body" in caplog.text and "moved to the DLQ" in caplog.text


def test_malformed_properties_go_to_the_dlq_intact(
    any_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A message whose properties do not decode is not delivered without them: it goes to
    the DLQ with its bytes as they were stored, as a malformed body does."""
    caplog.set_level(logging.ERROR)
    bad = _as_message(1, amq.STOMP_EMOJI).replace(marshalled_properties=b"\x00\x00\x00\x05ab")
    moved = _dead_lettered(any_store, bad)
    assert moved.marshalled_properties == bad.marshalled_properties
    assert "malformed properties" in caplog.text and "moved to the DLQ" in caplog.text


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


def test_queue_browser_skips_a_row_that_does_not_decode_and_names_it(
    memory_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    frames = _frames_with_one_cut_short(1)
    memory_store.add([NewMessage("queue://Q", str(PRODUCER), i, f) for i, f in enumerate(frames)])
    bad_id = memory_store.page("queue://Q", None, 3)[1].id
    broker = BrokerThread(memory_store, FAST).start()
    try:
        c, col = connect(broker.port)
        c.subscribe("/queue/Q", id="b", headers={"browser": "true"})
        got = col.wait_messages(3)
        assert [m.body for m in got[:2]] == ["p?q", "p?q"]
        assert got[2].headers.get("browser") == "end"
        assert f"row {bad_id} of queue://Q" in caplog.text and "frame is truncated" in caplog.text
        c.disconnect()
    finally:
        broker.close()


def test_a_consumer_gets_the_rows_around_one_that_does_not_decode(
    any_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Paging names the row and leaves it in the store (not "paging failed")."""
    caplog.set_level(logging.ERROR)
    frames = _frames_with_one_cut_short(1)
    any_store.add([NewMessage("queue://Q", str(PRODUCER), i, f) for i, f in enumerate(frames)])
    bad = any_store.page("queue://Q", None, 3)[1].id
    broker = BrokerThread(any_store, FAST).start()
    try:
        c, col = connect(broker.port)
        c.subscribe("/queue/Q", id="s", ack="auto")
        assert [m.body for m in col.wait_messages(2)] == ["p?q", "p?q"]
        assert wait_until(lambda: [r.id for r in any_store.page("queue://Q", None, 3)] == [bad])
        assert f"row {bad} of queue://Q has a malformed MSG" in caplog.text
        assert "left in the store" in caplog.text and "paging" not in caplog.text
        c.disconnect()
    finally:
        broker.close()


def test_a_durable_subscriber_gets_the_rows_around_one_that_does_not_decode(
    any_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The page names the row and skips it (not "paging failed" and a pause)."""
    caplog.set_level(logging.ERROR)
    key = SubscriptionKey("topic://T", "cid-1", "sub1")
    any_store.add_subscription(key)
    frames = _frames_with_one_cut_short(1)
    any_store.add([NewMessage("topic://T", str(PRODUCER), i, f) for i, f in enumerate(frames)])
    bad = any_store.page_subscription(key, None, 3)[1].id
    broker = BrokerThread(any_store, FAST).start()
    try:
        c, col = connect(broker.port, client_id="cid-1")
        c.subscribe("/topic/T", id="d", ack="auto", headers={"activemq.subscriptionName": "sub1"})
        assert [m.body for m in col.wait_messages(2)] == ["p?q", "p?q"]
        assert f"row {bad} of topic://T has a malformed MSG" in caplog.text
        assert "left in the store, not delivered" in caplog.text and "paging" not in caplog.text
        c.disconnect()
    finally:
        broker.close()


def test_an_expired_row_that_does_not_decode_does_not_stop_expiry(
    any_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep names such a row and leaves it; the expired rows after it still go to the
    DLQ, at this sweep and the next ones."""
    caplog.set_level(logging.ERROR)
    frames = _frames_with_one_cut_short(0)
    past = 1_000_000_000_000  # 2001: expired long ago
    any_store.add(
        [
            NewMessage("queue://Q", str(PRODUCER), i, f, expiration=past)
            for i, f in enumerate(frames[:2])
        ]
    )
    [bad, good] = [r.id for r in any_store.page("queue://Q", None, 2)]
    broker = BrokerThread(any_store, FAST).start()
    try:
        assert wait_until(lambda: [r.id for r in any_store.page("queue://Q", None, 2)] == [bad])
        assert len(any_store.page(DLQ, None, 5)) == 1
        assert f"row {bad} of queue://Q" in caplog.text
        any_store.add([NewMessage("queue://Q", str(PRODUCER), 3, frames[2], expiration=past)])
        assert wait_until(lambda: len(any_store.page(DLQ, None, 5)) == 2)  # the next sweeps
    finally:
        broker.close()
    assert good not in [r.id for r in any_store.page("queue://Q", None, 5)]


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
