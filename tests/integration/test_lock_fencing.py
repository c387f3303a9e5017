"""A master keeps its lock through transient trouble, and a master that lost it cannot write."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from sqlalchemy.engine import Engine

from mqstore.db import create_engine, libpq_dsn
from mqstore.errors import LockLostError
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
        assert store.add([msg(Q, 1)])
        assert not lost.is_set()
    finally:
        store.stop()
        engine.dispose()


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
