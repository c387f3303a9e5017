"""Draining messages a checkpoint already wrote to the database.

A consumer removes what it read: the journaled store remembers the queue rows its reads found
in the database, so those removals are journaled without asking the database again (as cheap
as the plain store's one statement, and possible on the event loop), while a removal still
counts only a message that is stored: not one a checkpoint deleted since, an XA transaction
took, or a purge emptied.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from journal.store import JournaledStore
from mqstore.store.model import Batch, Cursor, Removal, Xid
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://drain"


def checkpointed(store: JournaledStore, count: int) -> list[int]:
    """IDs of ``count`` messages of Q that are rows in the database, none in the window."""
    ids = store.add([msg(Q, i) for i in range(count)])
    store.checkpoint()
    return ids


def read_all(store: JournaledStore) -> list[int]:
    """The queue read as the broker reads it: pages of 10 after a keyset cursor."""
    out: list[int] = []
    cursor: Cursor | None = None
    while rows := store.page(Q, cursor, 10):
        out += [m.id for m in rows]
        cursor = Cursor(rows[-1].priority, rows[-1].id)
    return out


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements run on ``engine`` meanwhile, by any thread."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", note)


def db_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM activemq_msgs")).scalar_one())


def test_removing_checkpointed_messages_a_consumer_read_runs_no_statement(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store = make_journaled()
    ids = checkpointed(store, 60)
    assert read_all(store) == ids
    with statements(engine) as seen:
        removed = [store.remove(Q, ids[i : i + 3]) for i in range(0, 60, 3)]
    assert removed == [3] * 20
    assert seen == []
    assert store.count(Q) == 0 and store.page(Q, None, 10) == []
    store.checkpoint()
    assert db_rows(engine) == 0


def test_try_commit_removes_checkpointed_messages_it_read(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store = make_journaled()
    ids = checkpointed(store, 5)
    read_all(store)
    assert store.try_commit(Batch(removes=[Removal(Q, i) for i in ids])) == []
    assert store.count(Q) == 0
    store.checkpoint()
    assert db_rows(engine) == 0


def test_a_message_removed_and_checkpointed_is_not_removed_again(
    make_journaled: JournaledFactory,
) -> None:
    store = make_journaled()
    ids = checkpointed(store, 4)
    read_all(store)
    assert store.remove(Q, ids[:2]) == 2
    assert store.remove(Q, ids[:2]) == 0  # still in the window
    store.checkpoint()  # the rows are gone now
    assert store.remove(Q, ids) == 2
    assert store.remove(Q, ids) == 0
    store.checkpoint()
    assert store.remove(Q, ids) == 0


def test_a_read_message_held_by_a_prepared_removal_is_not_removed(
    make_journaled: JournaledFactory,
) -> None:
    store = make_journaled()
    ids = checkpointed(store, 2)
    read_all(store)
    xid = Xid(1, b"g", b"b")
    store.xa_prepare(xid, Batch(removes=[Removal(Q, ids[0])]))
    assert store.remove(Q, ids) == 1
    assert store.remove(Q, [ids[0]]) == 0
    store.xa_rollback(xid)  # the message is back
    assert store.remove(Q, [ids[0]]) == 1
    assert store.count(Q) == 0


def test_a_read_message_of_a_purged_queue_is_not_removed(
    make_journaled: JournaledFactory,
) -> None:
    store = make_journaled()
    ids = checkpointed(store, 3)
    read_all(store)
    assert store.purge(Q) == 3
    assert store.remove(Q, ids) == 0
    store.checkpoint()
    assert store.remove(Q, ids) == 0
    assert store.count(Q) == 0


def test_a_read_that_overlapped_a_checkpoint_does_not_bring_removed_messages_back(
    make_journaled: JournaledFactory,
) -> None:
    store = make_journaled()
    ids = checkpointed(store, 3)
    # A read that began before another consumer's removals were checkpointed hands over its
    # rows after that checkpoint deleted them.
    began = store._admission.generation()
    rows = store.page(Q, None, 10)
    assert store.remove(Q, ids) == 3
    store.checkpoint()
    store._admission.seen_in_database(rows, began)
    assert store.remove(Q, ids) == 0
