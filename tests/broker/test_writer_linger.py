"""ACKs without a receipt linger for company in the store writer; however many pile up behind
a slow commit, every one of them is committed without waiting for more work to come."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import pytest

from mqstore.broker.memory_store import MemoryStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, HeldCommit, connect, wait_until

P = {"persistent": "true"}


def _acked_behind_a_held_commit(
    bt: BrokerThread, commits: HeldCommit, queue: str, count: int
) -> tuple[Any, Any, Any, Any]:
    """``count`` stored messages on ``queue``, delivered to a client-individual consumer,
    then one more SEND whose commit ``commits`` holds, and an ACK without a receipt for
    each message, queued behind it. The producer and the consumer, each with its listener."""
    prod, pcol = connect(bt.port)
    for i in range(count):
        prod.send(f"/queue/{queue}", f"m{i}", headers=P, receipt=f"r{i}")
    assert pcol.wait(lambda: len(pcol.receipts) == count)
    cons, col = connect(bt.port)
    cons.subscribe(f"/queue/{queue}", id="s", ack="client-individual")
    msgs = col.wait_messages(count)
    commits.armed = True
    prod.send("/queue/other", "x", headers=P, receipt="slow")  # its commit is held
    assert commits.held.wait(10)
    for m in msgs:
        cons.ack(m.headers["ack"])
    return prod, pcol, cons, col


def test_acks_piled_up_past_max_batch_behind_a_slow_commit_are_all_stored(
    memory_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = HeldCommit(memory_store, monkeypatch)
    hold = commits.hold
    cfg = dataclasses.replace(FAST, max_batch=4)
    bt = BrokerThread(memory_store, cfg).start()
    try:
        # six ACKs without a receipt queue up behind the held commit
        prod, pcol, cons, _ = _acked_behind_a_held_commit(bt, commits, "w", 6)
        assert wait_until(lambda: bt.snapshot()["store_writer"]["backlog"] == 6)
        # Their linger timer was set before this sleep's: once it is over, they are due.
        bt.call(asyncio.sleep(0.05))
        hold.set()
        assert pcol.wait(lambda: "slow" in pcol.receipts)
        assert wait_until(lambda: memory_store.count("queue://w") == 0, timeout=5), (
            f"{memory_store.count('queue://w')} acked message(s) never removed from the store"
        )
        cons.disconnect()
        prod.disconnect()
    finally:
        hold.set()
        bt.close()


def test_a_disconnect_receipt_comes_once_the_acks_before_it_are_stored(
    memory_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that acks without receipts and ends with DISCONNECT + receipt (the graceful
    close STOMP describes) may take that receipt to mean its acks are done."""
    commits = HeldCommit(memory_store, monkeypatch)
    hold = commits.hold
    bt = BrokerThread(memory_store, FAST).start()
    try:
        prod, _, cons, col = _acked_behind_a_held_commit(bt, commits, "d", 3)
        threading.Timer(0.5, hold.set).start()
        cons.send_frame("DISCONNECT", {"receipt": "bye"})
        assert col.wait(lambda: "bye" in col.receipts)
        assert memory_store.count("queue://d") == 0, "DISCONNECT receipt before the acks"
        prod.disconnect()
    finally:
        hold.set()
        bt.close()
