"""The sessions a master keeps idle for its whole life (the row-lock master's open
transaction, the lease master's guard) outlive a role's or server's idle timeouts, which
would otherwise depose a live master every few seconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from mqstore.db import create_engine
from mqstore.lock import LeaseLocker, RowLocker
from mqstore.schema import build_schema

SCHEMA = build_schema("")
TIMEOUT_MS = 500


@pytest.fixture
def timing_out(dsn: str) -> Iterator[Engine]:
    """An engine whose sessions start with both idle timeouts at half a second, as a role
    given them with ALTER ROLE ... SET would."""
    options = (
        f"-cidle_in_transaction_session_timeout={TIMEOUT_MS} -cidle_session_timeout={TIMEOUT_MS}"
    )
    url = make_url(dsn).update_query_dict({"options": options})
    eng = create_engine(url.render_as_string(hide_password=False))
    yield eng
    eng.dispose()


def _backend_of(engine: Engine, application_name: str) -> int | None:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :name"),
            {"name": application_name},
        ).scalar()


def test_a_row_lock_master_outlives_idle_in_transaction_timeout(
    timing_out: Engine,
) -> None:
    master = RowLocker(timing_out, SCHEMA, "row-master", renew_ms=200)
    assert master.acquire(threading.Event())
    try:
        time.sleep(4 * TIMEOUT_MS / 1000)
        assert master.keep_alive(), master.lost_reason
        assert master.is_held()
    finally:
        master.release()


def test_a_lease_masters_guard_outlives_idle_session_timeout(
    timing_out: Engine, engine: Engine
) -> None:
    master = LeaseLocker(timing_out, SCHEMA, "lease-master", lease_ms=10_000, renew_ms=5_000)
    assert master.acquire(threading.Event())
    try:
        guard = master.guard_name("lease-master")
        first = _backend_of(engine, guard)
        assert first is not None
        time.sleep(4 * TIMEOUT_MS / 1000)
        assert _backend_of(engine, guard) == first  # the same session, never ended meanwhile
    finally:
        master.release()
