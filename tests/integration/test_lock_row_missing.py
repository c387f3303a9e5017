"""The lock row ID=1 deleted: a lease master counts it as lost, as ActiveMQ's renewal that
updates no row does, and `mqstore db upgrade` (what the refusal says to run) puts it back."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import migrate
from mqstore.errors import LockError
from mqstore.lock import LeaseLocker, Renewal, RowLocker, read_lock
from mqstore.schema import build_schema

SCHEMA = build_schema("")


def _lease(engine: Engine, name: str) -> LeaseLocker:
    return LeaseLocker(engine, SCHEMA, name, lease_ms=30_000, renew_ms=1000, poll_ms=100)


def _delete_lock_row(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM activemq_lock"))


def test_a_lease_master_whose_lock_row_was_deleted_has_lost_the_lease(engine: Engine) -> None:
    master = _lease(engine, "m1")
    assert master.acquire(threading.Event())
    try:
        _delete_lock_row(engine)
        assert master.renew() is Renewal.LOST
        assert not master.is_held()
        assert "mqstore db upgrade" in master.lost_reason
    finally:
        master.release()


@pytest.mark.parametrize("kind", ["lease", "row"])
def test_upgrade_puts_back_a_deleted_lock_row_so_a_broker_can_start(
    engine: Engine, kind: str
) -> None:
    _delete_lock_row(engine)
    locker = _lease(engine, "m1") if kind == "lease" else RowLocker(engine, SCHEMA, "m1")
    with pytest.raises(LockError, match="run `mqstore db upgrade`"):
        locker.acquire(threading.Event())
    assert migrate.check(engine) == [
        "activemq_lock must hold exactly the row ID=1, holds [] (`mqstore db upgrade` puts it back)"
    ]
    migrate.upgrade(engine)
    assert migrate.check(engine) == []
    assert locker.acquire(threading.Event())
    try:
        if kind == "lease":
            with engine.connect() as conn:
                assert read_lock(conn, SCHEMA).broker_name == "m1"
    finally:
        locker.release()
