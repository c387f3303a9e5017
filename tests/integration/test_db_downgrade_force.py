"""``db downgrade --force`` goes ahead under a lease only when its holder is gone: never
while the holder's guard session is connected (a running mqstore broker) or while the lease
is renewed as it is watched (a running ActiveMQ lease locker); a broker killed before its
lease ran out leaves it to ``--force``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
import stomp
from sqlalchemy.engine import Engine

from mqstore import migrate
from mqstore.errors import SchemaError
from mqstore.settings import Settings
from tests.conftest import REPO
from tests.migrations.alembic_cli import alembic

#: A long lease renewed often: it cannot run out while a test runs, and --force watches
#: it for MQSTORE_RENEW_MS plus a second.
LEASE = {"MQSTORE_LEASE_MS": "120000", "MQSTORE_RENEW_MS": "300"}


def _tables(engine: Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def _messages(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM activemq_msgs")).scalar_one())


def _mqstore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqstore", *args],
        cwd=REPO,
        env={**os.environ, **LEASE},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def broker_b4(dsn: str, engine: Engine, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """``mqstore serve --lock lease`` as broker ``b4``, master, with 5 persistent messages
    it acknowledged with receipts."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--no-journal",
         "--lock", "lease", "--broker-name", "b4", "--data-dir", str(tmp_path),
         "--stomp", "127.0.0.1:0", "--log-level", "WARNING"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **LEASE},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("mqstore serving STOMP on 127.0.0.1:"), (line, proc.poll())
        client = stomp.Connection12([("127.0.0.1", int(line.rsplit(":", 1)[1]))])
        client.connect(wait=True)
        for i in range(5):
            client.send("/queue/kept", f"m{i}", headers={"persistent": "true"})
        client.disconnect(receipt="sent")  # answered once every SEND before it was
        assert _messages(engine) == 5
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def test_forced_downgrade_refuses_while_the_lease_holder_runs(
    dsn: str, engine: Engine, broker_b4: subprocess.Popen[str]
) -> None:
    before = _tables(engine)
    forced = _mqstore("db", "downgrade", "base", "--yes", "--force", "--dsn", dsn)
    assert forced.returncode != 0, forced.stdout
    assert "Traceback" not in forced.stderr
    said = " ".join(forced.stderr.split())
    assert "guard session of broker b4 is connected" in said
    assert "nothing was changed" in said
    with_alembic = alembic("-x", f"dsn={dsn}", "-x", "force=true", "downgrade", "base")
    assert with_alembic.returncode != 0
    assert "guard session of broker b4 is connected" in with_alembic.stderr
    assert "Traceback" not in with_alembic.stderr
    assert _tables(engine) == before
    assert _messages(engine) == 5
    assert broker_b4.poll() is None


def test_forced_downgrade_goes_ahead_once_the_holder_was_killed(
    dsn: str, engine: Engine, broker_b4: subprocess.Popen[str]
) -> None:
    broker_b4.send_signal(signal.SIGKILL)
    broker_b4.wait(30)
    plain = _mqstore("db", "downgrade", "base", "--yes", "--dsn", dsn)
    assert plain.returncode != 0
    assert "held by b4 for another" in plain.stderr and "--force" in plain.stderr
    forced = _mqstore("db", "downgrade", "base", "--yes", "--force", "--dsn", dsn)
    assert forced.returncode == 0, forced.stderr
    said = " ".join(forced.stderr.split())
    assert "held by b4 for another" in said  # its lease had not run out
    assert "b4 did not renew it while watched and has no guard session connected" in said
    assert "database downgraded to base" in forced.stdout
    assert _tables(engine) == {"mqstore_version"}


@pytest.fixture
def activemq_lease_holder(engine: Engine) -> Iterator[None]:
    """A lease holder that keeps no guard session, as an ActiveMQ lease locker: it renews
    ``amq-1``'s lease every 100 ms until the test ends."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.is_set():
            try:
                with engine.begin() as conn:
                    conn.execute(
                        sa.text("UPDATE activemq_lock SET broker_name = 'amq-1', time = :t"),
                        {"t": int(time.time() * 1000) + 10_000},
                    )
            except sa.exc.DBAPIError:  # its table dropped under it
                return
            stop.wait(0.1)

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join(10)


def test_forced_downgrade_refuses_a_lease_renewed_while_watched(
    dsn: str, engine: Engine, activemq_lease_holder: None
) -> None:
    before = _tables(engine)
    forced = _mqstore("db", "downgrade", "base", "--yes", "--force", "--dsn", dsn)
    assert forced.returncode != 0, forced.stdout
    assert "Traceback" not in forced.stderr
    said = " ".join(forced.stderr.split())
    assert "held by amq-1 for another" in said and "changed within 1300 ms" in said
    assert "nothing was changed" in said
    assert _tables(engine) == before


def test_downgrade_api_tells_when_force_took_the_holder_as_gone(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE activemq_lock SET broker_name = 'left', time = :t"),
            {"t": int(time.time() * 1000) + 120_000},
        )
    with pytest.raises(SchemaError, match=r"held by left .*pass --force"):
        migrate.downgrade(engine, "", "base", renew_ms=100)
    notes: list[str] = []
    migrate.downgrade(engine, "", "base", force=True, renew_ms=100, note=notes.append)
    assert len(notes) == 1 and "left did not renew it while watched" in notes[0]
    assert _tables(engine) == {"mqstore_version"}


def test_forced_downgrade_watches_for_the_brokers_default_renewal_period() -> None:
    assert Settings.model_fields["renew_ms"].default == migrate.DEFAULT_RENEW_MS
