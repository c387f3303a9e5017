"""The journaled store while a checkpoint waits on the database: writers are not held.

A table lock held by another session (a migration, an administrator's transaction) stands
for a database that does not answer: the checkpoint's statements wait on it, and the
journal keeps acknowledging writes until the pending window is full.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from journal.store import JournaledStore
from mqstore.errors import DatabaseUnavailableError
from tests.conftest import count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"
OURS = "ID:this-broker-"
WAIT_S = 20.0  # liveness bound: without the fix these calls never return while the lock is held


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run ``fn`` in a thread; the list gets its result or the exception it raised."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _finished(fn: Callable[[], object]) -> object:
    thread, out = _in_thread(fn)
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the write waited for the checkpoint's database work"
    assert out and not isinstance(out[0], BaseException), out
    return out[0]


def _waiting_backend(engine: Engine) -> int:
    """The PID of the session waiting on a lock in this database (the checkpoint)."""
    query = sa.text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            pid = conn.execute(query).scalar()
        if pid is not None:
            return int(pid)
        time.sleep(0.02)
    raise AssertionError("the checkpoint never reached the locked table")


@contextmanager
def _table_locked(engine: Engine) -> Iterator[Connection]:
    """Another session holds a lock that blocks writes (not reads) of ACTIVEMQ_MSGS."""
    with engine.connect() as blocker:
        blocker.execute(sa.text("LOCK TABLE activemq_msgs IN SHARE MODE"))
        try:
            yield blocker
        finally:
            blocker.rollback()


def _start_checkpoint(
    store: JournaledStore, engine: Engine
) -> tuple[threading.Thread, list[object], int]:
    thread, out = _in_thread(store.checkpoint)
    return thread, out, _waiting_backend(engine)


def _ours(store: JournaledStore, n: int) -> tuple[JournaledStore, str]:
    """``store`` and a producer of its own (no database query to admit its sends)."""
    store.new_producers(OURS)
    return store, f"{OURS}{n}:1:1"


def _rows(engine: Engine) -> list[tuple[int, int]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, msgid_seq FROM activemq_msgs ORDER BY id"))
        return [(int(r[0]), int(r[1])) for r in rows]


def test_writes_and_reads_go_on_while_a_checkpoint_waits_on_the_database(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store, producer = _ours(make_journaled(), 1)
    first = store.add([msg(Q, 1, producer=producer)])
    with _table_locked(engine):
        ckpt, result, _ = _start_checkpoint(store, engine)
        second = _finished(lambda: store.add([msg(Q, 2, producer=producer)]))
        assert _finished(lambda: store.remove(Q, first)) == 1
        assert [m.msgid_seq for m in store.page(Q, None, 10)] == [2]
        assert store.count(Q) == 1
        assert ckpt.is_alive(), "the checkpoint did not wait on the lock"
    ckpt.join(WAIT_S)
    assert result and not isinstance(result[0], BaseException), result
    # The first checkpoint wrote message 1; the removal made meanwhile deletes it now.
    assert _rows(engine) == [(first[0], 1)]
    store.checkpoint()
    assert _rows(engine) == [(second[0], 2)]  # type: ignore[index]
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [2]


def test_a_checkpoint_that_fails_while_writers_went_on_loses_nothing(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store, producer = _ours(make_journaled(), 2)
    first = store.add([msg(Q, 1, producer=producer)])
    with _table_locked(engine) as blocker:
        ckpt, result, pid = _start_checkpoint(store, engine)
        later = _finished(lambda: store.add([msg(Q, 2, producer=producer)]))
        assert _finished(lambda: store.remove(Q, first)) == 1
        blocker.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        ckpt.join(WAIT_S)
        assert result and isinstance(result[0], DatabaseUnavailableError), result
    assert count_rows(engine, "activemq_msgs") == 0
    store.checkpoint()
    assert _rows(engine) == [(later[0], 2)]  # type: ignore[index]


def test_writers_wait_for_room_when_the_window_fills_behind_a_waiting_checkpoint(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store, producer = _ours(make_journaled(max_pending_bytes=64 * 1024), 3)
    big = b"x" * 16 * 1024
    store.add([msg(Q, 1, producer=producer, body=big)])
    with _table_locked(engine):
        ckpt, _result, _ = _start_checkpoint(store, engine)
        seq = 2
        while True:  # fill the window: the journal takes writes until it is full
            thread, _out = _in_thread(
                lambda s=seq: store.add([msg(Q, s, producer=producer, body=big)])
            )
            thread.join(2.0)
            if thread.is_alive():
                break
            seq += 1
            assert seq < 10, "the pending window never filled"
        assert seq > 2, "no write went through while the checkpoint waited"
        assert ckpt.is_alive()
    thread.join(WAIT_S)
    ckpt.join(WAIT_S)
    assert not thread.is_alive(), "the held writer did not resume after the checkpoint"
    store.checkpoint()
    assert [s for _, s in _rows(engine)] == list(range(1, seq + 1))


def test_a_message_consumed_during_a_checkpoint_stays_consumed_once_it_commits(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store, producer = _ours(make_journaled(), 4)
    hour = int(time.time() * 1000) + 3_600_000
    first = store.add([msg(Q, 1, producer=producer, expiration=hour)])
    later = store.add([msg(Q, 2, producer=producer, expiration=hour)])
    with _table_locked(engine):
        ckpt, result, _ = _start_checkpoint(store, engine)
        assert _finished(lambda: store.remove(Q, first)) == 1
        # A writer still in flight when the checkpoint commits: the window is rebuilt only
        # after it, so reads and writes meanwhile see the committed rows and the window.
        in_flight = store._gate.shared()
        in_flight.__enter__()
    try:
        deadline = time.monotonic() + WAIT_S
        while [i for i, _ in _rows(engine)] != [first[0], later[0]]:  # committed
            assert time.monotonic() < deadline, "the checkpoint never committed"
            time.sleep(0.02)
        assert store.get(first[0]) is None
        assert [m.msgid_seq for m in store.page(Q, None, 10)] == [2]
        assert store.count(Q) == 1
        assert store.stats().destinations == {Q: 1}
        assert [m.id for m in store.expire(hour + 1, 10, remove=False)] == later
    finally:
        in_flight.__exit__(None, None, None)
    ckpt.join(WAIT_S)
    assert result and not isinstance(result[0], BaseException), result
    assert store.remove(Q, first) == 0  # consumed once, not twice
    store.checkpoint()
    assert _rows(engine) == [(later[0], 2)]
