"""A row-lock standby rides out a database that refuses connections, as ActiveMQ's
``DefaultDatabaseLocker`` does: it retries until the database answers, then takes the lock."""

from __future__ import annotations

import logging
import threading

import pytest
from sqlalchemy.engine import Engine

from mqstore.lock import RowLocker
from mqstore.schema import build_schema
from tests.broker.harness import wait_until
from tests.conftest import Databases, database_away

SCHEMA = build_schema("")


def test_a_row_lock_standby_retries_while_the_database_refuses_connections(
    engine: Engine, databases: Databases, caplog: pytest.LogCaptureFixture
) -> None:
    locker = RowLocker(engine, SCHEMA, "standby", poll_ms=50)
    stop, got, failed = threading.Event(), threading.Event(), []

    def run() -> None:
        try:
            if locker.acquire(stop):
                got.set()
        except Exception as exc:  # what the broker's start would die of
            failed.append(exc)

    waiting = threading.Thread(target=run, daemon=True)
    try:
        with (
            caplog.at_level(logging.WARNING, logger="mqstore.lock"),
            database_away(engine, databases),
        ):
            waiting.start()
            assert wait_until(
                lambda: (
                    failed
                    or any("row lock attempt failed" in r.getMessage() for r in caplog.records)
                ),
                30.0,
                0.05,
            )
            assert not failed, f"the standby gave up: {failed[0]!r}"
        assert wait_until(got.is_set, 30.0, 0.05), "the standby never took the lock"
        assert locker.is_held()
    finally:
        stop.set()
        waiting.join(10)
        locker.release()
