"""What ``/metrics`` shows an operator of a running broker: the store writer's queue, the
memory windows against their limit, the journal and its checkpoints (those that failed, and
when one last succeeded), dead letters by outcome, and per-destination series that can be
left out."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.request import urlopen

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import Engine

from mqstore.broker.memory_store import MemoryStore
from mqstore.errors import DatabaseUnavailableError
from mqstore.store.postgres import PostgresStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, HeldCommit, connect, wait_until
from tests.conftest import Databases, database_away

P = {"persistent": "true"}
SERVED = dataclasses.replace(FAST, metrics_port=0, cleanup_interval=0)


def _scrape(bt: BrokerThread) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample ``/metrics`` serves over HTTP, by name and labels."""
    assert bt.broker is not None and bt.broker.metrics.port
    text = urlopen(f"http://127.0.0.1:{bt.broker.metrics.port}/metrics").read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return samples[(name, ())]


def _send(port: int, dest: str, count: int, body: str = "x") -> None:
    conn, col = connect(port)
    for i in range(count):
        conn.send(dest, body, headers=P, receipt=f"r{i}")
    assert col.wait(lambda: len(col.receipts) == count), col.errors
    conn.disconnect()


@pytest.fixture
def journaled(engine: Engine, tmp_path: Path) -> Iterator[object]:
    """A journaled store that checkpoints only when told to (the test calls checkpoint())."""
    from journal.store import JournaledStore

    pg = PostgresStore(engine, cleanup_interval_s=0)
    store = JournaledStore(
        pg, tmp_path / "journal", checkpoint_interval_ms=3_600_000, shared_lock=False
    )
    store.start()
    yield store
    store.stop()


def test_metrics_count_each_checkpoint_and_show_what_waits_for_the_next(
    journaled: object,
) -> None:
    from journal.store import JournaledStore

    assert isinstance(journaled, JournaledStore)
    bt = BrokerThread(journaled, SERVED).start()
    try:
        before = _scrape(bt)
        count = _value(before, "mqstore_journal_checkpoint_duration_seconds_count")
        total = _value(before, "mqstore_journal_checkpoint_duration_seconds_sum")
        _send(bt.port, "/queue/ckpt", 3, body="y" * 1000)
        sent = _scrape(bt)
        # journaled, not yet in the database: the window holds them for the next checkpoint
        assert _value(sent, "mqstore_journal_pending_bytes") > 3000
        assert _value(sent, "mqstore_journal_pending_limit_bytes") == journaled.max_pending_bytes
        assert _value(sent, "mqstore_journal_segments") >= 1
        assert _value(sent, "mqstore_journal_bytes") > 3000
        assert _value(sent, "mqstore_journal_failed") == 0
        assert _value(sent, "mqstore_journal_checkpoint_duration_seconds_count") == count

        result = journaled.checkpoint()
        assert result is not None
        after = _scrape(bt)
        assert _value(after, "mqstore_journal_checkpoint_duration_seconds_count") == count + 1
        assert _value(after, "mqstore_journal_checkpoint_duration_seconds_sum") == pytest.approx(
            total + result.millis / 1000
        )
        assert _value(after, "mqstore_journal_last_checkpoint_duration_seconds") == pytest.approx(
            result.millis / 1000
        )
        assert _value(after, "mqstore_journal_pending_bytes") == 0
    finally:
        bt.close()


def test_metrics_count_failed_checkpoints_and_tell_when_one_last_succeeded(
    journaled: object, engine: Engine, databases: Databases
) -> None:
    from journal.store import JournaledStore

    assert isinstance(journaled, JournaledStore)
    failures = "mqstore_journal_checkpoint_failures_total"
    succeeded = "mqstore_journal_last_checkpoint_success_timestamp_seconds"
    bt = BrokerThread(journaled, SERVED).start()
    try:
        _send(bt.port, "/queue/ckpt", 1)
        assert journaled.checkpoint() is not None
        before = _scrape(bt)
        assert before[(succeeded, ())] > 0

        _send(bt.port, "/queue/ckpt", 1)
        with database_away(engine, databases), pytest.raises(DatabaseUnavailableError):
            journaled.checkpoint()
        failed = _scrape(bt)
        assert failed[(failures, ())] == before[(failures, ())] + 1
        assert failed[(succeeded, ())] == before[(succeeded, ())]
        assert _value(failed, "mqstore_journal_pending_bytes") > 0  # still to be written

        started = time.time()
        assert journaled.checkpoint() is not None  # the database is back
        applied = _scrape(bt)
        assert started <= applied[(succeeded, ())] <= time.time()
        assert applied[(failures, ())] == failed[(failures, ())]

        started = time.time()
        assert journaled.checkpoint() is None  # nothing new: the database holds it all
        idle = _scrape(bt)
        assert started <= idle[(succeeded, ())] <= time.time()
        assert idle[(failures, ())] == failed[(failures, ())]
    finally:
        bt.close()


def test_metrics_show_store_work_queued_behind_a_slow_commit(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    held = HeldCommit(store, monkeypatch)
    bt = BrokerThread(store, SERVED).start()
    try:
        assert _value(_scrape(bt), "mqstore_store_writer_backlog") == 0
        ops_before = _value(_scrape(bt), "mqstore_store_writer_ops_total")
        held.armed = True
        first, first_col = connect(bt.port)
        first.send("/queue/slow", "a", headers=P, receipt="a")
        assert held.held.wait(10)  # the first SEND's commit waits in the store
        others = [connect(bt.port) for _ in range(3)]
        for i, (conn, _col) in enumerate(others):
            conn.send("/queue/slow", f"b{i}", headers=P, receipt=f"b{i}")
        assert wait_until(lambda: _value(_scrape(bt), "mqstore_store_writer_backlog") == 3)
        held.hold.set()
        assert first_col.wait(lambda: "a" in first_col.receipts)
        for i, (_conn, col) in enumerate(others):
            assert col.wait(lambda i=i, col=col: f"b{i}" in col.receipts)
        done = _scrape(bt)
        assert _value(done, "mqstore_store_writer_backlog") == 0
        assert _value(done, "mqstore_store_writer_ops_total") == ops_before + 4
        assert _value(done, "mqstore_store_writer_batches_total") >= 2
        for conn, _col in [(first, first_col), *others]:
            conn.disconnect()
    finally:
        held.hold.set()
        bt.close()
        store.stop()


def test_metrics_show_memory_windows_against_the_memory_limit(memory_store: MemoryStore) -> None:
    cfg = dataclasses.replace(SERVED, memory_limit=10 << 20)
    bt = BrokerThread(memory_store, cfg).start()
    try:
        _send(bt.port, "/queue/held", 5, body="z" * 2000)  # no consumer: kept in its window
        samples = _scrape(bt)
        assert _value(samples, "mqstore_memory_limit_bytes") == 10 << 20
        assert _value(samples, "mqstore_memory_used_bytes") >= 5 * 2000
        assert _value(samples, "mqstore_memory_used_bytes") == bt.snapshot()["memory"]["used"]
        assert _value(samples, "mqstore_store_usage_limit_bytes") == 0
    finally:
        bt.close()


def test_per_destination_series_can_be_left_out(memory_store: MemoryStore) -> None:
    cfg = dataclasses.replace(SERVED, metrics_per_destination=False)
    bt = BrokerThread(memory_store, cfg).start()
    try:
        _send(bt.port, "/queue/a", 1)
        _send(bt.port, "/queue/b", 1)
        _send(bt.port, "/topic/t", 1)
        samples = _scrape(bt)
        labelled = [name for name, labels in samples if dict(labels).get("destination")]
        assert labelled == []
        assert samples[("mqstore_destinations", (("kind", "queue"),))] == 2
        assert samples[("mqstore_destinations", (("kind", "topic"),))] == 1
        assert ("mqstore_store_writer_backlog", ()) in samples
    finally:
        bt.close()


def test_per_destination_series_are_served_by_default(memory_store: MemoryStore) -> None:
    bt = BrokerThread(memory_store, SERVED).start()
    try:
        _send(bt.port, "/queue/a", 2)
        samples = _scrape(bt)
        assert samples[("mqstore_destination_depth", (("destination", "queue://a"),))] == 2
        assert samples[("mqstore_destinations", (("kind", "queue"),))] == 1
    finally:
        bt.close()


def _dead_letters(bt: BrokerThread) -> tuple[float, float]:
    """The dead letters ``/metrics`` counts: (dead-lettered, expired)."""
    samples = _scrape(bt)
    return (
        samples[("mqstore_dead_letters_total", (("outcome", "dead-lettered"),))],
        samples[("mqstore_dead_letters_total", (("outcome", "expired"),))],
    )


def test_metrics_count_dead_letters_by_outcome_without_per_destination_series(
    memory_store: MemoryStore,
) -> None:
    cfg = dataclasses.replace(SERVED, metrics_per_destination=False)
    bt = BrokerThread(memory_store, cfg).start()
    try:
        assert _dead_letters(bt) == (0, 0)
        conn, col = connect(bt.port)
        conn.subscribe("/queue/poison", id="1", ack="client-individual", receipt="sub")
        assert col.wait(lambda: "sub" in col.receipts)
        _send(bt.port, "/queue/poison", 1)
        conn.nack(col.wait_messages(1)[-1].headers["ack"], receipt="nack")
        assert col.wait(lambda: "nack" in col.receipts)
        assert wait_until(lambda: _dead_letters(bt) == (1, 0))
        conn.disconnect()

        prod, prod_col = connect(bt.port)
        gone = str(int(time.time() * 1000) - 1000)  # expired already: the next sweep takes it
        prod.send("/queue/stale", "old", headers={**P, "expires": gone}, receipt="sent")
        assert prod_col.wait(lambda: "sent" in prod_col.receipts)
        prod.disconnect()
        assert wait_until(lambda: _dead_letters(bt) == (1, 1))
        assert memory_store.count("queue://ActiveMQ.DLQ") == 2
    finally:
        bt.close()
