"""Concurrent writers and readers of one PostgresStore: a page never skips a message whose
commit is still under way, and expiry reports only what it removed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from mqstore.db import libpq_dsn
from mqstore.store import Batch, PostgresStore, StoredMessage, SubscriptionKey, Xid
from tests.integration.conftest import msg

Q = "queue://orders"


def _read_all(store: PostgresStore, first: list[StoredMessage]) -> list[int | None]:
    later = store.page(Q, first[-1].cursor if first else None, 100)
    return [m.msgid_seq for m in first + later]


def _paused(target: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """Make ``target.name`` stop on its first call until released; (paused, release)."""
    paused, release = threading.Event(), threading.Event()
    real = getattr(target, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not paused.is_set():
            paused.set()
            assert release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapper)
    return paused, release


def test_a_page_stops_below_an_add_still_being_committed(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    paused, release = _paused(store, "_write_batch", monkeypatch)
    slow = threading.Thread(target=store.add, args=([msg(Q, 1)],))
    slow.start()
    assert paused.wait(5)  # ID reserved, not committed
    store.add([msg(Q, 2)])  # a later ID, committed first
    first = store.page(Q, None, 100)
    assert first == []  # a cursor past ID 2 would never come back for ID 1
    release.set()
    slow.join()
    assert _read_all(store, first) == [1, 2]


def _adds_race_the_page(
    store: PostgresStore, container: str, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], None]:
    """Once a page has taken its ID bound: an add to ``container`` reserves ID n, and one of
    ID n + 1 commits, both before the page's query reads the table; returns the release
    of ID n's commit."""
    paused, release = _paused(store, "_write_batch", monkeypatch)
    slow = threading.Thread(target=store.add, args=([msg(container, 1)],))
    real_bound = store.bound

    def bound_then_adds() -> int:
        bound = real_bound()
        if not paused.is_set():
            slow.start()
            assert paused.wait(5)  # ID n reserved, its commit under way
            store.add([msg(container, 2)])  # ID n + 1, committed first
        return bound

    monkeypatch.setattr(store, "bound", bound_then_adds)

    def finish() -> None:
        release.set()
        slow.join()

    return finish


def test_a_page_stops_below_ids_reserved_after_it_took_its_bound(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    finish = _adds_race_the_page(store, Q, monkeypatch)
    first = store.page(Q, None, 100)
    finish()
    assert _read_all(store, first) == [1, 2]


def test_a_durable_page_stops_below_ids_reserved_after_it_took_its_bound(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = SubscriptionKey("topic://prices", "client-1", "sub-a")
    store.add_subscription(key)
    finish = _adds_race_the_page(store, key.container, monkeypatch)
    first = store.page_subscription(key, None, 100)
    finish()
    later = store.page_subscription(key, first[-1].cursor if first else None, 100)
    assert [m.msgid_seq for m in first + later] == [1, 2]


def test_an_xa_commit_holds_pages_below_the_ids_it_gives(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    xid = Xid(1, b"g1", b"b1")
    store.xa_prepare(xid, Batch(adds=[msg(Q, 1)]))
    paused, release = _paused(store, "apply_acks", monkeypatch)  # after the adds' new IDs
    committing = threading.Thread(target=store.xa_commit, args=(xid,))
    committing.start()
    assert paused.wait(5)
    store.add([msg(Q, 2)])
    first = store.page(Q, None, 100)
    release.set()
    committing.join()
    assert sorted(_read_all(store, first)) == [1, 2]  # type: ignore[type-var]


def test_expiry_returns_only_the_messages_it_removed(store: PostgresStore, dsn: str) -> None:
    [gone, kept] = store.add([msg(Q, 1, expiration=1), msg(Q, 2, expiration=1)])
    result: list[list[StoredMessage]] = []
    expiry = threading.Thread(
        target=lambda: result.append(store.expire(int(time.time() * 1000), 10))
    )
    with psycopg.connect(libpq_dsn(dsn)) as consumer:  # an ack of message 1 in flight
        consumer.execute("DELETE FROM activemq_msgs WHERE id = %s", (gone,))
        expiry.start()
        expiry.join(3)
    expiry.join(10)  # the ack has committed
    assert [m.id for m in result[0]] == [kept]
    with store.engine.connect() as conn:
        outcomes = conn.execute(sa.text("SELECT id, outcome FROM mqstore_history")).all()
    assert [tuple(r) for r in outcomes] == [(kept, "expired")]


def test_two_last_subscriptions_deleted_at_once_leave_no_messages_behind(
    store: PostgresStore,
) -> None:
    """Each delete ran its orphan check while the other's delete was uncommitted: each saw
    the other subscription, so neither removed the topic's messages, and with no
    subscription left no cleanup ever would."""
    topic = "topic://news"
    first, second = (SubscriptionKey(topic, "client", name) for name in ("a", "b"))
    store.add_subscription(first)
    store.add_subscription(second)
    store.add([msg(topic, 1), msg(topic, 2)])
    checked, other_done = threading.Event(), threading.Event()
    slow = threading.Thread(target=store.delete_subscription, args=(first,))

    def pause_after_orphan_check(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "NOT EXISTS" in statement and threading.current_thread() is slow:
            checked.set()
            other_done.wait(3)  # not set when the other delete waits for this one

    def delete_second() -> None:
        store.delete_subscription(second)
        other_done.set()

    other = threading.Thread(target=delete_second)
    sa.event.listen(store.engine, "after_cursor_execute", pause_after_orphan_check)
    try:
        slow.start()
        assert checked.wait(5)  # the first delete checked, not committed
        other.start()
        slow.join(10)
        other.join(10)
    finally:
        sa.event.remove(store.engine, "after_cursor_execute", pause_after_orphan_check)
    assert store.subscriptions(topic) == []
    assert store.count(topic) == 0


def test_one_subscription_created_twice_at_once_is_created_once(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both calls found no subscription; the second's INSERT then hit the first's key and
    raised SQLAlchemy's IntegrityError instead of returning the subscription."""
    key = SubscriptionKey("topic://news", "client", "sub")
    looked, real_get = threading.Barrier(2, timeout=5), store.topics.get

    def get_together(key: SubscriptionKey) -> Any:
        found = real_get(key)
        looked.wait()
        return found

    monkeypatch.setattr(store.topics, "get", get_together)
    outcomes: list[object] = []

    def add() -> None:
        try:
            outcomes.append(store.add_subscription(key))
        except Exception as exc:  # the outcome under test
            outcomes.append(exc)

    threads = [threading.Thread(target=add) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    monkeypatch.undo()
    assert outcomes == [store.get_subscription(key)] * 2
