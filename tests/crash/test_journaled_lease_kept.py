"""A journaled broker's lease is kept for its journal: after a SIGKILL no standby takes it
over (the database lacks what the journal acknowledged), until that broker, started again
on its journal, applied it and stopped, or the journal's loss is accepted."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.broker.harness import connect, drain
from tests.interop.conftest import MqstoreServer

QUEUE = "/queue/journal.kept"
LEASE_MS, RENEW_MS = 2000, 500


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqstore", *args, "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _send_receipted(port: int, count: int) -> list[str]:
    conn, client = connect(port)
    bodies = [f"kept-{i}" for i in range(count)]
    for body in bodies:
        conn.send(QUEUE, body, headers={"persistent": "true"}, receipt=body)
    assert client.wait(lambda: set(bodies) <= set(client.receipts), 10), "not all receipted"
    conn.disconnect()
    return bodies


def _stays_standby(server: MqstoreServer, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not server.serving(), f"the standby took over:\n{server.log_text()[-2000:]}"
        assert server.process is not None and server.process.poll() is None, server.log_text()
        time.sleep(0.1)


def _wait_serving(server: MqstoreServer, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not server.serving():
        assert time.monotonic() < deadline, f"did not take over:\n{server.log_text()[-2000:]}"
        time.sleep(0.1)


def _stored(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM activemq_msgs")).scalar_one())


@pytest.fixture
def servers(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, MqstoreServer]]:
    """A journaled master ``jm`` (nothing checkpointed while it runs) and a ``--no-journal``
    lease standby ``sb`` waiting behind it."""
    monkeypatch.setenv("MQSTORE_CHECKPOINT_INTERVAL_MS", "600000")
    lease = {"lease_ms": LEASE_MS, "renew_ms": RENEW_MS}
    master = MqstoreServer(dsn, tmp_path / "jm", name="jm", journal=True, **lease).start()
    standby = MqstoreServer(dsn, tmp_path / "sb", name="sb", journal=False, **lease)
    standby.start(wait=False)
    both = {"master": master, "standby": standby}
    yield both
    for server in both.values():
        server.kill()


def test_a_standby_waits_for_a_killed_journaled_master_to_come_back(
    dsn: str, engine: Engine, servers: dict[str, MqstoreServer]
) -> None:
    master, standby = servers["master"], servers["standby"]
    sent = _send_receipted(master.port, 40)
    master.kill()
    assert _stored(engine) == 0  # all of it is in the journal alone

    _stays_standby(standby, 3 * LEASE_MS / 1000)
    assert "keeps a local journal" in standby.log_text()
    status = _cli(dsn, "lock", "status")
    assert status.returncode == 0, status.stderr
    assert "held by jm (journaled)" in status.stdout
    assert "not stopped cleanly" in status.stdout  # the journal it is kept for

    master.start()  # on its journal: it takes its lease back at once
    _stays_standby(standby, 1)
    master.stop()
    assert master.process is not None and master.process.returncode == 0, master.log_text()
    _wait_serving(standby, 10)
    assert sorted(drain(standby.port, QUEUE)) == sorted(sent)


def test_a_broker_refused_for_its_lost_journal_keeps_the_lease(
    dsn: str, servers: dict[str, MqstoreServer], tmp_path: Path
) -> None:
    master, standby = servers["master"], servers["standby"]
    sent = _send_receipted(master.port, 10)
    master.kill()
    journal = tmp_path / "jm" / "journal"
    shutil.move(journal, tmp_path / "journal-away")

    master.start(wait=False)  # on a new, empty journal: refused for the one left running
    assert master.process is not None and master.process.wait(60) != 0
    assert "did not stop cleanly" in master.log_text()
    _stays_standby(standby, 3 * LEASE_MS / 1000)

    shutil.rmtree(tmp_path / "jm" / "journal")
    shutil.move(tmp_path / "journal-away", journal)  # found again
    master.start()
    master.stop()
    _wait_serving(standby, 10)
    assert sorted(drain(standby.port, QUEUE)) == sorted(sent)


def test_forgetting_a_lost_journal_frees_the_lease_it_was_kept_for(
    dsn: str, servers: dict[str, MqstoreServer], tmp_path: Path
) -> None:
    master, standby = servers["master"], servers["standby"]
    journal_id = (tmp_path / "jm" / "journal" / "journal-id").read_text().strip()
    refused = _cli(dsn, "journal", "forget", journal_id, "--yes")
    assert refused.returncode != 0
    assert "is running" in refused.stderr  # a live broker's journal is not lost
    assert master.serving()

    _send_receipted(master.port, 5)
    master.kill()
    _stays_standby(standby, 2 * LEASE_MS / 1000)
    forgot = _cli(dsn, "journal", "forget", journal_id, "--yes")
    assert forgot.returncode == 0, forgot.stderr
    assert "is free" in forgot.stdout
    _wait_serving(standby, 10)
    assert drain(standby.port, QUEUE) == []  # the loss was accepted
