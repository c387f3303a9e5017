"""SIGKILL a journaled-store writer at random points; every acknowledged change survives.

CI mode runs 20 rounds (``MQSTORE_CRASH_ROUNDS`` raises it); the ``slow`` variant runs 100.
After each kill the parent starts the store (replaying the journal) and checks: every
acknowledged add not acknowledged-removed is there exactly once, no acknowledged removal is
resurrected, and the durable subscription resumes at least at its acknowledged position.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import Engine

from journal.store import JournaledStore
from mqstore.db import libpq_dsn
from mqstore.store import PostgresStore
from tests.crash.writer import QUEUE, SUB, run_logged


class Ledger:
    """What the killed writers were told is durable."""

    def __init__(self) -> None:
        self.added: dict[int, int] = {}
        self.removed: set[int] = set()
        self.attempted: set[int] = set()
        self.acked = -1

    def take(self, line: str) -> None:
        kind, *rest = line.split()
        if kind == "ADD":
            self.added[int(rest[0])] = int(rest[1])
        elif kind == "TRY":
            self.attempted.add(int(rest[0]))
        elif kind == "REM":
            self.removed.add(int(rest[0]))
        elif kind == "ACK":
            self.acked = max(self.acked, int(rest[0]))


# Writers are forked from a server process that has imported the store once, so a round
# costs the writer's start and its kill, not a second of imports.
_WRITERS = multiprocessing.get_context("forkserver")
_WRITERS.set_forkserver_preload(["tests.crash.writer"])


def _wait_for_transactions_to_end(dsn: str) -> None:
    """Until no transaction of the killed writer still runs in the database. SIGKILL ends
    the process, not a checkpoint it had sent: that one may yet commit. A broker restarting
    on a lease takes over only once such a transaction ended (it holds the lock row FOR
    SHARE); these writers run without a lock, so the test waits for it instead."""
    deadline = time.monotonic() + 30
    with psycopg.connect(libpq_dsn(dsn), autocommit=True) as conn:
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
        ).fetchone() != (0,):
            assert time.monotonic() < deadline, "a killed writer's transaction never ended"
            time.sleep(0.01)


def run_writer(dsn: str, journal: Path, round_no: int, ledger: Ledger, kill_after: float) -> int:
    """Start a writer, SIGKILL it ``kill_after`` seconds after it is ready; returns lines."""
    log = journal.parent / f"writer-{round_no}.log"
    proc = _WRITERS.Process(target=run_logged, args=(dsn, str(journal), round_no, str(log)))
    proc.start()
    assert proc.pid is not None
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text(encoding="ascii").startswith("READY\n")):
        assert proc.exitcode is None, f"writer exited with {proc.exitcode} before it was ready"
        assert time.monotonic() < deadline, "writer did not start"
        time.sleep(0.005)
    time.sleep(kill_after)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    _wait_for_transactions_to_end(dsn)
    text = log.read_text(encoding="ascii")
    lines = text.splitlines(keepends=True)[1:]
    if lines and not lines[-1].endswith("\n"):  # a torn last line was never acknowledged whole
        lines.pop()
    for line in lines:
        ledger.take(line)
    return len(lines)


def check(engine: Engine, journal: Path, ledger: Ledger) -> None:
    store = JournaledStore(PostgresStore(engine, cleanup_interval_s=0), journal, shared_lock=False)
    store.start()
    try:
        rows = store.page(QUEUE, None, 1_000_000)
        ids = [r.id for r in rows]
        assert len(ids) == len(set(ids)) == store.count(QUEUE)
        jms = [(r.msgid_prod, r.msgid_seq) for r in rows]
        assert len(jms) == len(set(jms)), "a message was stored twice"
        present = set(ids)
        missing = set(ledger.added) - ledger.attempted - present
        assert not missing, f"acknowledged adds lost: {sorted(missing)[:10]}"
        resurrected = ledger.removed & present
        assert not resurrected, f"acknowledged removals resurrected: {sorted(resurrected)[:10]}"
        sub = store.get_subscription(SUB)
        assert sub is not None and sub.last_acked_id >= ledger.acked
    finally:
        store.stop(checkpoint=random.random() < 0.5)


def soak(engine: Engine, dsn: str, tmp_path: Path, rounds: int) -> None:
    rng = random.Random(1234)
    ledger = Ledger()
    journal = tmp_path / "journal"
    acknowledged = 0
    for round_no in range(rounds):
        acknowledged += run_writer(dsn, journal, round_no, ledger, rng.uniform(0.02, 0.5))
        check(engine, journal, ledger)
    assert acknowledged > rounds  # the writers really worked under load
    assert ledger.removed and ledger.acked > 0


def test_sigkill_at_random_points(engine: Engine, dsn: str, tmp_path: Path) -> None:
    soak(engine, dsn, tmp_path, int(os.environ.get("MQSTORE_CRASH_ROUNDS", "20")))


@pytest.mark.slow
def test_sigkill_soak(engine: Engine, dsn: str, tmp_path: Path) -> None:
    soak(engine, dsn, tmp_path, 100)
