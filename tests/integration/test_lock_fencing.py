"""A master keeps its lock through transient trouble, and a master that lost it cannot write."""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.db import create_engine, libpq_dsn
from mqstore.errors import DatabaseUnavailableError, LockError, LockLostError
from mqstore.lock import LeaseLocker, RowLocker
from mqstore.statements import statements_for
from mqstore.store import PostgresStore
from tests.conftest import count_rows
from tests.integration.conftest import msg

SCHEMA = statements_for("").schema
Q = "queue://q"


def test_the_lease_keeper_survives_a_moment_without_pooled_connections(dsn: str) -> None:
    engine = create_engine(dsn, pool_size=1, pool_timeout=0.3)  # two connections in all
    lost = threading.Event()
    locker = LeaseLocker(engine, SCHEMA, "A", lease_ms=3000, renew_ms=500)
    store = PostgresStore(engine, locker=locker, cleanup_interval_s=0, on_lock_lost=lost.set)
    store.start()  # its guard session takes one of the two
    try:
        busy = engine.connect()  # a renewal finds no connection for a second
        time.sleep(1.2)
        busy.close()
        time.sleep(3.5)  # past the lease, had it not been renewed since
        assert _add_when_a_connection_is_free(store)
        assert not lost.is_set()
    finally:
        store.stop()
        engine.dispose()


def _add_when_a_connection_is_free(store: PostgresStore) -> list[int]:
    """Add one message, waiting out the moments the keeper's renewal holds the pool's one
    connection the guard leaves (the add then fails whole, writing nothing)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return store.add([msg(Q, 1)])
        except DatabaseUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_row_lock_master_whose_session_ended_cannot_commit(dsn: str, engine: Engine) -> None:
    a = PostgresStore(engine, locker=RowLocker(engine, SCHEMA, "A"), cleanup_interval_s=0)
    a.start()
    other = create_engine(dsn)
    b = PostgresStore(other, locker=RowLocker(other, SCHEMA, "B"), cleanup_interval_s=0)
    try:
        a.add([msg(Q, 1)])
        lock_conn = a.locker._conn  # type: ignore[attr-defined]
        pid = lock_conn.connection.driver_connection.info.backend_pid
        with psycopg.connect(libpq_dsn(dsn), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))  # a dropped session
        b.start()  # the row lock is free: B is master at once
        with pytest.raises(LockLostError, match="row lock"):
            a.add([msg(Q, 2)])  # a single-statement commit
        with pytest.raises(LockLostError):
            a.purge(Q)  # a multi-statement transaction
        assert b.add([msg(Q, 3)])
        assert count_rows(engine, "activemq_msgs") == 2
    finally:
        b.stop()
        a.stop()
        other.dispose()


@pytest.mark.parametrize("standby", ["mqstore", "activemq"])
def test_a_row_lock_standby_waits_for_the_write_in_flight_when_the_lock_session_ends(
    dsn: str, engine: Engine, standby: str
) -> None:
    """The master's lock session ends (killed, dropped) while one of its write transactions
    is open: a standby gets the row only once that write ended, so it never starts (and
    reads MAX(ID)) before the old master's last commit."""
    locker = RowLocker(engine, SCHEMA, "A", renew_ms=60_000)  # no renewal notices meanwhile
    a = PostgresStore(engine, locker=locker, cleanup_interval_s=0)
    a.start()
    other = create_engine(dsn)
    got, stop = threading.Event(), threading.Event()

    def take_over() -> None:
        if standby == "mqstore":
            b = RowLocker(other, SCHEMA, "B", poll_ms=100)
            if b.acquire(stop):
                got.set()
                stop.wait()
                b.release()
            return
        with psycopg.connect(libpq_dsn(dsn)) as amq:  # ActiveMQ's DefaultDatabaseLocker
            amq.execute("SELECT * FROM activemq_lock FOR UPDATE")
            got.set()
            stop.wait()

    taker = threading.Thread(target=take_over, daemon=True)
    try:
        with a.transaction() as conn:
            conn.execute(
                sa.text("INSERT INTO activemq_msgs (id, container) VALUES (1, :q)"), {"q": Q}
            )
            pid = locker._conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
            with psycopg.connect(libpq_dsn(dsn), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            taker.start()
            assert not got.wait(1.5), "a standby took the lock while the master's write was open"
        assert got.wait(10), "the standby did not take the lock once the write ended"
        assert count_rows(engine, "activemq_msgs") == 1  # committed before the takeover
        with pytest.raises(LockLostError), a.transaction():
            pass  # the fence meets the new master's lock: refused at once, never waits
        with pytest.raises(LockLostError):
            a.add([msg(Q, 2)])  # a single-statement commit
    finally:
        stop.set()
        if taker.is_alive():
            taker.join(10)
        a.stop()
        other.dispose()


def test_a_row_lock_master_whose_session_ended_stops_cleanly(dsn: str, engine: Engine) -> None:
    """Stopped before any renewal noticed that its lock session ended (a database restart, a
    killed session): nothing to release, so stop() raises nothing and the row is free."""
    locker = RowLocker(engine, SCHEMA, "A", renew_ms=60_000)
    a = PostgresStore(engine, locker=locker, cleanup_interval_s=0)
    a.start()
    pid = locker._conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
    with psycopg.connect(libpq_dsn(dsn), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    a.stop()
    b = RowLocker(engine, SCHEMA, "B", poll_ms=100)
    assert b.acquire(threading.Event())
    b.release()


def test_a_row_lock_standby_waits_for_a_single_statement_commit_in_flight(
    dsn: str, engine: Engine
) -> None:
    """As above for a commit that is one autocommitted statement (add, remove, ack): held up
    past its fence (here by another transaction's insert of its ID) when the lock session
    ends, it still commits before an ActiveMQ standby takes the row."""
    locker = RowLocker(engine, SCHEMA, "A", renew_ms=60_000)
    a = PostgresStore(engine, locker=locker, cleanup_interval_s=0)
    a.start()
    got, stop, added = threading.Event(), threading.Event(), threading.Event()

    def take_over() -> None:
        with psycopg.connect(libpq_dsn(dsn)) as amq:  # ActiveMQ's DefaultDatabaseLocker
            amq.execute("SELECT * FROM activemq_lock FOR UPDATE")
            got.set()
            stop.wait()

    def add() -> None:
        with contextlib.suppress(LockLostError):
            a.add([msg(Q, 1)])
            added.set()

    adder, taker = threading.Thread(target=add), threading.Thread(target=take_over)
    with psycopg.connect(libpq_dsn(dsn)) as blocker:
        try:
            blocker.execute(
                "INSERT INTO activemq_msgs (id, container) VALUES (%s, 'queue://b')",
                (a.next_ids(1)[0] + 1,),  # the ID the add takes next
            )
            adder.start()
            deadline = time.monotonic() + 10
            with psycopg.connect(libpq_dsn(dsn), autocommit=True) as admin:
                while not admin.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE 'WITH f AS%%'"
                ).fetchone():
                    assert time.monotonic() < deadline, "the add never reached its insert"
                    time.sleep(0.02)
                pid = locker._conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            taker.start()
            assert not got.wait(1.5), "a standby took the lock while the master's commit ran"
            blocker.rollback()
            adder.join(10)
            assert got.wait(10), "the standby did not take the lock once the commit ended"
            assert added.is_set() and count_rows(engine, "activemq_msgs") == 1
        finally:
            stop.set()
            if taker.is_alive():
                taker.join(10)
            a.stop()


def test_a_row_lock_on_a_lock_table_without_its_row_is_refused(engine: Engine) -> None:
    """Like the lease: no row ID=1 to lock is a schema to repair, never a master."""
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM activemq_lock"))
    with pytest.raises(LockError, match="no row ID=1: run `mqstore db upgrade`"):
        RowLocker(engine, SCHEMA, "A", poll_ms=100).acquire(threading.Event())
