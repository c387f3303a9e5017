"""The master lock of ``mqstore serve`` across PostgreSQL restarts and outages.

Real ``mqstore serve`` processes; the database is a private cluster the test restarts with
``pg_ctl`` (``private_pg``), or the shared server where no restart is needed. What operators
rely on: a database restart neither hands a live master's lease to its standby nor leaves
a master refusing writes for good; a master another broker deposed stops and exits non-zero
for its supervisor; a journaled broker restarted at once under its own name starts.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.db import create_engine
from mqstore.lease_time import decode_lease_time
from mqstore.lock import LeaseLocker
from mqstore.schema import build_schema
from tests.broker.harness import connect, drain, wait_until
from tests.crash.conftest import PrivatePostgres
from tests.interop.conftest import MqstoreServer

QUEUE = "/queue/outage"


def _send(port: int, body: str, timeout: float = 5.0) -> bool:
    """One persistent message on a new connection; whether the broker receipted it."""
    try:
        conn, client = connect(port)
    except Exception:  # refused, or the broker closed the connection
        return False
    try:
        conn.send(QUEUE, body, headers={"persistent": "true"}, receipt=body)
        return client.wait(lambda: body in client.receipts or bool(client.errors), timeout) and (
            body in client.receipts
        )
    finally:
        with contextlib.suppress(Exception):
            conn.disconnect()


def _send_until_receipted(port: int, body: str, timeout: float) -> bool:
    """Retry ``body`` on new connections (its first commits may meet the restart)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _send(port, body):
            return True
        time.sleep(0.3)
    return False


def _lock_row(pg: PrivatePostgres) -> tuple[object, ...]:
    [row] = pg.query("SELECT broker_name, time FROM activemq_lock WHERE id = 1")
    return row


def _guard_open(pg: PrivatePostgres, holder: str) -> bool:
    """Whether ``holder``'s guard session is open (what a standby watches)."""
    engine = create_engine(pg.dsn)  # only for the name; never connects
    name = LeaseLocker(engine, build_schema(""), holder).guard_name(holder)
    engine.dispose()
    try:
        sessions = pg.query("SELECT 1 FROM pg_stat_activity WHERE application_name = %s", name)
    except Exception:  # the server is still starting
        return False
    return len(sessions) == 1


# ---------------------------------------------------------------------------- fault A
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_database_restart_hands_no_live_masters_lease_to_its_standby(
    private_pg: PrivatePostgres, tmp_path: Path, mode: str
) -> None:
    """A restart shorter than the lease ends every session, the master's guard too; the
    standby must not take that for the master's death (it would serve beside a master that
    still delivers from memory). A master that really dies is still replaced at once."""

    def ha(name: str) -> MqstoreServer:
        base = tmp_path / name
        return MqstoreServer(
            private_pg.dsn, base, name=name, journal=False, lease_ms=10_000, renew_ms=5_000
        )

    master = ha("ha-m").start()
    standby = ha("ha-s").start(wait=False)
    try:
        assert wait_until(lambda: "waiting as slave" in standby.log_text(), 30, 0.1)
        time.sleep(1.5)  # the standby has watched the master's guard session
        renewed = _lock_row(private_pg)
        assert wait_until(lambda: _lock_row(private_pg) != renewed, 7, 0.05), "no renewal"

        private_pg.server.restart(mode, down_s=0.3)  # right after a renewal: ~9 s of lease left
        back = time.monotonic()
        # The master opens its guard session again at once, not at its next renewal (5 s).
        assert wait_until(lambda: _guard_open(private_pg, "ha-m"), 2.5, 0.1), (
            "the master did not reopen its guard session after the restart"
        )
        time.sleep(max(0.0, back + 3.0 - time.monotonic()))
        assert _lock_row(private_pg)[0] == "ha-m", (
            f"the standby took the live master's lease:\n{standby.log_text()[-1500:]}"
        )
        assert not standby.serving()
        assert _send_until_receipted(master.port, "after-restart", 10), master.log_text()[-2000:]

        master.kill()  # a real death: its guard ends while the database stays up
        standby.wait_serving(timeout=15)
        # Taken because the master's guard ended (take_over_dead), not its lease ran out.
        assert "taking over its lease now" in standby.log_text()
        assert sorted(drain(standby.port, QUEUE)) == ["after-restart"]
    finally:
        master.kill()
        standby.kill()


# ---------------------------------------------------------------------------- fault B
@pytest.mark.parametrize("journal", [False, True], ids=["no-journal", "journaled"])
def test_a_master_whose_lease_ran_out_in_an_outage_serves_again_when_nobody_took_it(
    private_pg: PrivatePostgres, tmp_path: Path, journal: bool
) -> None:
    server = MqstoreServer(
        private_pg.dsn, tmp_path, name="solo", journal=journal, lease_ms=3000, renew_ms=1000
    ).start()
    try:
        assert _send(server.port, "before")
        private_pg.server.stop("fast")
        time.sleep(4.5)  # longer than the lease: the local deadline passes, writes are fenced
        private_pg.server.start()
        assert _send_until_receipted(server.port, "after", 12), server.log_text()[-3000:]
        assert server.process is not None and server.process.poll() is None
        assert _lock_row(private_pg)[0] == "solo"
        # Applied to the database again (a journaled broker checkpoints again).
        assert wait_until(
            lambda: private_pg.query("SELECT count(*) FROM activemq_msgs") == [(2,)], 10, 0.2
        )
        assert sorted(drain(server.port, QUEUE)) == ["after", "before"]
        assert "journal checkpoint failed; retrying\nTraceback" not in server.log_text()
    finally:
        server.kill()


@pytest.mark.parametrize("journal", [False, True], ids=["no-journal", "journaled"])
def test_a_master_another_broker_deposed_stops_and_exits_nonzero(
    dsn: str, engine: Engine, tmp_path: Path, journal: bool
) -> None:
    def victim() -> MqstoreServer:
        return MqstoreServer(
            dsn, tmp_path, name="victim", journal=journal, lease_ms=3000, renew_ms=1000
        )

    server = victim()
    server.env["MQSTORE_CHECKPOINT_INTERVAL_MS"] = "600000"  # journaled: all stays in the journal
    server.start()
    try:
        conn, client = connect(server.port)
        for i in range(3):
            conn.send(QUEUE, f"m{i}", headers={"persistent": "true"}, receipt=f"m{i}")
        assert client.wait(lambda: len(client.receipts) == 3, 10)
        with engine.begin() as c:  # another broker holds the lock now
            c.execute(
                sa.text("UPDATE activemq_lock SET broker_name = 'thief', time = :t WHERE id = 1"),
                {"t": int(time.time() * 1000) + 60_000},
            )
        assert server.process is not None
        rc = server.process.wait(15)
        assert rc != 0, "a deposed master exited as if it stopped normally"
        assert client.disconnected.wait(5), "the client connection was left open"
        assert not server.serving()
        log = server.log_text()
        assert log.count("error: this broker stopped: it lost the master lock") == 1, log[-3000:]
        assert "thief" in log
        assert "Traceback" not in log, log[-3000:]
    finally:
        server.kill()
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT broker_name FROM activemq_lock")).scalar() == "thief"
        c.execute(sa.text("UPDATE activemq_lock SET broker_name = NULL, time = 0"))
        c.commit()
    # Restarted by its supervisor once the other broker is gone: nothing it receipted is lost
    # (a journaled broker applies what it journaled).
    again = victim().start()
    try:
        assert sorted(drain(again.port, QUEUE)) == ["m0", "m1", "m2"]
    finally:
        again.stop()


# ---------------------------------------------------------------------------- fault C
def test_a_journaled_broker_killed_in_an_outage_restarts_under_its_own_name(
    private_pg: PrivatePostgres, tmp_path: Path
) -> None:
    """Its unreleased lease is waited out (the restart hides whether the old run is gone)."""

    def journaled() -> MqstoreServer:
        return MqstoreServer(
            private_pg.dsn, tmp_path, name="jb", journal=True, lease_ms=10_000, renew_ms=1000
        )  # a lease that outlives the database's restart and the new process's start-up

    server = journaled().start()
    again = journaled()
    try:
        assert _send(server.port, "j1") and _send(server.port, "j2")
        private_pg.server.stop("fast")
        server.kill()
        private_pg.server.start()
        [(holder, stored)] = private_pg.query("SELECT broker_name, time FROM activemq_lock")
        assert holder == "jb" and isinstance(stored, int)
        expiry, journaled = decode_lease_time(stored)
        assert journaled and expiry is not None  # kept for its journal: no standby takes it
        again.start(wait=False)
        again.wait_serving(timeout=40)  # not "held by jb ... Stop the other broker"
        assert time.time() * 1000 >= expiry, "took a lease its old run may still hold"
        assert "waiting for that lease to expire" in again.log_text()
        assert sorted(drain(again.port, QUEUE)) == ["j1", "j2"]
    finally:
        server.kill()
        again.stop()


def test_a_journaled_broker_killed_restarts_at_once_under_its_own_name(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    """No database restart: the old run's guard session ended with it, so its lease is
    taken at once, long before it would expire."""

    def journaled() -> MqstoreServer:
        return MqstoreServer(dsn, tmp_path, name="jb", journal=True, lease_ms=30_000, renew_ms=1000)

    server = journaled().start()
    again = journaled()
    try:
        assert _send(server.port, "j1")
        time.sleep(2.5)  # renewed on a server that stayed up
        server.kill()
        with engine.connect() as c:
            expiry = decode_lease_time(
                c.execute(sa.text("SELECT time FROM activemq_lock")).scalar_one()
            )[0]
        assert expiry is not None
        again.start(wait=False)
        again.wait_serving(timeout=15)
        assert time.time() * 1000 < expiry - 15_000, "waited for its own dead lease"
        assert sorted(drain(again.port, QUEUE)) == ["j1"]
    finally:
        server.kill()
        again.stop()


def test_a_journaled_broker_never_takes_a_lease_under_another_name(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    with engine.begin() as c:  # a live lease of another broker (no guard: ActiveMQ, say)
        c.execute(
            sa.text("UPDATE activemq_lock SET broker_name = 'other', time = :t"),
            {"t": int(time.time() * 1000) + 30_000},
        )
    server = MqstoreServer(dsn, tmp_path, name="jb", journal=True, lease_ms=30_000, renew_ms=1000)
    server.start(wait=False)
    assert server.process is not None
    assert server.process.wait(20) != 0
    assert "held by other" in server.log_text()
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT broker_name FROM activemq_lock")).scalar() == "other"
