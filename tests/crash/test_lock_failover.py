"""Master election on ACTIVEMQ_LOCK: stored values, takeover, and no two writers at once.

The lease values must be ActiveMQ's (``LeaseDatabaseLocker``), so that mqstore and Java
brokers can share one lock row; the failover tests run real writer processes
(``tests/crash/lock_writer.py``) and SIGKILL the master.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import mqstore.lock.lease
from mqstore.errors import ConfigError, LockLostError
from mqstore.lock import LeaseLocker, LockStatus, RowLocker, read_lock
from mqstore.statements import statements_for
from mqstore.store import NewMessage, PostgresStore
from tests.integration.conftest import StoreFactory, make_store  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[2]
SCHEMA = statements_for("").schema
LEASE_MS, RENEW_MS = 3000, 1000
SLACK_S = 0.6  # process scheduling, the store's start-up reads


def _now_ms() -> int:
    return int(time.time() * 1000)


def _lock(engine: Engine) -> LockStatus:
    with engine.connect() as conn:
        return read_lock(conn, SCHEMA)


def _lock_row(engine: Engine) -> tuple[int, int | None, str | None]:
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT id, time, broker_name FROM activemq_lock")).one()
    return int(row[0]), row[1], row[2]


# ---------------------------------------------------------------------------- lease values
def test_lease_rows_are_activemqs(engine: Engine) -> None:
    assert _lock_row(engine) == (1, None, None)  # as created: (1, NULL, NULL)
    locker = LeaseLocker(engine, SCHEMA, "broker-a", lease_ms=3000, renew_ms=1000)
    before = _now_ms()
    assert locker.acquire(threading.Event())
    after = _now_ms()
    row_id, expiry, holder = _lock_row(engine)
    assert (row_id, holder) == (1, "broker-a")
    assert expiry is not None and before + 3000 <= expiry <= after + 3000
    assert locker.is_held()

    time.sleep(0.05)
    assert locker.keep_alive()
    renewed = _lock_row(engine)[1]
    assert renewed is not None and renewed >= expiry + 40  # TIME moved to now + lease

    locker.release()
    assert _lock_row(engine) == (1, 0, None)
    assert not locker.is_held()


def test_second_locker_waits_for_the_lease_then_takes_over(engine: Engine) -> None:
    first = LeaseLocker(engine, SCHEMA, "first", lease_ms=700, renew_ms=200)
    second = LeaseLocker(engine, SCHEMA, "second", lease_ms=700, renew_ms=200, poll_ms=50)
    assert first.try_acquire()
    assert not second.try_acquire()  # TIME >= now: the conditional UPDATE matches nothing
    assert _lock(engine).broker_name == "first"

    # The first stops renewing; the second polls and wins once TIME < now, not before.
    expiry = _lock_row(engine)[1]
    assert expiry is not None
    stop = threading.Event()
    timer = threading.Timer(5, stop.set)
    timer.start()
    try:
        assert second.acquire(stop)
    finally:
        timer.cancel()
    took_at = _now_ms()
    assert took_at > expiry
    # Polls every 50 ms: it wins within a few polls even on a busy machine, long before
    # another 700 ms lease would have run out.
    assert took_at - expiry < 500
    assert _lock(engine).broker_name == "second"

    # The old holder's renewal (WHERE BROKER_NAME = me) now updates nothing: lost.
    assert not first.keep_alive()
    assert not first.is_held()
    first.release()  # must not release someone else's lease
    assert _lock(engine).broker_name == "second"
    second.release()
    assert _lock_row(engine) == (1, 0, None)


def test_released_lease_is_taken_at_once(engine: Engine) -> None:
    first = LeaseLocker(engine, SCHEMA, "first", lease_ms=60_000, renew_ms=1000)
    second = LeaseLocker(engine, SCHEMA, "second", lease_ms=60_000, renew_ms=1000)
    assert first.try_acquire()
    first.release()  # TIME 0 < now
    assert second.try_acquire()


def test_expired_but_untaken_lease_is_renewed_like_activemq(engine: Engine) -> None:
    locker = LeaseLocker(engine, SCHEMA, "late", lease_ms=300, renew_ms=100)
    assert locker.try_acquire()
    time.sleep(0.4)
    assert not locker.is_held()  # past the local deadline: no writes
    assert locker.keep_alive()  # nobody took it: ActiveMQ's renewal does not check TIME
    assert locker.is_held()


@pytest.mark.parametrize(("lease_ms", "renew_ms"), [(1000, 1000), (1000, 5000)])
def test_renewal_not_shorter_than_the_lease_is_refused(
    engine: Engine, lease_ms: int, renew_ms: int
) -> None:
    with pytest.raises(ConfigError, match=r"renewal period .* must be shorter than the lease"):
        LeaseLocker(engine, SCHEMA, "x", lease_ms=lease_ms, renew_ms=renew_ms)


def test_db_clock_mode_uses_the_database_time(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker whose clock is an hour slow would never see a lease expire; on DB time it does."""
    with engine.begin() as conn:  # another broker's lease that ran out 100 ms ago
        conn.execute(
            sa.text("UPDATE activemq_lock SET broker_name = 'other', time = :t"),
            {"t": _now_ms() - 100},
        )
    slow = types.SimpleNamespace(time=lambda: time.time() - 3600, monotonic=time.monotonic)
    monkeypatch.setattr(mqstore.lock.lease, "time", slow)

    local = LeaseLocker(engine, SCHEMA, "local-clock", lease_ms=2000, renew_ms=500)
    assert not local.try_acquire()  # on its own clock the lease has an hour to go

    db_clock = LeaseLocker(
        engine, SCHEMA, "db-clock", lease_ms=2000, renew_ms=500, max_clock_diff_ms=1000
    )
    assert db_clock.try_acquire()
    with engine.connect() as conn:
        db_ms = int(
            conn.execute(
                sa.text("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            ).scalar_one()
        )
    expiry = _lock_row(engine)[1]
    assert expiry is not None and abs(expiry - (db_ms + 2000)) < 500  # on the DB clock
    assert db_clock.keep_alive()
    renewed = _lock_row(engine)[1]
    assert renewed is not None and abs(renewed - (db_ms + 2000)) < 500

    # Within the allowed difference the local clock is used as is.
    near = LeaseLocker(
        engine, SCHEMA, "near", lease_ms=2000, renew_ms=500, max_clock_diff_ms=7_200_000
    )
    db_clock.release()
    assert near.try_acquire()
    expiry = _lock_row(engine)[1]
    assert expiry is not None and abs(expiry - (_now_ms() - 3_600_000 + 2000)) < 500


# ---------------------------------------------------------------------------- lost lease
def test_store_whose_lease_was_stolen_stops_writing(
    engine: Engine,
    make_store: StoreFactory,  # noqa: F811
) -> None:
    lost = threading.Event()
    locker = LeaseLocker(engine, SCHEMA, "victim", lease_ms=3000, renew_ms=200)
    store = make_store(locker=locker, on_lock_lost=lost.set)
    store.add([NewMessage("queue://q", "ID:p:1:1", 1, b"before")])

    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE activemq_lock SET broker_name = 'thief', time = :t WHERE id = 1"),
            {"t": _now_ms() + 60_000},
        )
    assert lost.wait(2), "the keeper did not notice the stolen lease"
    with pytest.raises(LockLostError, match="no longer holds the master lock"):
        store.add([NewMessage("queue://q", "ID:p:1:1", 2, b"after")])
    with pytest.raises(LockLostError):
        store.remove("queue://q", [1])
    assert store.count("queue://q") == 1
    assert _lock(engine).broker_name == "thief"  # stopping does not release the thief's lease
    store.stop()
    assert _lock(engine).broker_name == "thief"


def test_write_outlasting_the_lease_is_not_committed(engine: Engine) -> None:
    """A transaction that began while held but ends after the lease ran out rolls back."""
    locker = LeaseLocker(engine, SCHEMA, "slow", lease_ms=600, renew_ms=200)
    assert locker.try_acquire()
    store = PostgresStore(engine, locker=locker, cleanup_interval_s=0)
    store._started = True  # as started, but with no keeper renewing the lease
    with pytest.raises(LockLostError), store.transaction() as conn:
        conn.execute(sa.text("INSERT INTO activemq_msgs (id, container) VALUES (1, 'queue://q')"))
        time.sleep(0.7)
    assert store.count("queue://q") == 0


# ---------------------------------------------------------------------------- processes
class Writer:
    """A ``lock_writer`` process and the lines it printed (with when they arrived)."""

    def __init__(self, dsn: str, name: str, kind: str) -> None:
        self.name = name
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.crash.lock_writer", dsn, name, kind]
            + ([str(LEASE_MS), str(RENEW_MS)] if kind == "lease" else []),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()

    def first(self, word: str) -> str | None:
        with self._cond:
            return next((ln for ln in self.lines if ln.startswith(word + " ")), None)

    def wait_for(self, word: str, timeout: float, count: int = 1) -> list[str]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [ln for ln in self.lines if ln.startswith(word + " ")]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"{self.name}: no {count} x {word} within {timeout} s: {self.lines[-5:]}"
                    )
                self._cond.wait(min(left, 0.05))

    def kill(self) -> float:
        """SIGKILL; returns when it is dead (epoch s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)
        return time.time()


@pytest.fixture
def writers(dsn: str) -> Iterator[list[Writer]]:
    spawned: list[Writer] = []
    yield spawned
    for w in spawned:
        w.kill()
        if w.proc.stdout is not None:
            w.proc.stdout.close()


def _rows(engine: Engine) -> list[tuple[int, str, float]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, msg FROM activemq_msgs ORDER BY id")).all()
    out = []
    for row_id, body in rows:
        name, t0 = bytes(body).decode().split(":")
        out.append((int(row_id), name, float(t0)))
    return out


class LockPoller:
    """Reads the lock row every 10 ms in the background."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seen: list[tuple[int, str | None, int | None]] = []  # (observed ms, holder, TIME)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.engine.connect() as conn:
            while not self.stop.wait(0.01):
                status = read_lock(conn, SCHEMA)
                conn.rollback()
                self.seen.append((_now_ms(), status.broker_name, status.time))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)

    def check_handovers(self, killed_ms: dict[str, float]) -> int:
        """Each change of holder was observed only after the previous holder was killed."""
        changes = 0
        last: str | None = None
        for observed, holder, _ in self.seen:
            if holder != last and last is not None and holder is not None:
                changes += 1
                assert observed >= killed_ms[last], (
                    f"{holder} held the lock at {observed} while {last} was still alive"
                )
            last = holder
        return changes


def test_lease_failover_never_lets_two_stores_write(
    dsn: str, engine: Engine, writers: list[Writer]
) -> None:
    rounds = 3
    poller = LockPoller(engine)
    try:
        writers.append(Writer(dsn, "w0", "lease"))
        master = writers[0]
        master.wait_for("MASTER", 15)
        killed_ms: dict[str, float] = {}
        for n in range(1, rounds + 1):
            standby = Writer(dsn, f"w{n}", "lease")
            writers.append(standby)
            standby.wait_for("STARTING", 15)
            master.wait_for("WROTE", 10, count=len(master.lines) + 20)
            assert standby.first("MASTER") is None, "the standby became master while waiting"

            killed_at = master.kill()
            killed_ms[master.name] = killed_at * 1000
            row = _lock(engine)  # still the dead master's: its lease has >= 1 s to run
            assert row.broker_name == master.name and row.time is not None

            [line] = standby.wait_for("MASTER", LEASE_MS / 1000 + RENEW_MS / 1000 + 5)
            became = float(line.split()[1])
            took = became - killed_at
            assert took >= 0, "the standby took over before the master died"
            # The dead master's session ends with it; the standby does not wait out its lease.
            assert became * 1000 < row.time, f"waited for the lease: takeover took {took:.2f} s"
            standby.wait_for("WROTE", 10, count=5)
            master = standby
        master.kill()
    finally:
        poller.close()

    assert poller.check_handovers(killed_ms) == rounds
    rows = _rows(engine)
    order = [name for _, name, _ in rows]
    blocks = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    assert blocks == [f"w{n}" for n in range(rounds + 1)], "writes of two stores interleaved"
    for n in range(1, rounds + 1):
        before = [t0 for _, name, t0 in rows if name == f"w{n - 1}"]
        after = [t0 for _, name, t0 in rows if name == f"w{n}"]
        assert max(before) < min(after)
        assert min(after) * 1000 >= killed_ms[f"w{n - 1}"]
    for w in writers:  # every write a process reported is committed
        reported = {int(ln.split()[1]) for ln in w.lines if ln.startswith("WROTE ")}
        assert reported <= {i for i, name, _ in rows if name == w.name}


def test_row_locker_blocks_a_second_until_released(engine: Engine) -> None:
    first = RowLocker(engine, SCHEMA, "first", poll_ms=100)
    second = RowLocker(engine, SCHEMA, "second", poll_ms=100)
    assert first.acquire(threading.Event())
    got = threading.Event()
    stop = threading.Event()

    def wait() -> None:
        if second.acquire(stop):
            got.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    try:
        assert not got.wait(0.8), "the second row locker got the lock while it was held"
        assert first.keep_alive()
        first.release()
        assert got.wait(2)
        assert second.is_held() and second.keep_alive()
    finally:
        stop.set()
        waiter.join(5)
        second.release()
    assert not first.keep_alive()


def test_row_locker_failover_after_sigkill(dsn: str, engine: Engine, writers: list[Writer]) -> None:
    writers.append(Writer(dsn, "r0", "row"))
    writers[0].wait_for("MASTER", 15)
    writers.append(Writer(dsn, "r1", "row"))
    writers[1].wait_for("STARTING", 15)
    writers[0].wait_for("WROTE", 10, count=len(writers[0].lines) + 50)  # >= 0.5 s waiting
    assert writers[1].first("MASTER") is None
    killed_at = writers[0].kill()
    [line] = writers[1].wait_for("MASTER", 10)
    assert float(line.split()[1]) - killed_at < 3  # PostgreSQL drops the dead session
    writers[1].wait_for("WROTE", 10, count=5)
    writers[1].kill()
    order = [name for _, name, _ in _rows(engine)]
    assert order == sorted(order) and set(order) == {"r0", "r1"}
