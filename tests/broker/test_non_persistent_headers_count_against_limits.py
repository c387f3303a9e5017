"""A non-persistent message is held in memory with its headers (as properties), so the byte
limits count them, as they count a persistent message's as stored: empty-body messages with
100 KB of headers each fill ``queue_high_water``, ``max_transaction_bytes`` and a topic
subscriber's ``topic_high_water`` as their size says, not as their (empty) body says."""

from __future__ import annotations

import dataclasses
from typing import Any

from mqstore.store.postgres import PostgresStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect
from tests.broker.test_topic_flow import StalledReader

HEADERS = {f"h{i}": "x" * 1000 for i in range(100)}  # ~100 KB of headers, no body
COUNT = 30  # ~3 MB in all: three times each limit below
LIMIT = 1 << 20


def _broker(pg_store: PostgresStore, **config: Any) -> BrokerThread:
    return BrokerThread(pg_store, dataclasses.replace(FAST, **config)).start()


def _send_until_refused(conn: Any, col: Any, dest: str, count: int = COUNT, **headers: str) -> int:
    """SENDs of empty-body non-persistent messages, each waiting for its receipt; how many
    were taken before one got an ERROR (``count``: none did)."""
    for n in range(count):
        conn.send(dest, "", headers={**HEADERS, **headers}, receipt=f"r{n}")
        assert col.wait(lambda n=n: f"r{n}" in col.receipts or bool(col.errors))
        if col.errors:
            return n
    return count


def test_a_queue_counts_the_headers_of_non_persistent_messages(pg_store: PostgresStore) -> None:
    bt = _broker(
        pg_store, queue_high_water=LIMIT, queue_low_water=LIMIT // 2, memory_block_timeout=0
    )
    try:
        conn, col = connect(bt.port)
        taken = _send_until_refused(conn, col, "/queue/heavy")
        assert taken <= LIMIT // 100_000 + 1, taken
        message = col.errors[0].headers["message"]
        assert "queue_high_water" in message, message
    finally:
        bt.close()


def test_a_transaction_counts_the_headers_of_non_persistent_messages(
    pg_store: PostgresStore,
) -> None:
    bt = _broker(pg_store, max_transaction_bytes=LIMIT)
    try:
        conn, col = connect(bt.port)
        conn.begin("t1")
        taken = _send_until_refused(conn, col, "/queue/heavy-tx", transaction="t1")
        assert taken <= LIMIT // 100_000 + 1, taken
        assert "max_transaction_bytes" in col.errors[0].headers["message"]
    finally:
        bt.close()


def test_a_topic_subscriber_counts_the_headers_of_non_persistent_messages(
    pg_store: PostgresStore,
) -> None:
    """A subscriber that reads nothing: the messages waiting for it pass topic_high_water
    after about a tenth of them, and the producer (memory_block_timeout 0) is refused."""
    bt = _broker(
        pg_store, topic_high_water=LIMIT, topic_low_water=LIMIT // 2, memory_block_timeout=0,
        max_pending_bytes=64 * 1024,
    )  # fmt: skip
    try:
        reader = StalledReader(bt.port)
        reader.subscribe("/topic/heavy")
        conn, col = connect(bt.port)
        taken = _send_until_refused(conn, col, "/topic/heavy", count=100)  # ~10 MB
        assert taken < 100, taken
        assert "topic_high_water" in col.errors[0].headers["message"], col.errors
    finally:
        bt.close()
