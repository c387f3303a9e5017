"""A checkpoint that reported a failure while its transaction was still on the server (the
reply to its COMMIT was lost) and commits later: the next checkpoint must not apply its
window a second time."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

import journal.store as journal_store
from journal.checkpoint import CheckpointResult, apply_checkpoint
from journal.format import Position
from journal.state import PendingState
from mqstore.errors import DatabaseUnavailableError
from mqstore.store import PostgresStore
from tests.conftest import count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"


class _Uncommitted:
    """The store's PostgresStore, except that its write transaction runs on ``conn`` and
    is left open: the transaction of a checkpoint whose COMMIT the server has not finished."""

    def __init__(self, pg: PostgresStore, conn: Connection) -> None:
        self._pg, self._conn = pg, conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pg, name)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        yield self._conn


def _lose_the_reply_of_the_next_checkpoint(
    monkeypatch: pytest.MonkeyPatch, conn: Connection
) -> None:
    """The next checkpoint writes everything in ``conn``'s open transaction, then fails as
    a connection lost after COMMIT was sent does."""

    def lost(
        pg: PostgresStore, window: PendingState, *, position: Position, **kw: Any
    ) -> CheckpointResult:
        monkeypatch.setattr(journal_store, "apply_checkpoint", apply_checkpoint)
        apply_checkpoint(_Uncommitted(pg, conn), window, position=position, **kw)  # type: ignore[arg-type]
        raise DatabaseUnavailableError("the connection was lost after COMMIT was sent")

    monkeypatch.setattr(journal_store, "apply_checkpoint", lost)


def _wait_until_a_session_waits_for_a_lock(engine: Engine) -> None:
    """Until another session of this database waits for a lock (a bounded wait)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    )
    done = threading.Event()
    for _ in range(6000):
        with engine.connect() as probe:
            if probe.execute(query).scalar_one():
                return
        done.wait(0.01)
    raise AssertionError("no session started waiting for the checkpoint's locks")


def _checkpoint_in_background(
    store: journal_store.JournaledStore,
) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            store.checkpoint()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, name="checkpoint-under-test")
    thread.start()
    return thread, errors


def test_a_message_consumed_after_a_checkpoint_that_commits_late_does_not_come_back(
    make_journaled: JournaledFactory,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make_journaled(history=True)
    [elided] = store.add([msg(Q, 1)])
    store.remove(Q, [elided])  # elided by the checkpoint: one history row
    [consumed] = store.add([msg(Q, 2)])
    with engine.connect() as late:
        late.begin()
        _lose_the_reply_of_the_next_checkpoint(monkeypatch, late)
        with pytest.raises(DatabaseUnavailableError):
            store.checkpoint()
        assert store.remove(Q, [consumed]) == 1  # consumed while that commit is on the server
        thread, errors = _checkpoint_in_background(store)
        _wait_until_a_session_waits_for_a_lock(engine)
        with caplog.at_level(logging.WARNING, logger="journal"):
            late.commit()  # the lost checkpoint commits after all
            thread.join()
    assert errors == []
    assert store.page(Q, None, 10) == []
    assert count_rows(engine, "activemq_msgs") == 0
    with engine.connect() as conn:
        history = conn.execute(sa.text("SELECT id FROM mqstore_history ORDER BY id")).all()
    assert history == [(elided,), (consumed,)]  # each removal recorded once
    assert "may still be committing" in caplog.text and "start-up" not in caplog.text


def test_a_checkpoint_after_one_that_commits_late_writes_each_message_once(
    make_journaled: JournaledFactory,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_journaled()
    first = store.add([msg(Q, 1)])
    with engine.connect() as late:
        late.begin()
        _lose_the_reply_of_the_next_checkpoint(monkeypatch, late)
        with pytest.raises(DatabaseUnavailableError):
            store.checkpoint()
        second = store.add([msg(Q, 2)])
        thread, errors = _checkpoint_in_background(store)
        _wait_until_a_session_waits_for_a_lock(engine)
        late.commit()
        thread.join()
    assert errors == []  # no duplicate-key failure
    assert store.checkpoint() is None  # nothing was left to apply
    with engine.connect() as conn:
        ids = conn.execute(sa.text("SELECT id FROM activemq_msgs ORDER BY id")).scalars().all()
    assert ids == first + second


def test_a_checkpoint_that_failed_without_committing_is_not_reported_as_committed(
    make_journaled: JournaledFactory,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make_journaled()  # a new journal: its row holds the position it starts at
    ids = store.add([msg(Q, 1)])

    def refused(*args: Any, **kw: Any) -> CheckpointResult:
        monkeypatch.setattr(journal_store, "apply_checkpoint", apply_checkpoint)
        raise DatabaseUnavailableError("the database refused the connection")

    monkeypatch.setattr(journal_store, "apply_checkpoint", refused)
    with pytest.raises(DatabaseUnavailableError):
        store.checkpoint()
    with caplog.at_level(logging.WARNING, logger="journal"):
        result = store.checkpoint()
    assert result is not None and result.written == 1
    assert "had been committed" not in caplog.text
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT id FROM activemq_msgs")).scalars().all() == ids
