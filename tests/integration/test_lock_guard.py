"""The lease guard and fence: fast takeover from a dead mqstore master, never from a live or
an ActiveMQ one, nor after every session ended; a deposed master cannot commit; a lease the
database could not renew fences writes until it can; a journaled broker's own lease."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import cast

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError

from mqstore.db import create_engine, libpq_dsn
from mqstore.errors import DatabaseUnavailableError, LockError, LockLostError
from mqstore.lock import GUARD_GRACE_MS, ExclusiveLease, LeaseLocker, Renewal, read_lock
from mqstore.schema import build_schema
from mqstore.store import NewMessage, PostgresStore
from tests.broker.harness import wait_until
from tests.conftest import Databases, database_away
from tests.integration.conftest import StoreFactory, make_store, msg  # noqa: F401 (fixture)

SCHEMA = build_schema("")


def _locker(engine: Engine, name: str, lease_ms: int = 4000) -> LeaseLocker:
    return LeaseLocker(engine, SCHEMA, name, lease_ms=lease_ms, renew_ms=1000, poll_ms=100)


def _server_up_long_enough(engine: Engine) -> None:
    """A holder proves its guard was open only by renewing a while after the server started
    (GUARD_GRACE_MS): on a server started just now, wait until that holds."""
    with engine.connect() as conn:
        up = conn.execute(
            sa.text("SELECT extract(epoch FROM clock_timestamp() - pg_postmaster_start_time())")
        ).scalar_one()
    time.sleep(max(0.0, GUARD_GRACE_MS / 1000 + 1 - float(up)))


def _holder(engine: Engine) -> object:
    """The lock row's BROKER_NAME, read on a new session (pooled ones may have been ended)."""
    with psycopg.connect(libpq_dsn(engine.url)) as conn:
        return conn.execute("SELECT broker_name FROM activemq_lock").fetchone()


def _guard_open(engine: Engine, holder: str) -> bool:
    name = _locker(engine, holder).guard_name(holder)
    with psycopg.connect(libpq_dsn(engine.url)) as conn:
        rows = conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
    return len(rows) == 1


def _end_sessions(
    databases: Databases, engine: Engine, application_name: str | None = None
) -> None:
    """End the test database's sessions (those of ``application_name`` only, if given): what
    a database restart does to every session, or a dropped connection to one."""
    with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid() AND (%s::text IS NULL OR application_name = %s)",
            (engine.url.database, application_name, application_name),
        )


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


def _pause_after_acquiring(
    locker: LeaseLocker, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Event, threading.Event]:
    """Hold ``locker`` just after its acquiring UPDATE committed (at the renewal that follows
    it), as a descheduled thread or a GC pause would: (paused, resume)."""
    paused, resume = threading.Event(), threading.Event()
    renew = locker.renew

    def slow_renew() -> Renewal:
        if not paused.is_set():
            paused.set()
            resume.wait(10)
        return renew()

    monkeypatch.setattr(locker, "renew", slow_renew)
    return paused, resume


def _standby_looks(standby: LeaseLocker) -> bool:
    """One look of a waiting standby at the lock row and its holder's guard, on its watch
    session (each poll of ``acquire`` does this after its own attempt); True if it took over."""
    conn = standby._watch.session()
    try:
        return standby._standby_check(conn, read_lock(conn, SCHEMA))
    finally:
        conn.rollback()


@pytest.mark.parametrize("between", ["unseen", "another holder"])
def test_a_standby_never_takes_over_a_master_that_took_the_lease_again(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, between: str
) -> None:
    """The standby saw m1's guard; m1 released the lease and took it again (the standby
    polled meanwhile or not). Right after its acquiring UPDATE m1 is master: what the
    standby noted of m1's earlier guard must not make m1 look dead."""
    master = _locker(engine, "m1", lease_ms=30_000)
    standby = _locker(engine, "m2", lease_ms=30_000)
    assert master.acquire(threading.Event())
    assert not _standby_looks(standby)  # m1's guard is open
    master.release()
    if between == "another holder":
        with engine.begin() as conn:  # an ActiveMQ broker holds the lease a while
            conn.execute(
                sa.text("UPDATE activemq_lock SET broker_name = 'amq', time = :t"),
                {"t": int(time.time() * 1000) + 30_000},
            )
        assert not _standby_looks(standby)
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE activemq_lock SET broker_name = NULL, time = 0"))
    paused, resume = _pause_after_acquiring(master, monkeypatch)
    got, stop = _acquire_in_background(master)
    try:
        assert paused.wait(5)
        assert _holder(engine) == ("m1",)
        took = _standby_looks(standby)
        resume.set()
        assert not took, "took over the lease a live master had just acquired"
        assert got.wait(5)
        assert _holder(engine) == ("m1",)
        assert master.keep_alive()
    finally:
        resume.set()
        stop.set()
        standby.release()
        master.release()


def test_a_broker_under_the_same_name_never_takes_a_lease_just_acquired(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes under one name (a misconfiguration): the one waiting must not take the
    lease the other has just acquired for the dead lease of an earlier run of its own."""
    _server_up_long_enough(engine)
    first = _locker(engine, "same", lease_ms=30_000)
    second = _locker(engine, "same", lease_ms=30_000)
    paused, resume = _pause_after_acquiring(first, monkeypatch)
    got, stop = _acquire_in_background(first)
    try:
        assert paused.wait(5)
        took = _standby_looks(second)
        resume.set()
        assert not took, "two masters under one name"
        assert got.wait(5)
        assert first.keep_alive()
    finally:
        resume.set()
        stop.set()
        second.release()
        first.release()


def test_a_master_whose_lease_a_process_under_its_name_took_loses_it(engine: Engine) -> None:
    """Two processes under one name: the second takes the lease once the first's ran out
    (the first stalled). The first's next renewal must not keep the lease the second now
    holds, nor may its release free it: one master, and it is the second."""
    first = _locker(engine, "same", lease_ms=1500)
    assert first.acquire(threading.Event())
    second = _locker(engine, "same", lease_ms=30_000)
    try:
        assert wait_until(second.try_acquire, 5.0, 0.1)  # once the first's lease ran out
        assert first.renew() is Renewal.LOST, "two masters under one name"
        assert "another process under this broker's name 'same'" in first.lost_reason
        assert not first.is_held()
        first.release()
        assert _holder(engine) == ("same",)
        assert second.renew() is Renewal.KEPT
        assert second.is_held()
    finally:
        second.release()
    assert _holder(engine) == (None,)


class _ReplyLostAfterCommit:
    """An engine whose next ``begin()`` commits and then fails, as when the connection
    dies after the server committed but before its reply arrived."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.armed = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.engine, name)

    @contextlib.contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        with self.engine.begin() as conn:
            yield conn
        if self.armed:
            self.armed = False
            raise OperationalError("COMMIT", {}, Exception("server closed the connection"))


def test_a_renewal_whose_reply_was_lost_keeps_the_lease(engine: Engine) -> None:
    """The lost renewal may have committed its lease end: the next one must still know the
    row as its own."""
    flaky = _ReplyLostAfterCommit(engine)
    locker = LeaseLocker(
        cast(Engine, flaky), SCHEMA, "m1", lease_ms=30_000, renew_ms=1000, poll_ms=100
    )
    assert locker.acquire(threading.Event())
    try:
        flaky.armed = True
        assert locker.renew() is Renewal.UNREACHABLE
        assert not flaky.armed
        assert locker.renew() is Renewal.KEPT, locker.lost_reason
        assert locker.renew() is Renewal.KEPT
    finally:
        locker.release()
    assert _holder(engine) == (None,)


def test_a_takeover_spares_a_holder_whose_guard_is_open(engine: Engine) -> None:
    """A standby decides on an earlier look; the holder may have taken the lease again
    since: the takeover checks the guard again, in its own transaction."""
    master = _locker(engine, "m1", lease_ms=30_000)
    assert master.acquire(threading.Event())
    standby = _locker(engine, "m2", lease_ms=30_000)
    try:
        assert not standby.take_over_dead("m1", "a look before m1 took the lease again")
        assert _holder(engine) == ("m1",)
        assert master.keep_alive()
    finally:
        standby.release()
        master.release()


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


def test_a_standby_does_not_take_over_when_every_session_ended(
    engine: Engine, databases: Databases
) -> None:
    """As after a database restart: the master's guard ended, but so did the standby's own
    session, so the guard's end proves nothing about the master. The master opens its guard
    again at once; a death after that is noticed at once again."""
    master = LeaseLocker(engine, SCHEMA, "m1", lease_ms=30_000, renew_ms=5000, poll_ms=100)
    assert master.acquire(threading.Event())
    standby = _locker(engine, "m2", lease_ms=30_000)
    got, stop = _acquire_in_background(standby)
    try:
        assert not got.wait(1.0), "took over from a live master"
        _end_sessions(databases, engine)
        assert wait_until(lambda: _guard_open(engine, "m1"), 2.0, 0.05), (
            "the master did not reopen its guard session (its next renewal is 5 s away)"
        )
        assert not got.wait(2.0), "took over a live master's lease after its sessions ended"
        assert _holder(engine) == ("m1",)
        time.sleep(0.5)  # the standby sees the new guard
        master._close_guard()  # now the master dies
        assert got.wait(3.0), "did not notice the master's session ended"
    finally:
        stop.set()
        master.release()
        standby.release()


def test_the_master_reopens_its_guard_at_once_when_it_ends(
    engine: Engine, databases: Databases
) -> None:
    master = LeaseLocker(engine, SCHEMA, "m1", lease_ms=30_000, renew_ms=10_000)
    assert master.acquire(threading.Event())
    try:
        assert _guard_open(engine, "m1")
        _end_sessions(databases, engine, master.guard_name("m1"))
        assert wait_until(lambda: _guard_open(engine, "m1"), 2.0, 0.05)
        assert master.is_held()
    finally:
        master.release()
    # the server ends a closed session's backend a moment after the client let go of it
    assert wait_until(lambda: not _guard_open(engine, "m1"), 2.0, 0.05)


def test_a_restart_under_the_same_name_takes_its_own_dead_lease(engine: Engine) -> None:
    _server_up_long_enough(engine)
    first = _locker(engine, "same", lease_ms=30_000)
    assert first.acquire(threading.Event())
    first._close_guard()  # the process died without releasing
    again = _locker(engine, "same", lease_ms=30_000)
    started = time.monotonic()
    assert again.acquire(threading.Event())
    assert time.monotonic() - started < 3
    again.release()


@pytest.mark.parametrize(
    ("holder", "said"),
    [("'other'", "now belongs to 'other'"), ("NULL", "was released by another process")],
    ids=["taken", "released"],
)
def test_a_deposed_master_cannot_commit(engine: Engine, holder: str, said: str) -> None:
    store = PostgresStore(
        engine, locker=_locker(engine, "m1", lease_ms=30_000), cleanup_interval_s=0
    )
    store.start()
    try:
        store.add([msg("queue://q", 1)])
        with engine.begin() as conn:  # another broker took the lease, or an operator freed it
            conn.execute(sa.text(f"UPDATE activemq_lock SET broker_name = {holder}"))
        with pytest.raises(LockLostError, match=said) as lost:
            store.add([msg("queue://q", 2)])  # refused at once, before any renewal
        assert "None" not in str(lost.value)
        assert store.count("queue://q") == 1
    finally:
        store.stop()


def test_a_write_that_finds_the_lock_taken_deposes_the_store_at_once(
    engine: Engine,
    make_store: StoreFactory,  # noqa: F811
) -> None:
    """The host hears of it (and stops delivering) within a second, not at the next
    renewal: a deposed broker must not keep serving beside the new master."""
    lost = threading.Event()
    locker = LeaseLocker(engine, SCHEMA, "m1", lease_ms=30_000, renew_ms=10_000)
    store = make_store(locker=locker, on_lock_lost=lost.set)
    with engine.begin() as conn:  # another broker took the lease
        conn.execute(sa.text("UPDATE activemq_lock SET broker_name = 'other'"))
    with pytest.raises(LockLostError, match="now belongs to 'other'"):
        store.add([msg("queue://q", 1)])
    assert lost.wait(2.5), "deposed only at the next renewal"
    assert store.lock_lost
    with pytest.raises(LockLostError, match="no longer holds the master lock"):
        store.add([msg("queue://q", 2)])


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


# ---------------------------------------------------------------------------- unreachable
def test_a_lease_the_database_could_not_renew_fences_writes_until_it_can(
    engine: Engine,
    databases: Databases,
    make_store: StoreFactory,  # noqa: F811
) -> None:
    """Not a loss: writes are refused once the lease's local deadline passes, and resume
    when a renewal gets through and finds the row still ours."""
    lost = threading.Event()
    locker = LeaseLocker(engine, SCHEMA, "m1", lease_ms=1500, renew_ms=500)
    store = make_store(locker=locker, on_lock_lost=lost.set)
    store.add([msg("queue://q", 1)])
    with database_away(engine, databases):
        assert wait_until(lambda: not locker.is_held(), 5, 0.05)
        with pytest.raises(LockLostError, match="cannot renew its lease"):
            store.add([msg("queue://q", 2)])
        time.sleep(1.0)  # well past the lease
    assert wait_until(locker.is_held, 5, 0.05), "the keeper gave up renewing"
    try:
        store.add([msg("queue://q", 3)])
    except DatabaseUnavailableError:  # a kept commit connection meets the outage once
        store.add([msg("queue://q", 3)])
    assert store.count("queue://q") == 2
    assert not lost.is_set() and not store.lock_lost
    with engine.connect() as conn:
        assert read_lock(conn, SCHEMA).broker_name == "m1"


# ---------------------------------------------------------------------------- journaled
def test_a_journaled_broker_takes_its_own_dead_lease_at_once(engine: Engine) -> None:
    """Restarted after a kill: its earlier run's guard ended while the server stayed up."""
    _server_up_long_enough(engine)
    first = _locker(engine, "jb", lease_ms=30_000)
    assert first.acquire(threading.Event())
    first._close_guard()  # killed, its lease not released
    again = ExclusiveLease(_locker(engine, "jb", lease_ms=30_000))
    started = time.monotonic()
    assert again.acquire(threading.Event())
    assert time.monotonic() - started < 3
    with engine.connect() as conn:
        assert read_lock(conn, SCHEMA).broker_name == "jb"
    again.release()


def test_a_journaled_broker_never_takes_another_brokers_lease(engine: Engine) -> None:
    other = _locker(engine, "other", lease_ms=30_000)
    assert other.acquire(threading.Event())
    other._close_guard()  # even with no guard session
    with pytest.raises(LockError, match="held by other"):
        ExclusiveLease(_locker(engine, "jb")).acquire(threading.Event())
    with engine.connect() as conn:
        assert read_lock(conn, SCHEMA).broker_name == "other"


def test_a_journaled_broker_does_not_take_its_name_from_a_running_broker(engine: Engine) -> None:
    """The same name held and renewed by a live process: waited out for a lease, refused."""
    running = _locker(engine, "jb", lease_ms=1500)
    assert running.acquire(threading.Event())
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.2):
            running.renew()

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        started = time.monotonic()
        with pytest.raises(LockError, match="another running broker uses this broker's name"):
            ExclusiveLease(_locker(engine, "jb", lease_ms=1500)).acquire(threading.Event())
        assert time.monotonic() - started >= 1.5
    finally:
        stop.set()
        renewer.join(5)
        running.release()


def test_a_standby_on_a_read_only_database_warns_once_and_says_why(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every attempt fails the same way (a standby's DSN): one warning naming the cause and
    what to do, not one per poll."""
    read_only = make_url(dsn).update_query_dict({"options": "-cdefault_transaction_read_only=on"})
    engine = create_engine(read_only.render_as_string(hide_password=False))
    standby = LeaseLocker(engine, SCHEMA, "m1", lease_ms=4000, renew_ms=1000, poll_ms=20)
    stop = threading.Event()
    polled = threading.Thread(target=standby.acquire, args=(stop,), daemon=True)
    try:
        with caplog.at_level(logging.DEBUG, logger="mqstore.lock"):
            polled.start()
            assert wait_until(lambda: len(_lock_attempts(caplog)) >= 10, 30.0, 0.05)
            stop.set()
            polled.join(10)
        warned = [r for r in _lock_attempts(caplog) if r.levelno == logging.WARNING]
        assert len(warned) == 1, [r.getMessage() for r in warned]
        assert "point the DSN at the primary" in warned[0].getMessage()
    finally:
        stop.set()
        engine.dispose()


def _lock_attempts(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "lock attempt failed" in r.getMessage()]
