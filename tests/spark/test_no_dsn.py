"""Without a DSN, export and audit read the embedded store (``mqstore serve`` with no DSN)
through a password-guarded loopback endpoint: beside a running broker, and on their own
(then they start the embedded server and stop it again). With no store either, they say in
one line which DSN to give."""

from __future__ import annotations

import json
import signal
import time

import psycopg
import pyarrow.parquet as pq
import pytest
import stomp

from tests.integration.test_embedded import Workdir, _free_port


def _send(port: int, bodies: list[str]) -> None:
    conn = stomp.Connection12([("127.0.0.1", port)], auto_content_length=False, heartbeats=(0, 0))
    conn.connect(wait=True)
    try:
        for body in bodies:
            conn.send("/queue/archived", body, headers={"persistent": "true", "receipt": body})
    finally:
        conn.disconnect(receipt="bye")


def _wait_stored(work: Workdir, count: int) -> None:
    """Until the broker's journal has checkpointed ``count`` messages into the tables."""
    deadline = time.monotonic() + 30
    with psycopg.connect(host=str(work.pgdata), user="postgres", dbname="postgres") as conn:
        while conn.execute("SELECT count(*) FROM activemq_msgs").fetchone() != (count,):
            assert time.monotonic() < deadline, "the broker did not checkpoint its messages"
            time.sleep(0.1)


def _exported_texts(work: Workdir) -> list[str]:
    files = sorted((work.path / "out" / "messages").rglob("*.parquet"))
    return sorted(t for f in files for t in pq.read_table(f, columns=["text"])["text"].to_pylist())


@pytest.mark.slow
@pytest.mark.timeout(900)  # five Spark jobs and two embedded server starts, one after another
def test_without_a_dsn_the_jobs_read_the_embedded_store() -> None:
    work = Workdir()
    try:
        alone = work.run("export", "--out", "out", "--master", "local[1]")
        assert alone.returncode == 1 and "Traceback" not in alone.stderr
        assert alone.stderr.strip().splitlines() == [
            "error: no --dsn given and no embedded store in ./mqstore-data: pass --dsn "
            "postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME (or set MQSTORE_DSN) of the "
            "database the broker stores in"
        ]
        assert not (work.path / "out").exists()

        port = _free_port()
        proc = work.serve(port, "serve.log")
        work.wait_serving(proc, "serve.log")
        _send(port, ["one", "two", "three"])
        _wait_stored(work, 3)

        # Beside the running broker: export reads its store, and the broker keeps serving.
        exported = work.run("export", "--out", "out", "--master", "local[1]")
        assert exported.returncode == 0, exported.stderr
        assert _exported_texts(work) == ["one", "three", "two"]
        _send(port, ["four"])

        # On its own: audit starts the embedded server and stops it when it is done.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not work.postgres_pids()
        audited = work.run("audit", "--out", "report", "--master", "local[1]")
        assert audited.returncode == 0, audited.stderr
        report = json.loads((work.path / "report" / "audit.json").read_text())
        assert report["counts"]["messages"] == 4
        assert not work.postgres_pids(), "the job left the embedded server running"

        remote = work.run("export", "--out", "out", "--master", "spark://cluster:7077")
        assert remote.returncode == 1 and "Traceback" not in remote.stderr
        assert remote.stderr.strip().splitlines() == [
            "error: --master spark://cluster:7077: the embedded store in mqstore-data is "
            "reachable from this machine only; run with a local master (local[*] is the "
            "default) or pass --dsn of a PostgreSQL the cluster can reach"
        ]
    finally:
        work.close()
