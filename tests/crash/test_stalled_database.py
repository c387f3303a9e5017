"""A journaled ``mqstore serve`` whose PostgreSQL stops answering (SIGSTOP, not a crash).

TCP timeouts cannot see a stopped server: its kernel still acknowledges every packet. The
journal acknowledges sends durably, so producers and consumers go on while checkpoints wait;
when the server answers again the checkpoint completes and nothing is lost or doubled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from tests.broker.harness import connect, drain
from tests.crash.conftest import PrivatePostgres
from tests.interop.conftest import MqstoreServer

QUEUE = "/queue/stalled"
LIVENESS_S = 20.0  # without the fix the first receipt never comes while the server is stopped


def _server_pids(pg: PrivatePostgres) -> list[int]:
    """The postmaster and every backend of the private cluster."""
    postmaster = int((pg.server.dir / "postmaster.pid").read_text().split()[0])
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    return [postmaster, *map(int, children)]


@contextlib.contextmanager
def _stalled(pg: PrivatePostgres) -> Iterator[None]:
    pids = _server_pids(pg)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _rows(pg: PrivatePostgres) -> list[str]:
    return [str(r[0]) for r in pg.query("SELECT container FROM activemq_msgs")]


def test_a_journaled_broker_serves_while_its_database_is_stopped(
    private_pg: PrivatePostgres, tmp_path: Path
) -> None:
    server = MqstoreServer(private_pg.dsn, tmp_path, name="stall", journal=True, lock="none")
    server.start()
    try:
        conn, client = connect(server.port)
        conn.send(QUEUE, "before", headers={"persistent": "true"}, receipt="r-before")
        assert client.wait(lambda: "r-before" in client.receipts, LIVENESS_S)
        time.sleep(1.5)  # checkpointed: the next checkpoint is the one that meets the stall
        with _stalled(private_pg):
            for n in range(20):
                conn.send(QUEUE, f"m{n}", headers={"persistent": "true"}, receipt=f"r{n}")
                assert client.wait(lambda n=n: f"r{n}" in client.receipts, LIVENESS_S), (
                    f"send {n} was not receipted while the database was stopped"
                )
                time.sleep(0.1)  # across more than one checkpoint interval
            got = drain(server.port, QUEUE)
            assert got == ["before", *(f"m{n}" for n in range(20))]
            conn.disconnect()
        server.stop()
        assert server.process is not None and server.process.returncode == 0
        assert _rows(private_pg) == []  # consumed: nothing left, nothing doubled
        again = MqstoreServer(private_pg.dsn, tmp_path, name="stall", journal=True, lock="none")
        again.start()
        try:
            assert drain(again.port, QUEUE) == []
        finally:
            again.stop()
    finally:
        server.kill()
