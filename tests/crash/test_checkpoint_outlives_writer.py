"""A checkpoint transaction outlives its SIGKILLed writer and commits after the restart.

SIGKILL ends a journaled writer running without a lock (``--lock none``), not the checkpoint
transaction it had sent: once its COMMIT is on the server, the transaction commits whenever
the server gets to it. The store restarted on the same journal directory must not replay
from the position that transaction is about to replace, nor hand out the IDs of the rows it
writes: whatever the restarted store does next (read, checkpoint, stop, start again), every
acknowledged message is there exactly once and no consumed one comes back.

The race is made deterministic on this test's own database: a deferred constraint trigger
makes a transaction that wrote the MQSTORE_JOURNAL row take a shared advisory lock at
COMMIT, and the test holds that lock while the writer's second checkpoint commits.
pg_stat_activity shows the writer's backend waiting inside COMMIT; the writer is SIGKILLed,
the restarted store replays, then the test lets the orphaned COMMIT through. (A row lock
held against the checkpoint would stop it inside a statement, before its COMMIT was sent:
the server rolls such a transaction back once it finds its client gone. The ``rolls_back``
case checks that path.)
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from journal.store import JournaledStore
from mqstore.db import create_engine, libpq_dsn
from mqstore.schema import build_schema
from mqstore.store import Ack, NewMessage, PostgresStore, SubscriptionKey

QUEUE = "queue://zombie"
TOPIC = "topic://zombie"
SUB = SubscriptionKey(TOPIC, "zombie-client", "zombie-sub")
WRITER_APP = "mqstore-zombie-writer"  # the writer's application_name, to find its backend
GATE_KEY = 770_417  # the advisory lock a COMMIT of the journal row waits for
SCHEMA = build_schema("")
JOURNAL_TABLE = SCHEMA.journal.name
TIMEOUT_S = 30.0

GATE_SQL = f"""
CREATE FUNCTION zombie_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({GATE_KEY});
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER zombie_gate AFTER INSERT OR UPDATE ON {JOURNAL_TABLE}
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION zombie_gate();
"""
UNGATE_SQL = f"""
DROP TRIGGER zombie_gate ON {JOURNAL_TABLE};
DROP FUNCTION zombie_gate();
"""


def _store(dsn: str, journal: str | os.PathLike[str]) -> JournaledStore:
    """A journaled store without a lock that checkpoints only when told to."""
    return JournaledStore(
        PostgresStore(create_engine(dsn), cleanup_interval_s=0),
        journal,
        checkpoint_interval_ms=3_600_000,
        segment_size=64 * 1024,
        shared_lock=False,
    )


# ---------------------------------------------------------------------------- the writer
def _writer(dsn: str, journal: str, log: str, go: str, drain: bool, adds_after: bool) -> None:
    """Run in its own process until SIGKILLed; prints each acknowledged operation.

    Window 1 is checkpointed. Window 2 (adds, removals of rows and of memory adds, an ack)
    is what the checkpoint the test holds at its COMMIT writes. Window 3 is journaled after
    that checkpoint's position, while it waits: it consumes some of window 2's adds (all of
    them with ``drain``), which are rows once the orphaned COMMIT goes through; it adds
    messages too unless not ``adds_after``.
    """
    with open(log, "w", encoding="ascii") as out:
        store = _store(dsn, journal)

        def say(line: str) -> None:
            out.write(line + "\n")
            out.flush()

        def wait_for(name: str) -> None:
            while not (Path(go) / name).exists():
                time.sleep(0.005)

        def add(prod: str, count: int) -> list[int]:
            ids = store.add(
                [NewMessage(QUEUE, prod, s, f"{prod}/{s}".encode()) for s in range(count)]
            )
            say("".join(f"ADD {i} {prod}\n" for i in ids).rstrip("\n"))
            return ids

        def remove(ids: list[int]) -> None:
            store.remove(QUEUE, ids)
            say("".join(f"REM {i}\n" for i in ids).rstrip("\n"))

        def topic_ack(seq: int) -> None:
            [tid] = store.add([NewMessage(TOPIC, "ID:zombie-t", seq, b"t")])
            store.acknowledge([Ack(SUB, tid)])
            say(f"ACK {tid}")

        store.start()
        store.add_subscription(SUB)
        first = add("ID:zombie-1", 8)
        topic_ack(0)
        store.checkpoint()
        say("CHECKPOINTED")
        second = add("ID:zombie-2", 8)
        remove(first[:2])  # rows the orphaned checkpoint deletes
        remove(second[:2])  # adds it never writes
        topic_ack(1)
        say("WINDOW 2")
        wait_for("checkpoint")
        threading.Thread(target=store.checkpoint, daemon=True).start()  # held at its COMMIT
        wait_for("window3")
        if adds_after:
            add("ID:zombie-3", 4)
        remove(second[2:] if drain else second[2:4])  # in flight: rows once it commits
        remove(first[2:3])
        if adds_after:
            topic_ack(2)
        say("WINDOW 3")
        time.sleep(3600)


# ---------------------------------------------------------------------------- the test side
@dataclass
class Ledger:
    """What the writers were told is durable."""

    added: dict[int, str] = field(default_factory=dict)  # id -> producer
    removed: set[int] = field(default_factory=set)
    acked: int = -1

    @classmethod
    def read(cls, log: Path) -> Ledger:
        ledger = cls()
        for line in log.read_text(encoding="ascii").splitlines():
            kind, *rest = line.split()
            if kind == "ADD":
                ledger.added[int(rest[0])] = rest[1]
            elif kind == "REM":
                ledger.removed.add(int(rest[0]))
            elif kind == "ACK":
                ledger.acked = max(ledger.acked, int(rest[0]))
        return ledger

    def live(self, prod: str | None = None) -> list[int]:
        return sorted(
            i for i, p in self.added.items() if i not in self.removed and prod in (None, p)
        )

    def add(self, store: JournaledStore, prod: str, count: int) -> list[int]:
        ids = store.add([NewMessage(QUEUE, prod, s, b"b") for s in range(count)])
        self.added.update(dict.fromkeys(ids, prod))
        return ids

    def remove(self, store: JournaledStore, ids: list[int]) -> None:
        store.remove(QUEUE, ids)
        self.removed.update(ids)


def _wait(what: str, done: Callable[[], object], timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def check_reads(store: JournaledStore, ledger: Ledger) -> None:
    """What the store delivers: each acknowledged add not consumed, once; nothing else."""
    ids = [m.id for m in store.page(QUEUE, None, 10_000)]
    assert len(ids) == len(set(ids)), "a message is delivered twice"
    consumed = sorted(set(ids) & ledger.removed)
    assert not consumed, f"consumed messages are delivered again: {consumed}"
    missing = sorted(set(ledger.live()) - set(ids))
    assert not missing, f"acknowledged messages are lost: {missing}"
    assert sorted(ids) == ledger.live(), "messages nobody acknowledged are delivered"
    assert store.count(QUEUE) == len(ids), "the queue's depth is not its delivered messages"
    sub = store.get_subscription(SUB)
    assert sub is not None and sub.last_acked_id == ledger.acked
    assert store.page_subscription(SUB, None, 100) == [], "an acknowledged topic message is back"


def check_database(engine: Engine, ledger: Ledger) -> None:
    """The tables after a checkpoint of everything: exactly the acknowledged state."""
    m, a = SCHEMA.msgs.c, SCHEMA.acks.c
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(m.id, sa.func.count()).where(m.container == QUEUE).group_by(m.id)
        ).all()
        acks = conn.execute(
            sa.select(a.last_acked_id).where(a.container == TOPIC, a.sub_name == SUB.sub_name)
        ).all()
    assert all(n == 1 for _, n in rows), f"rows stored twice: {[r for r in rows if r[1] > 1]}"
    stored = sorted(i for i, _ in rows)
    assert not set(stored) & ledger.removed, (
        f"consumed messages are rows again: {sorted(set(stored) & ledger.removed)}"
    )
    assert stored == ledger.live(), f"rows {stored} != acknowledged {ledger.live()}"
    assert [r[0] for r in acks] == [ledger.acked]


@dataclass
class Restart:
    """The store restarted on the killed writer's journal, its orphaned checkpoint now over."""

    store: JournaledStore
    ledger: Ledger


def _named(dsn: str, application_name: str) -> str:
    """``dsn`` whose sessions show as ``application_name`` in pg_stat_activity."""
    url = make_url(dsn).update_query_dict({"application_name": application_name})
    return url.render_as_string(hide_password=False)


def _position(conn: psycopg.Connection[tuple[object, ...]]) -> tuple[int, int]:
    [row] = conn.execute(f"SELECT segment, position FROM {JOURNAL_TABLE}").fetchall()
    return int(row[0]), int(row[1])  # type: ignore[call-overload]


def _backends(conn: psycopg.Connection[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """(pid, application_name, wait_event_type, wait_event, query) of the other sessions."""
    return conn.execute(
        "SELECT pid, application_name, wait_event_type, wait_event, query FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()


@contextmanager
def restarted(
    dsn: str, tmp_path: Path, *, blocker: str, drain: bool = False, adds_after: bool = True
) -> Iterator[Restart]:
    """Kill a writer whose checkpoint the database holds, restart the store on its journal
    (its start waits for that transaction's row lock), then let the transaction end:
    committed (``blocker="commit"``, held at its COMMIT) or rolled back (``"statement"``,
    held inside a statement)."""
    journal, go, log = tmp_path / "journal", tmp_path / "go", tmp_path / "writer.log"
    go.mkdir()
    admin = psycopg.connect(libpq_dsn(dsn), autocommit=True)
    holder = psycopg.connect(libpq_dsn(dsn), autocommit=blocker == "commit")
    writer = multiprocessing.get_context("spawn").Process(
        target=_writer,
        args=(_named(dsn, WRITER_APP), str(journal), str(log), str(go), drain, adds_after),
        daemon=True,
    )
    store: JournaledStore | None = None
    try:
        if blocker == "commit":
            admin.execute(GATE_SQL)
        writer.start()
        assert writer.pid is not None

        def logged(marker: str) -> bool:
            assert writer.exitcode is None, f"the writer exited with {writer.exitcode}"
            return log.exists() and f"{marker}\n" in log.read_text(encoding="ascii")

        _wait("the writer's second window", lambda: logged("WINDOW 2"))
        before = _position(admin)
        if blocker == "commit":
            holder.execute("SELECT pg_advisory_lock(%s)", (GATE_KEY,))
        else:
            holder.execute(f"SELECT 1 FROM {JOURNAL_TABLE} FOR UPDATE")
        (go / "checkpoint").touch()

        def held() -> list[int]:
            # A waiting backend's wait event is cleared for an instant each time it wakes
            # (its deadlock check after deadlock_timeout, an interrupt): callers poll.
            return [
                int(pid)  # type: ignore[call-overload]
                for pid, app, kind, event, query in _backends(admin)
                if app == WRITER_APP
                and kind == "Lock"
                and (
                    (query, event) == ("COMMIT", "advisory")
                    if blocker == "commit"
                    else str(query).startswith(f"INSERT INTO {JOURNAL_TABLE}")
                )
            ]

        waiting: list[int] = []

        def found_waiting() -> bool:
            waiting.extend(held())
            return bool(waiting)

        _wait("the writer's checkpoint to wait for the test's lock", found_waiting)
        [orphan] = set(waiting)
        (go / "window3").touch()
        _wait("the writer's third window", lambda: logged("WINDOW 3"))
        os.kill(writer.pid, signal.SIGKILL)
        writer.join(TIMEOUT_S)
        assert writer.exitcode == -signal.SIGKILL
        _wait(
            "the killed writer's transaction to show it outlived it",
            lambda: orphan in held(),
            timeout=5,
        )
        ledger = Ledger.read(log)

        store = _store(dsn, journal)
        failure: list[BaseException] = []

        def start() -> None:
            try:
                store.start()
            except BaseException as exc:  # reported by the test thread
                failure.append(exc)

        starting = threading.Thread(target=start, name="restarted-store", daemon=True)
        starting.start()
        # Its read of the stored position waits for the row the orphaned checkpoint holds.
        _wait(
            "the restarted store to wait for the orphaned checkpoint",
            lambda: any(
                pid != orphan and kind == "Lock" and JOURNAL_TABLE in str(query)
                for pid, _, kind, _, query in _backends(admin)
            ),
        )
        assert starting.is_alive()
        assert _position(admin) == before
        if blocker == "commit":
            holder.execute("SELECT pg_advisory_unlock(%s)", (GATE_KEY,))
        else:
            holder.commit()
        _wait(
            "the orphaned transaction to end",
            lambda: orphan not in [row[0] for row in _backends(admin)],
        )
        starting.join(TIMEOUT_S)
        assert not starting.is_alive(), "the restarted store did not start"
        if failure:
            raise failure[0]
        after = _position(admin)
        if blocker == "commit":
            assert after > before, "the orphaned checkpoint did not commit: nothing was tested"
            admin.execute(UNGATE_SQL)
        else:
            assert after == before, "a checkpoint held inside a statement committed"
        yield Restart(store, ledger)
    finally:
        holder.close()  # releases the test's locks, whatever happened
        if writer.pid is not None:
            with suppress(ProcessLookupError):
                os.kill(writer.pid, signal.SIGKILL)
            writer.join(TIMEOUT_S)
        # Whatever still waits (the test's idle pooled connections are left alone).
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND (xact_start IS NOT NULL OR application_name = %s)",
            (WRITER_APP,),
        )
        admin.close()
        if store is not None:
            with suppress(Exception):
                store.stop(checkpoint=False)
            store.pg.engine.dispose()


def _start_again(dsn: str, tmp_path: Path, engine: Engine, ledger: Ledger) -> None:
    """A later start on the journal: it replays from the right position and keeps working."""
    store = _store(dsn, tmp_path / "journal")
    store.start()
    try:
        check_reads(store, ledger)
        store.checkpoint()
        check_database(engine, ledger)
        ledger.add(store, "ID:zombie-d", 3)
        ledger.remove(store, ledger.live()[:1])
        check_reads(store, ledger)
    finally:
        store.stop()
        store.pg.engine.dispose()
    check_database(engine, ledger)


# ---------------------------------------------------------------------------- the tests
@pytest.mark.timeout(120)
def test_checkpoints_after_an_orphaned_checkpoint_committed(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    """The restarted store replays only what the orphaned checkpoint did not write, so its
    checkpoints meet no duplicate key. The tables hold every acknowledged message once, no
    consumed one, and the store goes on working, across a stop and a start."""
    with restarted(dsn, tmp_path, blocker="commit") as r:
        store, ledger = r.store, r.ledger
        # Its own writes before a checkpoint: one consumes an add of window 2, which the
        # replayed window holds and the orphaned checkpoint wrote too.
        ledger.add(store, "ID:zombie-b", 3)
        ledger.remove(store, ledger.live("ID:zombie-2")[:1])
        store.checkpoint()
        check_reads(store, ledger)
        check_database(engine, ledger)
        ledger.add(store, "ID:zombie-c", 2)
        ledger.remove(store, ledger.live()[:2])
        store.checkpoint()
        check_database(engine, ledger)
        store.stop()
    _start_again(dsn, tmp_path, engine, ledger)


@pytest.mark.timeout(120)
def test_reads_between_the_restart_and_its_checkpoints(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    """Before any checkpoint of the restarted store, what it delivers is already the
    acknowledged state: no message the killed writer consumed while its checkpoint was in
    flight, none the restarted store consumed itself, and depths that match."""
    with restarted(dsn, tmp_path, blocker="commit") as r:
        store, ledger = r.store, r.ledger
        check_reads(store, ledger)
        ledger.remove(store, ledger.live("ID:zombie-2")[:1])
        check_reads(store, ledger)
        store.stop(checkpoint=False)


@pytest.mark.timeout(120)
def test_stop_right_after_an_orphaned_checkpoint_committed(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    """The checkpoint at stop is the restarted store's first: it succeeds, and the next
    start finds exactly the acknowledged state."""
    with restarted(dsn, tmp_path, blocker="commit") as r:
        ledger = r.ledger
        r.store.stop()
    check_database(engine, ledger)
    _start_again(dsn, tmp_path, engine, ledger)


@pytest.mark.timeout(120)
def test_ids_after_an_orphaned_checkpoint_cover_its_rows(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    """Nothing journaled after the orphaned checkpoint adds a message: the restarted store
    learns the highest ID from the rows it committed, and hands out none of theirs."""
    with restarted(dsn, tmp_path, blocker="commit", adds_after=False) as r:
        store, ledger = r.store, r.ledger
        highest = max(ledger.added)
        new = ledger.add(store, "ID:zombie-n", 3)
        assert min(new) > highest, f"IDs {new} handed out again (rows up to {highest})"
        store.checkpoint()
        check_reads(store, ledger)
        check_database(engine, ledger)
        store.stop()
    _start_again(dsn, tmp_path, engine, ledger)


@pytest.mark.timeout(120)
def test_orphaned_checkpoint_of_adds_consumed_since(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    """Every add the orphaned checkpoint wrote was consumed while it was in flight: replayed
    from the older position, add and removal cancel out, so the restarted store's window
    holds none of those rows and its checkpoint meets no duplicate key. The consumed rows
    must go all the same."""
    with restarted(dsn, tmp_path, blocker="commit", drain=True) as r:
        store, ledger = r.store, r.ledger
        store.checkpoint()
        check_database(engine, ledger)
        check_reads(store, ledger)
        store.stop()
    _start_again(dsn, tmp_path, engine, ledger)


@pytest.mark.timeout(120)
def test_checkpoint_held_inside_a_statement_rolls_back(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    """A checkpoint killed before its COMMIT was sent never commits (the server rolls it
    back once it finds its client gone): the restart replays from the older position and its
    first checkpoint applies it all."""
    with restarted(dsn, tmp_path, blocker="statement") as r:
        store, ledger = r.store, r.ledger
        check_reads(store, ledger)
        store.checkpoint()
        check_database(engine, ledger)
        store.stop()
    _start_again(dsn, tmp_path, engine, ledger)
