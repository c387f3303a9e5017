"""The lease guard and fence: fast takeover from a dead mqstore master, never from a live or
an ActiveMQ one, and a deposed master cannot commit."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import LockLostError
from mqstore.lock import LeaseLocker, read_lock
from mqstore.schema import build_schema
from mqstore.store import NewMessage, PostgresStore
from tests.integration.conftest import msg

SCHEMA = build_schema("")


def _locker(engine: Engine, name: str, lease_ms: int = 4000) -> LeaseLocker:
    return LeaseLocker(engine, SCHEMA, name, lease_ms=lease_ms, renew_ms=1000, poll_ms=100)


def _acquire_in_background(locker: LeaseLocker) -> tuple[threading.Event, threading.Event]:
    got, stop = threading.Event(), threading.Event()

    def run() -> None:
        if locker.acquire(stop):
            got.set()

    threading.Thread(target=run, daemon=True).start()
    return got, stop


def test_standby_takes_over_at_once_when_the_masters_session_ends(engine: Engine) -> None:
    master = _locker(engine, "m1", lease_ms=30_000)
    assert master.acquire(threading.Event())
    standby = _locker(engine, "m2", lease_ms=30_000)
    got, stop = _acquire_in_background(standby)
    assert not got.wait(1.0), "took over from a live master"
    master._close_guard()  # what PostgreSQL does when the master process dies
    assert got.wait(3.0), "did not notice the master's session ended"
    with engine.connect() as conn:
        assert read_lock(conn, SCHEMA).broker_name == "m2"
    assert not master.keep_alive()
    stop.set()
    standby.release()


def test_holder_without_a_guard_is_waited_out_like_activemq(engine: Engine) -> None:
    until = int(time.time() * 1000) + 2000
    with engine.begin() as conn:  # an ActiveMQ broker holds the lease: no guard session
        conn.execute(
            sa.text("UPDATE activemq_lock SET broker_name = 'amq', time = :t"), {"t": until}
        )
    standby = _locker(engine, "m2")
    got, stop = _acquire_in_background(standby)
    assert got.wait(6.0)
    assert time.time() * 1000 >= until, "took the lease of a (possibly live) ActiveMQ broker"
    stop.set()
    standby.release()


def test_a_restart_under_the_same_name_takes_its_own_dead_lease(engine: Engine) -> None:
    first = _locker(engine, "same", lease_ms=30_000)
    assert first.acquire(threading.Event())
    first._close_guard()  # the process died without releasing
    again = _locker(engine, "same", lease_ms=30_000)
    started = time.monotonic()
    assert again.acquire(threading.Event())
    assert time.monotonic() - started < 3
    again.release()


def test_a_deposed_master_cannot_commit(engine: Engine) -> None:
    store = PostgresStore(
        engine, locker=_locker(engine, "m1", lease_ms=30_000), cleanup_interval_s=0
    )
    store.start()
    try:
        store.add([msg("queue://q", 1)])
        with engine.begin() as conn:  # another broker took the lease
            conn.execute(sa.text("UPDATE activemq_lock SET broker_name = 'other'"))
        with pytest.raises(LockLostError, match="now belongs to 'other'"):
            store.add([msg("queue://q", 2)])  # refused at once, before any renewal
        assert store.count("queue://q") == 1
    finally:
        store.stop()


@pytest.mark.parametrize("takeover_commits", [True, False], ids=["taken", "rolled-back"])
def test_a_commit_racing_a_takeover_waits_for_it(engine: Engine, takeover_commits: bool) -> None:
    """A commit that meets a takeover in flight waits for it, then writes only if the lease
    is still its own: never beside the new master, never lost when the takeover fails."""
    store = PostgresStore(
        engine, locker=_locker(engine, "m1", lease_ms=30_000), cleanup_interval_s=0
    )
    store.start()
    outcome: list[BaseException | list[int]] = []
    try:
        with engine.connect() as thief:
            thief.execute(sa.text("UPDATE activemq_lock SET broker_name = 'm2' WHERE id = 1"))
            adder = threading.Thread(
                target=lambda: outcome.append(_add_or_error(store, msg("queue://q", 1)))
            )
            adder.start()
            adder.join(0.5)
            assert adder.is_alive(), "the commit did not wait for the takeover in flight"
            if takeover_commits:
                thief.commit()
            else:
                thief.rollback()
        adder.join(10)
        if takeover_commits:
            assert isinstance(outcome[0], LockLostError)
            assert store.count("queue://q") == 0
        else:
            assert isinstance(outcome[0], list) and len(outcome[0]) == 1
            assert store.count("queue://q") == 1
    finally:
        store.stop()


def _add_or_error(store: PostgresStore, message: NewMessage) -> BaseException | list[int]:
    try:
        return store.add([message])
    except LockLostError as exc:
        return exc
