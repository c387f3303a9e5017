"""Restarts rebuild exactly what was acknowledged: IDs, order and checkpoints stay consistent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from journal import AddMessage
from journal.store import JournalIdLostError
from mqstore.errors import DatabaseUnavailableError
from tests.conftest import count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"


def test_ids_after_a_replay_that_checkpointed_on_the_way_are_new(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    ids = store.add([msg(Q, i, body=b"x" * 1000) for i in range(20)])
    store.stop(checkpoint=False)  # a crash: the window is only in the journal
    # The window is over the limit now, so replay checkpoints it part by part.
    store = make_journaled(tmp_path / "j", max_pending_bytes=10_000)
    assert count_rows(engine, "activemq_msgs") == 20
    [new] = store.add([msg(Q, 1000)])
    assert new > max(ids)
    assert [m.msgid_seq for m in store.page(Q, None, 100)] == [*range(20), 1000]
    store.checkpoint()
    assert count_rows(engine, "activemq_msgs") == 21


def test_a_journal_that_lost_its_id_file_is_refused_not_replayed_twice(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    store.add([msg(Q, 1)])
    store.stop()  # checkpointed: the message is in the database and still in the log
    (tmp_path / "j" / "journal-id").unlink()
    with pytest.raises(JournalIdLostError, match="journal-id file is missing") as info:
        make_journaled(tmp_path / "j")
    assert "move the *.wal files and the file 'newest'" in str(info.value)
    assert count_rows(engine, "activemq_msgs") == 1
    for moved in [*(tmp_path / "j").glob("*.wal"), tmp_path / "j" / "newest"]:
        moved.rename(tmp_path / moved.name)
    store = make_journaled(tmp_path / "j")  # a new, empty journal
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [1]


def test_a_checkpoint_under_a_lazy_sync_policy_stores_only_a_durable_position(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j", sync_policy="never")
    store.add([msg(Q, 1)])
    assert store.journal.durable_position < store.journal.position
    store.checkpoint()
    assert store.journal.durable_position == store.journal.position


def test_records_are_applied_in_log_order_as_replay_applies_them(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    journal = store.journal
    real_append = journal.append
    add_written, purge_done = threading.Event(), threading.Event()

    def append(ops: list[Any], **kwargs: Any) -> Any:
        end = real_append(ops, **kwargs)
        if isinstance(ops[0], AddMessage):  # the adding thread is descheduled right here
            add_written.set()
            purge_done.wait(5)
        return end

    journal.append = append  # type: ignore[method-assign]
    adder = threading.Thread(target=store.add, args=([msg(Q, 1)],))
    adder.start()
    assert add_written.wait(5)
    store.purge(Q)  # journaled after the add
    purge_done.set()
    adder.join()
    journal.append = real_append  # type: ignore[method-assign]
    live = store.count(Q)
    store.stop(checkpoint=False)  # a crash
    assert make_journaled(tmp_path / "j").count(Q) == live == 0


def test_a_checkpoint_retried_after_a_lost_commit_reply_applies_nothing_twice(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    [first] = store.add([msg(Q, 1)])
    pg = store.pg
    real = pg.transaction
    calls = 0

    @contextmanager
    def reply_lost() -> Iterator[Any]:
        nonlocal calls
        calls += 1
        with real() as conn:
            yield conn
        if calls == 1:  # committed, but the connection died before the reply came back
            raise DatabaseUnavailableError("server closed the connection unexpectedly")

    pg.transaction = reply_lost  # type: ignore[method-assign]
    with pytest.raises(DatabaseUnavailableError):
        store.checkpoint()
    assert store.remove(Q, [first]) == 1  # work after the failure: now in the window
    store.add([msg(Q, 2)])
    store.checkpoint()
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [2]
    assert count_rows(engine, "activemq_msgs") == 1
    store.stop()
    assert make_journaled(tmp_path / "j").count(Q) == 1
