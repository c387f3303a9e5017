"""The in-memory window of stored messages is bounded by bytes as well as by count: a
backlog of large messages (a queue's or a durable subscription's) is paged in a little at a
time, delivered completely and in order, and messages sent while the window is full come
through a later page."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from mqstore.app import broker_config
from mqstore.broker import BrokerConfig
from mqstore.broker.durable import DurableSub
from mqstore.broker.messages import BrokerMessage
from mqstore.broker.queues import Queue
from mqstore.broker.subscriptions import MESSAGE_OVERHEAD
from mqstore.errors import ConfigError
from mqstore.settings import load_settings
from mqstore.store import Store
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, Collector, connect

BUDGET = 256 * 1024
SIZE = 64 * 1024
CFG = dataclasses.replace(FAST, memory_window_bytes=BUDGET)
P = {"persistent": "true"}
DUR = {"activemq.subscriptionName": "dur"}


def _cost(msg: BrokerMessage) -> int:
    return msg.size + MESSAGE_OVERHEAD


class WindowProbe:
    """The most bytes of stored messages a queue or durable subscription held waiting in
    memory, seen each time it dispatches (every message put in line is followed by one),
    and the largest single stored message."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.peak = 0
        self.largest = 0
        real_queue, real_durable = Queue._dispatch, DurableSub._dispatch

        def queue_dispatch(q: Queue) -> None:
            self._note([entry[2] for entry in q.pending])
            real_queue(q)

        def durable_dispatch(sub: DurableSub) -> None:
            self._note(list(sub.pending))
            real_durable(sub)

        monkeypatch.setattr(Queue, "_dispatch", queue_dispatch)
        monkeypatch.setattr(DurableSub, "_dispatch", durable_dispatch)

    def _note(self, pending: list[BrokerMessage]) -> None:
        costs = [_cost(m) for m in pending if m.store_id is not None]
        self.peak = max(self.peak, sum(costs))
        self.largest = max([self.largest, *costs])

    def check(self) -> None:
        """The window held at most the budget plus one message, and was used."""
        assert self.largest > 0
        assert self.peak < BUDGET + self.largest, (self.peak, BUDGET, self.largest)


def _send(bt: BrokerThread, dest: str, sizes: list[int], first: int = 0) -> None:
    """Persistent messages numbered from ``first`` (header ``n``, priority ``n % 10``), all
    stored before this returns."""
    prod, pcol = connect(bt.port)
    for i, size in enumerate(sizes, start=first):
        headers = {**P, "n": str(i), "priority": str(i % 10)}
        prod.send(dest, "x" * size, headers=headers, receipt=f"r{i}")
    assert pcol.wait(lambda: len(pcol.receipts) == len(sizes), timeout=30), pcol.errors
    prod.disconnect()


def _expected(store: Store, numbers: range) -> list[int]:
    """Delivery order: priority first in prioritized mode, else FIFO."""
    if store.prioritized:
        return sorted(numbers, key=lambda i: (-(i % 10), i))
    return list(numbers)


def _subscribe(dest: str, client_id: str | None = None) -> Callable[[BrokerThread], Any]:
    def attach(bt: BrokerThread) -> tuple[Any, Collector]:
        conn, col = connect(bt.port, client_id=client_id)
        named = DUR if client_id else {}
        headers = {"activemq.prefetchSize": "1", **named}
        conn.subscribe(dest, id="s", ack="client-individual", headers=headers)
        return conn, col

    return attach


def _consume(conn: Any, col: Collector, n: int, start: int = 0) -> list[int]:
    """A slow consumer: each message acknowledged (receipt awaited) before the next comes."""
    got: list[int] = []
    for k in range(start, start + n):
        msg = col.wait_messages(k + 1, timeout=20)[k]
        got.append(int(msg.headers["n"]))
        conn.ack(msg.headers["ack"], receipt=f"a{k}")
        assert col.wait(lambda k=k: f"a{k}" in col.receipts)
    return got


def _create_subscription(bt: BrokerThread, topic: str) -> None:
    conn, col = connect(bt.port, client_id="cid")
    conn.subscribe(topic, id="s", ack="client-individual", headers=DUR, receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    conn.disconnect()


def _stored_backlog(store: Store, monkeypatch: pytest.MonkeyPatch, topic: bool) -> None:
    """40 messages of 64 KiB stored, then the broker restarted: all paged from the store."""
    probe = WindowProbe(monkeypatch)
    bt = BrokerThread(store, CFG).start()
    try:
        dest = "/topic/big" if topic else "/queue/big"
        if topic:
            _create_subscription(bt, dest)
        _send(bt, dest, [SIZE] * 40)
        bt.restart()
        conn, col = _subscribe(dest, "cid" if topic else None)(bt)
        assert _consume(conn, col, 40) == _expected(store, range(40))
        probe.check()
        if topic:
            sub = bt.snapshot()["durable_subscriptions"][0]
            assert (sub["backlog"], sub["in_memory"], sub["in_memory_bytes"]) == (0, 0, 0)
        else:
            stats = bt.snapshot()["destinations"]["queue://big"]
            assert (stats["depth"], stats["in_memory"], stats["in_memory_bytes"]) == (0, 0, 0)
        conn.disconnect()
    finally:
        bt.close()


def test_a_stored_queue_backlog_is_paged_within_the_byte_budget(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stored_backlog(any_store, monkeypatch, topic=False)


def test_a_stored_queue_backlog_within_the_byte_budget_keeps_priority_order(
    prioritized_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stored_backlog(prioritized_store, monkeypatch, topic=False)


def test_a_durable_subscription_backlog_is_paged_within_the_byte_budget(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stored_backlog(any_store, monkeypatch, topic=True)


def test_a_durable_backlog_within_the_byte_budget_keeps_priority_order(
    prioritized_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stored_backlog(prioritized_store, monkeypatch, topic=True)


@pytest.mark.parametrize("topic", [False, True], ids=["queue", "durable"])
def test_messages_of_mixed_sizes_and_larger_than_the_budget_flow(
    any_store: Store, monkeypatch: pytest.MonkeyPatch, topic: bool
) -> None:
    """Small, large and larger-than-budget messages in turn: the page size follows them,
    and a message larger than the budget goes alone."""
    probe = WindowProbe(monkeypatch)
    sizes = [1024] * 30 + [300 * 1024] * 3 + [100] * 30 + [SIZE] * 10 + [BUDGET * 2] + [10] * 5
    bt = BrokerThread(any_store, CFG).start()
    try:
        dest = "/topic/mixed" if topic else "/queue/mixed"
        if topic:
            _create_subscription(bt, dest)
        _send(bt, dest, sizes)
        bt.restart()
        conn, col = _subscribe(dest, "cid" if topic else None)(bt)
        assert _consume(conn, col, len(sizes)) == list(range(len(sizes)))
        probe.check()
        conn.disconnect()
    finally:
        bt.close()


@pytest.mark.parametrize("topic", [False, True], ids=["queue", "durable"])
def test_messages_sent_while_the_window_is_full_are_delivered_in_order(
    any_store: Store, monkeypatch: pytest.MonkeyPatch, topic: bool
) -> None:
    """A consumer attached and stalled: the first sends fill the window, the rest arrive
    while it is full and wait in the store; then it drains everything, in order."""
    probe = WindowProbe(monkeypatch)
    bt = BrokerThread(any_store, CFG).start()
    try:
        dest = "/topic/live" if topic else "/queue/live"
        if topic:
            _create_subscription(bt, dest)
        conn, col = _subscribe(dest, "cid" if topic else None)(bt)
        send = [SIZE] * 10
        _send(bt, dest, send)  # more than fits: the window fills
        assert col.wait_messages(1)  # the one in flight (prefetch 1), not acknowledged
        _send(bt, dest, [SIZE] * 20, first=10)  # while the window is full
        got = _consume(conn, col, 15)
        _send(bt, dest, [SIZE] * 10, first=30)  # while it is being drained
        got += _consume(conn, col, 25, start=15)
        assert got == _expected(any_store, range(40))
        probe.check()
        conn.disconnect()
    finally:
        bt.close()


def test_memory_window_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert broker_config(load_settings()).memory_window_bytes == 64 << 20
    monkeypatch.setenv("MQSTORE_MEMORY_WINDOW_MB", "3")
    assert broker_config(load_settings()).memory_window_bytes == 3 << 20
    with pytest.raises(ConfigError, match="memory_window_bytes"):
        BrokerConfig(memory_window_bytes=0)


class PageReads:
    """The most MSG bytes one store page read (queue or durable subscription) returned."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.largest_read = 0
        for name in ("page", "page_subscription"):
            real = getattr(store, name)

            def read(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
                rows = _real(*args, **kwargs)
                self.largest_read = max(self.largest_read, sum(len(r.msg) for r in rows))
                return rows

            monkeypatch.setattr(store, name, read)


@pytest.mark.parametrize("topic", [False, True], ids=["queue", "durable"])
def test_a_burst_of_larger_messages_is_read_within_the_byte_budget(
    any_store: Store, monkeypatch: pytest.MonkeyPatch, topic: bool
) -> None:
    """Small messages set the page size; the 64 KiB ones behind them are not read by the
    page-full (2.5 MiB for a 256 KiB budget) but a budget's worth at a time."""
    sizes = [1024] * 40 + [SIZE] * 40
    bt = BrokerThread(any_store, CFG).start()
    try:
        dest = "/topic/burst" if topic else "/queue/burst"
        if topic:
            _create_subscription(bt, dest)
        _send(bt, dest, sizes)
        bt.restart()
        reads = PageReads(any_store, monkeypatch)
        conn, col = _subscribe(dest, "cid" if topic else None)(bt)
        assert _consume(conn, col, len(sizes)) == _expected(any_store, range(len(sizes)))
        assert 0 < reads.largest_read < BUDGET + SIZE, reads.largest_read
        conn.disconnect()
    finally:
        bt.close()
