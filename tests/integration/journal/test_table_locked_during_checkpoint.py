"""A journaled master whose checkpoint waits on a table another session has locked keeps its
lease and goes on receipting SENDs (docs/journal.md: such a lock holds producers back only
once the window fills); everything reaches the tables once the lock is released."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg

from mqstore.db import libpq_dsn
from tests.broker.harness import connect, drain
from tests.interop.conftest import MqstoreServer

QUEUE = "/queue/locked-table"
LEASE_MS, RENEW_MS = 3000, 1000
#: Held several leases long: a renewal stuck behind the checkpoint would let the lease run out.
LOCK_HELD_S = 4 * LEASE_MS / 1000


def _hold_table_lock(dsn: str, taken: threading.Event, release: threading.Event) -> None:
    with psycopg.connect(libpq_dsn(dsn)) as conn:
        conn.execute("LOCK TABLE activemq_msgs IN ACCESS EXCLUSIVE MODE")
        taken.set()
        release.wait(60)
        conn.rollback()


def test_a_table_lock_held_past_the_lease_does_not_stop_a_journaled_master_receipting(
    dsn: str, tmp_path: Path
) -> None:
    server = MqstoreServer(
        dsn, tmp_path, name="locked", journal=True, lease_ms=LEASE_MS, renew_ms=RENEW_MS
    )
    server.start()
    taken, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_table_lock, args=(dsn, taken, release))
    try:
        conn, client = connect(server.port)
        conn.send(QUEUE, "before", headers={"persistent": "true"}, receipt="r-before")
        assert client.wait(lambda: "r-before" in client.receipts, 20)
        holder.start()
        assert taken.wait(20)
        sent, deadline = [], time.monotonic() + LOCK_HELD_S
        while time.monotonic() < deadline:
            body = f"m{len(sent)}"
            conn.send(QUEUE, body, headers={"persistent": "true"}, receipt=f"r-{body}")
            assert client.wait(lambda b=body: f"r-{b}" in client.receipts, 20), client.errors
            sent.append(body)
            time.sleep(0.05)
        assert client.errors == []
        release.set()
        holder.join(30)
        conn.disconnect()
        assert sorted(drain(server.port, QUEUE)) == sorted(["before", *sent])
    finally:
        release.set()
        server.stop()
    log = (tmp_path / "serve.log").read_text()
    assert "cannot renew its lease" not in log, log
