"""What a producer at a reached limit gets, as ActiveMQ's ``sendFailIfNoSpace`` and
``sendFailIfNoSpaceAfterTimeout``: past ``memory_block_timeout`` (a queue's or topic's
high-water mark) or ``producer_block_timeout`` (the store usage limit) its SEND or COMMIT
is refused with an ERROR that names the limit, and nothing of it is taken; by default it
waits for room and every message arrives, in order."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import stomp
from prometheus_client import generate_latest

from mqstore.app import broker_config
from mqstore.broker import BrokerConfig
from mqstore.broker.memory_store import MemoryStore
from mqstore.errors import ConfigError
from mqstore.settings import load_settings
from mqstore.store.port import Store
from tests.broker.harness import BrokerThread, Collector, connect, running, wait_until
from tests.broker.test_topic_flow import StalledReader

P = {"persistent": "true"}
SIZE = 64 * 1024
#: Queues hold 1 MiB of non-persistent messages (16 of SIZE) before producers wait.
QUEUE = {"queue_high_water": 1 << 20, "queue_low_water": 512 * 1024}
TOPIC = {"topic_high_water": 1 << 20, "topic_low_water": 512 * 1024}


def _send_until_refused(
    conn: Any, col: Collector, dest: str, headers: dict[str, str] | None = None, most: int = 1000
) -> int:
    """Send ``n``-numbered messages one at a time, each waiting for its RECEIPT, until one
    gets an ERROR instead; its number."""
    for n in range(most):
        conn.send(dest, "x" * SIZE, headers={"n": str(n), **(headers or {})}, receipt=f"r{n}")
        assert col.wait(lambda n=n: f"r{n}" in col.receipts or bool(col.errors), 30)
        if col.errors:
            return n
    raise AssertionError(f"{most} messages to {dest} were all taken")


def _error(col: Collector, receipt: str) -> str:
    """The one ERROR ``col`` got, answering ``receipt``: its message."""
    assert col.wait(lambda: bool(col.errors), 30), "no ERROR came"
    (error,) = col.errors
    assert error.headers["receipt-id"] == receipt
    message: str = error.headers["message"]
    return message


def _error_receipt(col: Collector) -> int:
    """The number of the SEND an ERROR answered."""
    assert col.wait(lambda: bool(col.errors), 30), "no ERROR came"
    return int(col.errors[0].headers["receipt-id"][1:])


def _dest(bt: BrokerThread, container: str) -> dict[str, Any]:
    stats: dict[str, Any] = bt.snapshot()["destinations"].get(container, {})
    return stats


def _numbers(messages: list[Any]) -> list[int]:
    return [int(m.headers["n"]) for m in messages]


def _metrics(bt: BrokerThread) -> str:
    assert bt.broker is not None
    return generate_latest(bt.broker.metrics.registry).decode()


def _drain_until_marker(bt: BrokerThread, dest: str) -> list[int]:
    """What a consumer of ``dest`` gets up to a persistent marker sent after the rest (its
    ``n``: -1): every message the queue took, in order, and nothing else."""
    cons, col = connect(bt.port)
    cons.subscribe(dest, id="s", ack="auto", receipt="sub")
    assert col.wait(lambda: "sub" in col.receipts)
    marker, mcol = connect(bt.port)
    marker.send(dest, "end", headers={"n": "-1", **P}, receipt="end")
    assert mcol.wait(lambda: "end" in mcol.receipts)
    assert col.wait(lambda: any(m.body == "end" for m in col.messages), 60)
    numbers = _numbers(col.messages)
    for conn in (cons, marker):
        conn.disconnect()
    return numbers


def _taken(bt: BrokerThread, dest: str) -> bool:
    """Whether a marker (``n``: -1) sent to ``dest`` on a new connection was taken (RECEIPT),
    not refused (ERROR)."""
    marker, col = connect(bt.port)
    marker.send(dest, "end", headers={"n": "-1"}, receipt="end")
    assert col.wait(lambda: "end" in col.receipts or bool(col.errors), 30)
    if col.errors:
        return False
    marker.disconnect()
    return True


class Pipeliner(threading.Thread):
    """A stomp.py producer of ``count`` messages (header ``n``), each with a receipt it does
    not wait for: sends pipeline until TCP pushes back (or the broker closes)."""

    def __init__(self, port: int, dest: str, count: int, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.conn, self.col = connect(port)
        self.dest, self.count, self.headers = dest, count, headers
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for n in range(self.count):
                self.conn.send(self.dest, "x" * SIZE, headers={"n": str(n), **self.headers},
                               receipt=f"r{n}")  # fmt: skip
        except (stomp.exception.NotConnectedException, OSError):
            pass  # refused: the broker closed the connection
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    memory = MemoryStore()
    memory.start()
    yield memory
    memory.stop()


def test_a_producer_to_a_full_queue_is_refused_after_the_timeout_and_nothing_is_taken(
    store: MemoryStore,
) -> None:
    with running(store, memory_block_timeout=0.5, **QUEUE) as bt:
        prod, pcol = connect(bt.port)
        refused = _send_until_refused(prod, pcol, "/queue/full")
        message = _error(pcol, f"r{refused}")
        assert message.startswith("SEND to queue://full refused after waiting 0.5 s")
        assert "queue_high_water (1048576 bytes" in message
        assert pcol.receipts == [f"r{n}" for n in range(refused)]

        stats = _dest(bt, "queue://full")
        assert stats["enqueued"] == refused and stats["refused_sends"] == 1
        assert stats["blocked_producers"] == 0
        assert 'mqstore_queue_refused_sends_total{destination="queue://full"} 1.0' in _metrics(bt)
        assert _drain_until_marker(bt, "/queue/full") == [*range(refused), -1]


def test_fail_at_once_refuses_the_first_send_past_the_mark_after_the_receipts_before_it(
    store: MemoryStore,
) -> None:
    with running(store, memory_block_timeout=0, **QUEUE) as bt:
        producer = Pipeliner(bt.port, "/queue/burst", 100, {})
        producer.start()
        refused = _error_receipt(producer.col)
        message = _error(producer.col, f"r{refused}")
        assert message.startswith("SEND to queue://burst refused at once")
        assert "queue://burst is full" in message and "MQSTORE_QUEUE_HIGH_WATER_MB" in message
        # The SENDs before it were answered first; those after it were not acted on.
        assert producer.col.receipts == [f"r{n}" for n in range(refused)]
        producer.join(30)
        assert producer.error is None
        assert _dest(bt, "queue://burst")["enqueued"] == refused

        assert _drain_until_marker(bt, "/queue/burst") == [*range(refused), -1]
        assert wait_until(lambda: _dest(bt, "queue://burst")["non_persistent_bytes"] == 0)
        again, acol = connect(bt.port)  # room again: a SEND is taken
        again.send("/queue/burst", "more", receipt="more")
        assert acol.wait(lambda: "more" in acol.receipts or bool(acol.errors))
        assert acol.errors == [] and _dest(bt, "queue://burst")["refused_sends"] == 1
        again.disconnect()


@pytest.mark.parametrize("timeout", [0, 0.5])
def test_a_producer_to_a_topic_with_a_stalled_subscriber_is_refused(
    store: MemoryStore, timeout: float
) -> None:
    with running(store, memory_block_timeout=timeout, **TOPIC) as bt:
        reader = StalledReader(bt.port)
        reader.subscribe("/topic/ticks")
        prod, pcol = connect(bt.port)
        refused = _send_until_refused(prod, pcol, "/topic/ticks")
        message = _error(pcol, f"r{refused}")
        waited = "at once" if timeout == 0 else "after waiting 0.5 s"
        assert message.startswith(f"SEND to topic://ticks refused {waited}")
        assert "topic://ticks is full" in message
        assert "topic_high_water (1048576 bytes, MQSTORE_TOPIC_HIGH_WATER_MB)" in message
        assert _dest(bt, "topic://ticks")["refused_sends"] == 1
        assert 'mqstore_topic_refused_sends_total{destination="topic://ticks"} 1.0' in _metrics(bt)

        assert reader.numbers(until=refused - 1) == list(range(refused))
        while not _taken(bt, "/topic/ticks"):  # the reader caught up: room comes
            pass
        assert reader.numbers(until=-1) == [-1]  # the refused message never came


def test_a_persistent_producer_at_the_store_limit_is_refused_at_once_and_nothing_is_stored(
    any_store: Store,
) -> None:
    with running(any_store, store_usage_limit=4000, producer_block_timeout=0) as bt:
        conn, col = connect(bt.port)
        for n in range(10):  # pipelined
            try:
                conn.send("/queue/stored", "y" * 1024, headers={"n": str(n), **P}, receipt=f"r{n}")
            except (stomp.exception.NotConnectedException, OSError):
                break  # refused: the broker closed the connection
        refused = _error_receipt(col)
        message = _error(col, f"r{refused}")
        assert message.startswith("SEND to queue://stored refused at once")
        assert "the store usage limit of 4000 bytes" in message
        assert col.receipts == [f"r{n}" for n in range(refused)]
        assert bt.snapshot()["store_usage"]["refused_sends"] == 1
        assert "mqstore_store_usage_refused_sends_total 1.0" in _metrics(bt)
        assert any_store.count("queue://stored") == refused

        cons, ccol = connect(bt.port)
        cons.subscribe("/queue/stored", id="s", ack="auto")
        assert _numbers(ccol.wait_messages(refused)) == list(range(refused))
        cons.disconnect()


def test_a_commit_refused_at_the_store_limit_rolls_the_whole_transaction_back(
    store: MemoryStore,
) -> None:
    with running(store, store_usage_limit=4000, producer_block_timeout=0.3) as bt:
        setup, scol = connect(bt.port)
        setup.send("/queue/jobs", "job", headers=P, receipt="job")
        assert scol.wait(lambda: "job" in scol.receipts)
        filled = 0
        while bt.snapshot()["store_usage"]["used"] < 4000:
            setup.send("/queue/fill", "y" * 1024, headers=P, receipt=f"f{filled}")
            assert scol.wait(lambda n=filled: f"f{n}" in scol.receipts)
            filled += 1

        worker, wcol = connect(bt.port)
        worker.subscribe("/queue/jobs", id="j", ack="client-individual")
        job = wcol.wait_messages(1)[0]
        worker.begin("t")
        worker.ack(job.headers["ack"], transaction="t")
        worker.send("/queue/fill", "result", headers=P, transaction="t")
        worker.send("/queue/np", "note", transaction="t")
        worker.commit("t", receipt="commit")
        message = _error(wcol, "commit")
        assert message.startswith("COMMIT of transaction 't' refused after waiting 0.3 s")
        assert "rolled back" in message and "the store usage limit of 4000 bytes" in message

        assert store.count("queue://fill") == filled  # its SENDs were not stored
        assert _dest(bt, "queue://np").get("enqueued", 0) == 0  # nor routed
        assert store.count("queue://jobs") == 1  # its ACK was not committed
        assert bt.snapshot()["store_usage"]["refused_sends"] == 1
        again, acol = connect(bt.port)
        again.subscribe("/queue/jobs", id="j", ack="auto")
        assert acol.wait_messages(1)[0].headers["redelivered"] == "true"
        for conn in (setup, again):
            conn.disconnect()


def test_a_commit_refused_at_a_full_queue_takes_none_of_its_sends(store: MemoryStore) -> None:
    with running(store, memory_block_timeout=0, **QUEUE) as bt:
        filler, fcol = connect(bt.port)
        refused = _send_until_refused(filler, fcol, "/queue/full")
        worker, wcol = connect(bt.port)
        worker.begin("t")
        worker.send("/queue/other", "kept?", headers=P, transaction="t")
        worker.send("/queue/full", "x", headers={"n": "99"}, transaction="t")
        worker.send("/queue/full", "x", headers={"n": "100"}, transaction="t")
        worker.commit("t", receipt="commit")
        message = _error(wcol, "commit")
        assert message.startswith("COMMIT of transaction 't' refused at once (it is rolled back")
        assert "queue://full is full" in message
        assert _dest(bt, "queue://full")["refused_sends"] == 3  # the filler's and these two
        assert store.count("queue://other") == 0
        assert _drain_until_marker(bt, "/queue/full") == [*range(refused), -1]


def test_a_commit_at_two_full_queues_waits_the_timeout_once_in_all(store: MemoryStore) -> None:
    """Two full queues in one transaction, the first drained after 1 s: the COMMIT waits
    memory_block_timeout (2 s) in all, not 2 s more at the second queue once the first has
    room, then is refused and takes none of its sends."""
    with running(store, memory_block_timeout=2.0, **QUEUE) as bt:
        for name in ("a", "b"):
            filler, fcol = connect(bt.port)
            _send_until_refused(filler, fcol, f"/queue/{name}")
        worker, wcol = connect(bt.port)
        worker.begin("t")
        for name in ("a", "b"):
            worker.send(f"/queue/{name}", "x", headers={"n": "99"}, transaction="t")
        drainer, dcol = connect(bt.port)
        started = time.monotonic()
        worker.commit("t", receipt="commit")
        time.sleep(1.0)
        drainer.subscribe("/queue/a", id="d", ack="auto")  # queue a has room from now on
        message = _error(wcol, "commit")
        waited = time.monotonic() - started
        assert message.startswith("COMMIT of transaction 't' refused after waiting 2 s")
        assert "queue://b is full" in message
        assert waited < 2.8, f"the COMMIT waited {waited:.1f} s"
        assert [_dest(bt, f"queue://{n}")["refused_sends"] for n in "ab"] == [1, 2]
        assert all(m.headers["n"] != "99" for m in dcol.messages)


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({}, id="default"),
        pytest.param({"memory_block_timeout": 120.0}, id="room-within-the-timeout"),
    ],
)
def test_by_default_a_producer_to_a_full_queue_waits_then_every_message_arrives_in_order(
    store: MemoryStore, config: dict[str, Any]
) -> None:
    count = 48  # 3 MiB: three times the high-water mark
    with running(store, **QUEUE, **config) as bt:
        producer = Pipeliner(bt.port, "/queue/wait", count, {})
        producer.start()
        assert wait_until(lambda: _dest(bt, "queue://wait").get("blocked_producers") == 1, 30)
        cons, col = connect(bt.port)
        cons.subscribe("/queue/wait", id="s", ack="auto")
        assert _numbers(col.wait_messages(count, 60)) == list(range(count))
        assert producer.col.wait(lambda: len(producer.col.receipts) == count, 60)
        assert producer.col.receipts == [f"r{n}" for n in range(count)]
        assert producer.col.errors == [] and producer.error is None
        assert _dest(bt, "queue://wait")["refused_sends"] == 0
        producer.conn.disconnect()
        cons.disconnect()


def test_a_persistent_producer_told_to_wait_for_ever_waits_then_every_message_is_stored(
    store: MemoryStore,
) -> None:
    with running(store, store_usage_limit=4000, producer_block_timeout=None) as bt:
        conn, col = connect(bt.port)
        for n in range(12):
            conn.send("/queue/later", "y" * 1024, headers={"n": str(n), **P}, receipt=f"r{n}")
        assert wait_until(lambda: bt.snapshot()["store_usage"]["blocked_producers"] == 1)
        cons, ccol = connect(bt.port)
        cons.subscribe("/queue/later", id="s", ack="auto")
        assert _numbers(ccol.wait_messages(12)) == list(range(12))
        assert col.wait(lambda: len(col.receipts) == 12)
        assert col.errors == [] and bt.snapshot()["store_usage"]["refused_sends"] == 0
        for c in (conn, cons):
            c.disconnect()


def test_settings_keep_the_waits_by_default_and_map_to_the_broker_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    defaults = broker_config(load_settings())
    assert defaults.producer_block_timeout == 30.0 and defaults.memory_block_timeout is None
    monkeypatch.setenv("MQSTORE_STORE_FULL_WAIT_MS", "-1")
    monkeypatch.setenv("MQSTORE_MEMORY_FULL_WAIT_MS", "1500")
    cfg = broker_config(load_settings())
    assert cfg.producer_block_timeout is None and cfg.memory_block_timeout == 1.5
    cfg = broker_config(load_settings(memory_full_wait_ms=0))
    assert cfg.memory_block_timeout == 0


@pytest.mark.parametrize("field", ["producer_block_timeout", "memory_block_timeout"])
@pytest.mark.parametrize("value", [-1, -0.5, float("nan"), float("inf")])
def test_bad_waits_in_the_broker_config_are_refused_clearly(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"^{field} .* must be None .* 0 .* seconds"):
        dataclasses.replace(BrokerConfig(), **{field: value})


@pytest.mark.parametrize("name", ["STORE_FULL_WAIT_MS", "MEMORY_FULL_WAIT_MS"])
def test_bad_waits_in_the_settings_are_refused_clearly(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(f"MQSTORE_{name}", "-2")
    with pytest.raises(ConfigError, match=f"MQSTORE_{name}: .*give -1 .* 0 .* milliseconds"):
        load_settings()
