"""The store usage of a topic's stored messages: released once they leave the store, whoever
takes them out (the subscribers' acks, the expiry sweep, the last subscription's deletion)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from mqstore.broker.memory_store import MemoryStore
from mqstore.store.model import SubscriptionKey
from mqstore.store.port import Store
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, HeldCommit, connect, wait_until

P = {"persistent": "true"}
DUR = {"activemq.subscriptionName": "dur"}
BODY = "x" * 1000


def _offline_subscription(bt: BrokerThread, topic: str) -> None:
    c, col = connect(bt.port, client_id="cid")
    c.subscribe(topic, id="d", ack="client-individual", headers=DUR, receipt="s")
    assert col.wait(lambda: "s" in col.receipts)
    c.disconnect()


def test_expired_messages_of_an_offline_durable_subscription_free_the_store_usage(
    any_store: Store,
) -> None:
    cfg = dataclasses.replace(FAST, store_usage_limit=3000, producer_block_timeout=0)
    bt = BrokerThread(any_store, cfg).start()
    try:
        _offline_subscription(bt, "/topic/ttl")
        prod, pcol = connect(bt.port)
        expires = str(int(time.time() * 1000) + 300)
        for i in range(3):  # 3000 bytes: the store usage limit is reached
            prod.send("/topic/ttl", BODY, headers={**P, "expires": expires}, receipt=f"r{i}")
        assert pcol.wait(lambda: len(pcol.receipts) == 3), pcol.errors
        prod.disconnect()
        key = SubscriptionKey("topic://ttl", "cid", "dur")
        assert wait_until(lambda: any_store.pending_count(key) == 0)  # the sweep removed them
        assert wait_until(lambda: bt.snapshot()["store_usage"]["used"] == 0), bt.snapshot()[
            "store_usage"
        ]
        prod, pcol = connect(bt.port)
        prod.send("/topic/ttl", BODY, headers=P, receipt="after")
        assert pcol.wait(lambda: "after" in pcol.receipts or bool(pcol.errors))
        assert not pcol.errors, pcol.errors[0].headers["message"]
        prod.disconnect()
    finally:
        bt.close()


def test_a_message_stored_as_the_last_subscription_is_deleted_frees_the_store_usage(
    memory_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = HeldCommit(
        memory_store, monkeypatch, lambda b: any(m.container == "topic://gone" for m in b.adds)
    )
    commits.armed = True
    hold, held = commits.hold, commits.held
    bt = BrokerThread(memory_store, FAST).start()
    try:
        _offline_subscription(bt, "/topic/gone")
        prod, pcol = connect(bt.port)
        prod.send("/topic/gone", BODY, headers=P, receipt="r")  # stored: a durable exists
        assert held.wait(10)
        c, col = connect(bt.port, client_id="cid")
        c.unsubscribe("d", headers={**DUR, "destination": "/topic/gone"}, receipt="u")
        assert col.wait(lambda: "u" in col.receipts)  # the last subscription is deleted
        hold.set()
        assert pcol.wait(lambda: "r" in pcol.receipts)
        assert wait_until(lambda: bt.snapshot()["store_usage"]["used"] == 0), bt.snapshot()[
            "store_usage"
        ]
        c.disconnect()
        prod.disconnect()
    finally:
        hold.set()
        bt.close()
