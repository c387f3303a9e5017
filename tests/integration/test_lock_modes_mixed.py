"""Brokers sharing one lock must use one lock mode; a broker facing a master of the other
mode says so instead of taking a second mastership or waiting silently for ever:

- a row locker refuses while a live lease is held (the row lock would not keep that lease
  holder from writing);
- a journaled broker's lease refuses while a row-lock master holds the row;
- a lease standby behind a row-lock master waits, saying why, and stops when told.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from mqstore.errors import LockError
from mqstore.lock import LeaseLocker, Renewal, RowLocker
from mqstore.lock.exclusive import ExclusiveLease
from mqstore.schema import build_schema
from tests.integration.conftest import lease_held, row_lock_held

SCHEMA = build_schema("")
#: Only a guard against a hung test: each call below normally returns within a second.
HANG_GUARD_S = 30.0


def _finishes(call: Callable[[], Any]) -> Any:
    """What ``call()`` returns or raises, run in a thread that must end (a call that waits
    on the lock row for ever fails the test rather than hanging it)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), "the call was still waiting on the lock row"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.fixture
def lease_of_amq(engine: Engine) -> Iterator[LeaseLocker]:
    """Broker ``amqA`` holds the lease (long enough to outlast the test)."""
    with lease_held(engine, "amqA") as lease:
        yield lease


@pytest.fixture
def row_lock_of_amq(engine: Engine) -> Iterator[RowLocker]:
    """A row-lock master holds the lock row in its open transaction."""
    with row_lock_held(engine, "amqA") as row:
        yield row


def test_a_row_locker_refuses_while_another_broker_holds_a_live_lease(
    engine: Engine, lease_of_amq: LeaseLocker
) -> None:
    row = RowLocker(engine, SCHEMA, "mqsE", poll_ms=200)
    with pytest.raises(LockError, match=r"held by amqA for another .* ms, a lease") as refused:
        _finishes(lambda: row.acquire(threading.Event()))
    assert "same lock mode" in str(refused.value)
    assert lease_of_amq.renew() is Renewal.KEPT  # the refusal left the row unlocked


def test_a_journaled_broker_refuses_while_a_row_lock_master_holds_the_row(
    engine: Engine, row_lock_of_amq: RowLocker
) -> None:
    exclusive = ExclusiveLease(LeaseLocker(engine, SCHEMA, "mqsE", poll_ms=200))
    with pytest.raises(LockError, match="held as a row lock") as refused:
        _finishes(lambda: exclusive.acquire(threading.Event()))
    assert "same lock mode" in str(refused.value)
    assert row_lock_of_amq.renew() is Renewal.KEPT


def test_a_lease_standby_behind_a_row_lock_master_waits_and_stops_when_told(
    engine: Engine, row_lock_of_amq: RowLocker, caplog: pytest.LogCaptureFixture
) -> None:
    standby = LeaseLocker(engine, SCHEMA, "mqsE", poll_ms=200)
    stop = threading.Event()
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    try:
        assert _finishes(lambda: standby.acquire(stop)) is False
    finally:
        timer.cancel()
    assert any("held as a row lock" in r.getMessage() for r in caplog.records)
    assert row_lock_of_amq.renew() is Renewal.KEPT
