"""One memory limit for the windows of all destinations together (ActiveMQ's broker-wide
memoryUsage): backlogs of several queues and durable subscriptions, paged in at once, stay
within it but for one message each, every one is delivered in order, and the budget
returns to zero."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mqstore.broker.durable import DurableSub
from mqstore.broker.messages import BrokerMessage
from mqstore.broker.paging import window_cost
from mqstore.broker.queues import Queue
from mqstore.broker.subscriptions import MESSAGE_OVERHEAD
from mqstore.errors import ConfigError
from mqstore.store import Store
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, Collector, connect

SIZE = 64 * 1024
COST = SIZE + MESSAGE_OVERHEAD
COUNT = 12
DESTS = ["/queue/a", "/queue/b", "/topic/c", "/topic/d"]
DUR = {"activemq.subscriptionName": "dur"}


class BudgetProbe:
    """The most bytes all windows held together, and the largest message a window held,
    seen at every dispatch."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.peak = 0
        self.largest = 0
        real_queue, real_durable = Queue._dispatch, DurableSub._dispatch

        def queue_dispatch(q: Queue) -> None:
            self._note(q.broker.memory.used, [entry[2] for entry in q.pending])
            real_queue(q)

        def durable_dispatch(sub: DurableSub) -> None:
            self._note(sub.topic.broker.memory.used, list(sub.pending))
            real_durable(sub)

        monkeypatch.setattr(Queue, "_dispatch", queue_dispatch)
        monkeypatch.setattr(DurableSub, "_dispatch", durable_dispatch)

    def _note(self, used: int, pending: list[BrokerMessage]) -> None:
        self.peak = max(self.peak, used)
        self.largest = max([self.largest, *(window_cost(m) for m in pending)])


def _subscribe(bt: BrokerThread, dest: str) -> tuple[Any, Collector]:
    topic = dest.startswith("/topic/")
    conn, col = connect(bt.port, client_id=f"cid-{dest[-1]}" if topic else None)
    headers = {"activemq.prefetchSize": "1", **(DUR if topic else {})}
    conn.subscribe(dest, id="s", ack="client-individual", headers=headers, receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    return conn, col


def _fill(bt: BrokerThread) -> None:
    for dest in DESTS:
        if dest.startswith("/topic/"):
            _subscribe(bt, dest)[0].disconnect()  # the durable subscription exists
    prod, col = connect(bt.port)
    for dest in DESTS:
        for i in range(COUNT):
            prod.send(dest, "x" * SIZE, headers={"persistent": "true", "n": str(i)},
                      receipt=f"{dest}{i}")  # fmt: skip
    assert col.wait(lambda: len(col.receipts) == COUNT * len(DESTS), timeout=60), col.errors
    prod.disconnect()


@pytest.mark.parametrize("limit", [4 * COST, 1], ids=["four-messages", "one-byte"])
def test_backlogs_of_several_destinations_stay_within_one_limit(
    any_store: Store, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    probe = BudgetProbe(monkeypatch)
    cfg = dataclasses.replace(FAST, memory_window_bytes=64 << 20, memory_limit=limit)
    bt = BrokerThread(any_store, cfg).start()
    try:
        _fill(bt)
        bt.restart()  # every backlog is now paged from the store
        consumers = [_subscribe(bt, dest) for dest in DESTS]
        got: list[list[int]] = [[] for _ in DESTS]
        for k in range(COUNT):  # round robin: every window is paged in at the same time
            for (conn, col), numbers in zip(consumers, got, strict=True):
                msg = col.wait_messages(k + 1, timeout=20)[k]
                numbers.append(int(msg.headers["n"]))
                conn.ack(msg.headers["ack"], receipt=f"a{k}")
                assert col.wait(lambda c=col, k=k: f"a{k}" in c.receipts)  # type: ignore[misc]
        assert got == [list(range(COUNT))] * len(DESTS)
        assert probe.largest >= COST
        assert probe.peak <= limit + len(DESTS) * probe.largest, (probe.peak, limit)
        assert bt.snapshot()["memory"] == {"used": 0, "limit": limit}
        for conn, _ in consumers:
            conn.disconnect()
    finally:
        bt.close()


def test_a_memory_limit_below_one_byte_is_refused() -> None:
    with pytest.raises(ConfigError, match="memory_limit"):
        dataclasses.replace(FAST, memory_limit=0)
