"""A client reconnecting while its previous connection is still closing (storing its last
sends) gets its durable subscription back, or deletes it, once that connection let go."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from mqstore.broker.memory_store import MemoryStore
from tests.broker.harness import (
    BrokerThread,
    HeldCommit,
    connect,
    read_frame,
    running,
    wait_until,
)

DUR = {"activemq.subscriptionName": "dur"}
WAITS = "waits for the previous connection"


@contextlib.contextmanager
def _previous_connection_closing(
    memory_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[BrokerThread, HeldCommit]]:
    """A broker where client ``cid``'s first connection subscribed durably (``dur`` on
    /topic/news), then sent a message whose store commit is held, and dropped: its cleanup
    waits for that send before detaching the subscriber. Release with ``held.hold.set()``."""
    commits = HeldCommit(
        memory_store, monkeypatch, lambda b: any(m.container == "queue://slow" for m in b.adds)
    )
    with running(memory_store, stop_timeout=30.0) as bt:
        old = socket.create_connection(("127.0.0.1", bt.port), timeout=10)
        old.sendall(b"CONNECT\naccept-version:1.2\nclient-id:cid\n\n\x00")
        assert read_frame(old).startswith(b"CONNECTED")
        old.sendall(
            b"SUBSCRIBE\ndestination:/topic/news\nid:d\nack:client-individual\n"
            b"activemq.subscriptionName:dur\nreceipt:s\n\n\x00"
        )
        assert b"receipt-id:s" in read_frame(old)
        commits.armed = True
        old.sendall(b"SEND\ndestination:/queue/slow\npersistent:true\n\nx\x00")
        try:
            assert commits.held.wait(10)
            old.close()
            broker = bt.broker
            assert broker is not None

            async def old_closing() -> bool:
                holder: Any = broker.client_ids.get("cid")
                return holder is not None and holder.closing

            assert wait_until(lambda: bool(bt.call(old_closing())))
            yield bt, commits
        finally:
            commits.hold.set()


def _waiting_or_refused(col: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Until the broker says the frame waits for the closing connection, or refused it."""
    assert wait_until(
        lambda: bool(col.errors) or any(WAITS in r.getMessage() for r in caplog.records)
    )
    assert not col.errors, col.errors[0].headers["message"]


def test_a_durable_subscribe_after_a_reconnect_waits_for_the_closing_previous_connection(
    memory_store: MemoryStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mqstore.broker.server")
    with _previous_connection_closing(memory_store, monkeypatch) as (bt, commits):
        # The client is back at once: its CONNECT is taken, and so is its SUBSCRIBE,
        # once the closing connection let go of the subscription.
        conn, col = connect(bt.port, client_id="cid")
        conn.subscribe("/topic/news", id="d", ack="client-individual", headers=DUR,
                       receipt="s2")  # fmt: skip
        _waiting_or_refused(col, caplog)
        commits.hold.set()
        assert col.wait(lambda: "s2" in col.receipts or bool(col.errors)), "no receipt"
        assert not col.errors, col.errors[0].headers["message"]
        assert bt.snapshot()["durable_subscriptions"][0]["active"]
        conn.disconnect()


def test_deleting_a_durable_subscription_after_a_reconnect_waits_for_the_closing_connection(
    memory_store: MemoryStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mqstore.broker.server")
    with _previous_connection_closing(memory_store, monkeypatch) as (bt, commits):
        conn, col = connect(bt.port, client_id="cid")
        conn.unsubscribe(id="x", headers={"destination": "/topic/news", **DUR}, receipt="u")
        _waiting_or_refused(col, caplog)
        commits.hold.set()
        assert col.wait(lambda: "u" in col.receipts or bool(col.errors)), "no receipt"
        assert not col.errors, col.errors[0].headers["message"]
        assert bt.snapshot()["durable_subscriptions"] == []
        conn.disconnect()
