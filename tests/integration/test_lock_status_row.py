"""`mqstore lock status` and `stats` see a row-lock master, which writes nothing into the
lock row: ActiveMQ's default database locker, or mqstore's ``--lock row``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.lock import describe_lock
from mqstore.schema import build_schema
from tests.integration.conftest import lease_held

ROW_LOCKED = "held by a row-lock master"


def _mqstore(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "mqstore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _lock_states(dsn: str) -> tuple[str, str]:
    """What ``lock status`` and ``stats --json`` say of the lock."""
    status = _mqstore("lock", "status", "--dsn", dsn)
    stats = json.loads(_mqstore("stats", "--json", "--dsn", dsn))
    return status, str(stats["lock"]["state"])


@pytest.mark.parametrize("mode", ["FOR UPDATE", "FOR NO KEY UPDATE"], ids=["activemq", "mqstore"])
def test_a_master_holding_the_row_lock_is_shown_as_holding_it(
    dsn: str, engine: Engine, mode: str
) -> None:
    """While a session keeps the row locked, as ActiveMQ's ``DefaultDatabaseLocker``
    (``FOR UPDATE``) or mqstore's row locker (``FOR NO KEY UPDATE``) does for its whole
    life as master, the lock is shown as held, not free; once it ends, as free."""
    with engine.connect() as master:
        master.execute(sa.text(f"SELECT * FROM activemq_lock WHERE id = 1 {mode}"))
        status, state = _lock_states(dsn)
        assert ROW_LOCKED in status and ROW_LOCKED in state, (status, state)
    status, state = _lock_states(dsn)
    assert "free" in status and state == "free", (status, state)


def test_a_session_that_may_not_lock_rows_says_it_cannot_see_a_row_lock(dsn: str) -> None:
    """A read-only session (a standby, ``default_transaction_read_only``) cannot probe the
    row: the commands still answer, saying a row lock cannot be seen."""
    read_only = f"{dsn}?options=-cdefault_transaction_read_only%3Don"
    status, state = _lock_states(read_only)
    assert "free" in status and "cannot be seen" in status, status
    assert state.startswith("free") and "cannot be seen" in state, state


def test_describing_the_lock_leaves_the_row_free_on_a_connection_kept_open(
    engine: Engine,
) -> None:
    """``describe_lock`` probes the row with a lock it gives back at once: a program that
    keeps its connection (and transaction) open holds nothing, and a broker can take the
    lease meanwhile."""
    with engine.connect() as conn:
        _, state = describe_lock(conn, build_schema(""))
        assert state == "free"
        assert conn.execute(sa.text("SHOW lock_timeout")).scalar_one() == "0"
        with engine.connect() as broker:
            broker.execute(sa.text("SET lock_timeout = 2000"))
            broker.execute(sa.text("UPDATE activemq_lock SET broker_name = 'b' WHERE id = 1"))
            broker.rollback()


def test_a_lease_masters_write_in_flight_is_not_taken_for_a_row_lock_master(
    dsn: str, engine: Engine
) -> None:
    """A lease master's write transaction holds the row ``FOR SHARE`` (its fence) until it
    commits; one that waits on the database meanwhile is no row-lock master: the lease is
    shown as it is (here expired)."""
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE activemq_lock SET broker_name = 'leaser', time = 1"))
    with engine.connect() as writer:
        writer.execute(sa.text("SELECT * FROM activemq_lock WHERE id = 1 FOR SHARE"))
        status, state = _lock_states(dsn)
        assert ROW_LOCKED not in status and ROW_LOCKED not in state, (status, state)
        assert "leaser" in status, status


def test_a_row_lock_beside_a_live_lease_is_shown_with_it(dsn: str, engine: Engine) -> None:
    """Two lock modes on one row (a lease master, and ActiveMQ's database locker holding
    the row): both are named, not only the lease."""
    with lease_held(engine, "leaser"), engine.connect() as row_master:
        row_master.execute(sa.text("SELECT * FROM activemq_lock WHERE id = 1 FOR UPDATE"))
        status, state = _lock_states(dsn)
        for shown in (status, state):
            assert "held by leaser" in shown and ROW_LOCKED in shown, shown
            assert "two lock modes" in shown, shown
