"""SIGKILL a journaled-store writer at random points; every acknowledged change survives.

CI mode runs 20 rounds (``MQSTORE_CRASH_ROUNDS`` raises it); the ``slow`` variant runs 100.
After each kill the parent starts the store (replaying the journal) and checks: every
acknowledged add not acknowledged-removed is there exactly once, no acknowledged removal is
resurrected, and the durable subscription resumes at least at its acknowledged position.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from journal.store import JournaledStore
from mqstore.store import PostgresStore
from tests.crash.writer import QUEUE, SUB

REPO = Path(__file__).resolve().parents[2]


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


def run_writer(dsn: str, journal: Path, round_no: int, ledger: Ledger, kill_after: float) -> int:
    """Start a writer, SIGKILL it ``kill_after`` seconds after it is ready; returns lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.crash.writer", dsn, str(journal), str(round_no)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line == "READY\n":
                ready.set()
            elif line.endswith("\n"):  # a torn last line was never acknowledged whole
                lines.append(line)
        ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    assert ready.wait(60), "writer did not start"
    time.sleep(kill_after)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    reader.join(30)
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
