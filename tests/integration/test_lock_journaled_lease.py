"""A journaled broker's lease as other lockers see it: ActiveMQ's lease UPDATE and
``--lock none`` never take it, however long ago it ran out; only that broker takes it back,
and it frees it only once no journal is left with writes the database lacks."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import LockError
from mqstore.lock import ExclusiveLease, LeaseLocker, NoLocker, read_lock
from mqstore.schema import build_schema

SCHEMA = build_schema("")
LEASE_MS = 400


def _exclusive(engine: Engine, name: str = "jb") -> ExclusiveLease:
    return ExclusiveLease(LeaseLocker(engine, SCHEMA, name, lease_ms=LEASE_MS, renew_ms=100))


def _killed_journaled_holder(engine: Engine) -> None:
    """A journaled broker ``jb`` that took the lease and died: its guard ended, the lease
    was neither renewed nor released, and it ran out."""
    holder = _exclusive(engine)
    assert holder.acquire(threading.Event())
    holder.lease._close_guard()  # killed: neither renewed nor released
    time.sleep(2 * LEASE_MS / 1000)


def _activemq_takes(engine: Engine, name: str) -> bool:
    """ActiveMQ's ``LeaseDatabaseLocker`` acquiring statement, as it sends it."""
    now = int(time.time() * 1000)
    with engine.begin() as conn:
        taken = conn.execute(
            sa.text(
                "UPDATE activemq_lock SET broker_name = :name, time = :until "
                "WHERE id = 1 AND (time IS NULL OR time < :now)"
            ),
            {"name": name, "until": now + 10_000, "now": now},
        )
    return taken.rowcount == 1


def test_activemqs_lease_update_never_takes_a_journaled_lease(engine: Engine) -> None:
    _killed_journaled_holder(engine)
    assert not _activemq_takes(engine, "amq")
    with engine.connect() as conn:
        status = read_lock(conn, SCHEMA)
    assert (status.broker_name, status.journaled, status.live()) == ("jb", True, True)
    assert "kept for its journal" in status.describe()


def test_only_the_journaled_broker_itself_takes_its_lease_back(engine: Engine) -> None:
    _killed_journaled_holder(engine)
    assert not LeaseLocker(engine, SCHEMA, "other", journaled=True).try_acquire()
    assert not LeaseLocker(engine, SCHEMA, "jb").try_acquire()  # the same name, no journal
    again = LeaseLocker(engine, SCHEMA, "jb", lease_ms=LEASE_MS, renew_ms=100, journaled=True)
    assert again.try_acquire()
    again.release()
    assert _activemq_takes(engine, "amq")  # released: free for anyone


def test_lock_none_refuses_to_start_beside_a_kept_journaled_lease(engine: Engine) -> None:
    _killed_journaled_holder(engine)
    with pytest.raises(LockError, match=r"keeps a local journal.*journal forget"):
        NoLocker(engine, SCHEMA, "solo").acquire(threading.Event())


def test_a_journaled_broker_keeps_its_lease_while_a_journal_is_left_unapplied(
    engine: Engine,
) -> None:
    journal = SCHEMA.journal
    with engine.begin() as conn:
        conn.execute(
            sa.insert(journal).values(
                journal_id="j-left", segment=1, position=24, broker_name="jb", updated_at=0
            )
        )
    holder = _exclusive(engine)
    assert holder.acquire(threading.Event())
    holder.release()  # its journal did not stop cleanly: kept
    assert not _activemq_takes(engine, "amq")
    with engine.begin() as conn:
        conn.execute(sa.update(journal).values(stopped_at=1))
    holder = _exclusive(engine)
    assert holder.acquire(threading.Event())
    holder.release()  # stopped cleanly: freed
    assert _activemq_takes(engine, "amq")
