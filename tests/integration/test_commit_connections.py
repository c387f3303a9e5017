"""The store's kept autocommit connections for its one-statement commits."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DataError, IntegrityError

from mqstore.db import libpq_dsn
from mqstore.errors import (
    CommitOutcomeUnknownError,
    DuplicateMessageError,
)
from mqstore.store import PostgresStore
from mqstore.store.commit_connections import CommitConnections
from tests.integration.conftest import msg

Q = "queue://orders"
PID = "SELECT pg_backend_pid()"


@pytest.fixture
def one_connection_engine(dsn: str) -> Iterator[Engine]:
    """A pool of exactly one connection, so what the commits leave in it shows."""
    eng = sa.create_engine(dsn, pool_size=1, max_overflow=0)
    yield eng
    eng.dispose()


def _pid(conn: Connection) -> int:
    return int(conn.exec_driver_sql(PID).scalar_one())


def _kept_pid(commits: CommitConnections) -> int:
    row = commits.run(PID, {})
    assert row is not None
    return int(row[0])


def _setting(conn: Connection) -> str:
    return str(conn.exec_driver_sql("SHOW plan_cache_mode").scalar_one())


def test_statements_reuse_one_autocommit_connection_that_plans_each_execution(
    engine: Engine, dsn: str
) -> None:
    commits = CommitConnections(engine)
    assert commits.run("SHOW plan_cache_mode", {}) == ("force_custom_plan",)
    first = commits.run(PID, {})
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (n int)")
    added = "WITH a AS (INSERT INTO t VALUES (%(n)s) RETURNING n) SELECT count(*) FROM a"
    assert commits.run(added, {"n": 1}) == (1,)
    with psycopg.connect(libpq_dsn(dsn)) as other:  # committed without a COMMIT
        assert other.execute("SELECT n FROM t").fetchall() == [(1,)]
    assert commits.run(PID, {}) == first
    for n in (2, 3):
        commits.run(added, {"n": n})
    plans = "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = %(s)s"
    assert commits.run(plans, {"s": added.replace("%(n)s", "$1")}) == (0, 3)  # parsed once
    commits.close()


def test_driver_errors_come_out_as_sqlalchemy_errors_without_parameters(engine: Engine) -> None:
    commits = CommitConnections(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (n int PRIMARY KEY, body bytea)")
    add = "WITH a AS (INSERT INTO t VALUES (%(n)s, %(body)s) RETURNING n) SELECT count(*) FROM a"
    commits.run(add, {"n": 1, "body": b"secret body"})
    with pytest.raises(IntegrityError) as failed:
        commits.run(add, {"n": 1, "body": b"secret body"})
    assert "duplicate key" in str(failed.value) and "secret" not in str(failed.value)
    with pytest.raises(DataError):
        commits.run("SELECT 1/0", {})
    assert commits.run("SELECT count(*) FROM t", {}) == (1,)  # and the next one runs
    commits.close()


def test_a_failed_statement_gives_its_connection_back_reset(one_connection_engine: Engine) -> None:
    commits = CommitConnections(one_connection_engine)
    first = _kept_pid(commits)
    with pytest.raises(DataError):
        commits.run("SELECT 1/0", {})
    with one_connection_engine.connect() as pooled:  # the pool has it back, reset
        assert _pid(pooled) == first
        assert _setting(pooled) == "auto"
    assert commits.run("SHOW plan_cache_mode", {}) == ("force_custom_plan",)
    commits.close()


def test_close_gives_connections_back_as_the_pool_hands_them_out(
    one_connection_engine: Engine,
) -> None:
    commits = CommitConnections(one_connection_engine)
    kept = _kept_pid(commits)
    commits.close()
    with one_connection_engine.connect() as pooled:
        assert _pid(pooled) == kept
        assert _setting(pooled) == "auto"
        assert pooled.connection.driver_connection.prepare_threshold is None  # type: ignore[union-attr]
        pooled.exec_driver_sql("CREATE TABLE t (n int)")
        pooled.rollback()  # a transaction again: nothing was committed
        assert pooled.exec_driver_sql("SELECT to_regclass('t')").scalar_one() is None


def _drop_sessions(dsn: str) -> None:
    """What a database restart does to every connection open on it."""
    with psycopg.connect(libpq_dsn(dsn), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def test_a_dropped_pooled_connection_costs_no_commit(store: PostgresStore, dsn: str) -> None:
    # start() left its connections in the pool; the first commit takes one of them.
    _drop_sessions(dsn)
    store.add([msg(Q, 1)])
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [1]


def test_a_lost_kept_connection_fails_one_commit_then_the_store_reconnects(
    store: PostgresStore, dsn: str
) -> None:
    store.add([msg(Q, 1)])
    _drop_sessions(dsn)
    # The commit may have reached the database before the connection died: it is reported
    # as unknown, not retried.
    with pytest.raises(CommitOutcomeUnknownError, match="may or may not have been committed"):
        store.add([msg(Q, 2)])
    store.add([msg(Q, 3)])
    with pytest.raises(DuplicateMessageError):
        store.add([msg(Q, 3)])
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [1, 3]
