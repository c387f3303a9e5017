"""What only the journaled store does: elision, batching, replay, refusals, flow control."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from journal import JournalCorruptError, JournalTailMissingError, repair, runs
from journal.segments import NEWEST_FILE_NAME
from journal.store import (
    JournalBehindDatabaseError,
    JournaledStore,
    JournalMasterSlaveError,
    JournalRowMissingError,
    JournalUnusableError,
)
from mqstore.errors import ConfigError
from mqstore.store import PostgresStore, Subscription, SubscriptionKey
from tests.conftest import count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory, crashed_journal

Q = "queue://orders"
REPO = Path(__file__).resolve().parents[3]


def rows_ever_inserted(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'activemq_msgs'")
            ).scalar_one()
        )


def test_shared_lock_is_refused(engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(JournalMasterSlaveError, match="--no-journal") as info:
        JournaledStore(PostgresStore(engine), tmp_path, shared_lock=True)
    assert isinstance(info.value, ConfigError) and "--lock none" in str(info.value)


def test_add_and_remove_within_a_window_is_elided_but_recorded(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store = make_journaled()
    for i in range(50):
        [mid] = store.add([msg(Q, i)])
        assert store.remove(Q, [mid]) == 1
    result = store.checkpoint()
    assert result is not None and result.written == 0 and result.elided == 50
    counters = store.stats().counters
    assert counters["elided"] == 50 and counters["written"] == 0 and counters["checkpoints"] == 1
    time.sleep(0.6)  # statistics collector
    assert count_rows(engine, "activemq_msgs") == 0 and rows_ever_inserted(engine) == 0
    assert count_rows(engine, "mqstore_history") == 50


def test_history_keeps_exact_bodies_of_elided_and_written_messages(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store = make_journaled(history_bodies=True)
    bodies = [bytes(range(256)) * 4, b"", b'"quoted\\" {a,b} NULL', bytes(5000)]
    elided = [store.add([msg(Q, i, body=b)])[0] for i, b in enumerate(bodies)]
    assert store.remove(Q, elided) == len(bodies)
    written = store.add([msg(Q, 100 + i, body=b) for i, b in enumerate(bodies)])
    result = store.checkpoint()
    assert result is not None and result.elided == len(bodies) and result.written == len(bodies)
    assert store.remove(Q, written) == len(bodies)
    store.checkpoint()
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT msgid_seq, msg FROM mqstore_history ORDER BY msgid_seq")
        ).all()
    expected = [*enumerate(bodies), *((100 + i, b) for i, b in enumerate(bodies))]
    assert [(seq, bytes(body)) for seq, body in rows] == expected


def test_slow_consumer_gets_batched_writes(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store = make_journaled()
    ids = [i for n in range(20) for i in store.add([msg(Q, 10 * n + k) for k in range(10)])]
    result = store.checkpoint()
    assert result is not None and result.written == 200 and result.elided == 0
    assert count_rows(engine, "activemq_msgs") == 200
    assert store.remove(Q, ids[:150]) == 150
    assert store.count(Q) == 50
    result = store.checkpoint()
    assert result is not None and result.deleted == 150
    assert count_rows(engine, "activemq_msgs") == 50
    assert count_rows(engine, "mqstore_history") == 150


def test_acknowledged_topic_messages_are_elided(make_journaled: JournaledFactory) -> None:
    from mqstore.store import Ack, SubscriptionKey

    store = make_journaled()
    a, b = SubscriptionKey("topic://t", "c", "a"), SubscriptionKey("topic://t", "c", "b")
    store.add_subscription(a)
    store.add_subscription(b)
    ids = store.add([msg("topic://t", i) for i in range(10)])
    store.acknowledge([Ack(a, ids[-1]), Ack(b, ids[4])])
    result = store.checkpoint()
    assert result is not None and result.elided == 5 and result.written == 5
    assert store.pending_count(b) == 5 and store.pending_count(a) == 0


def test_restart_replays_exactly_once(engine: Engine, dsn: str, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.crash.writer",
            dsn,
            str(journal),
            "7",
            "--ops",
            "300",
            "--exit",
            "--interval-ms",
            "3600000",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()
    added = {int(x.split()[1]) for x in out if x.startswith("ADD")}
    removed = {int(x.split()[1]) for x in out if x.startswith("REM")}
    expected = added - removed
    assert count_rows(engine, "activemq_msgs") == 0  # nothing was checkpointed
    for _ in range(3):  # replay, checkpoint, restart: never twice
        store = JournaledStore(
            PostgresStore(engine, cleanup_interval_s=0), journal, shared_lock=False
        )
        store.start()
        assert {r.id for r in store.page("queue://crash", None, 10_000)} == expected
        assert store.add([msg(Q, 1, producer="ID:after")])[0] > max(added)
        store.remove(Q, [r.id for r in store.page(Q, None, 10)])
        store.stop()
    assert count_rows(engine, "activemq_msgs") == len(expected)


def test_journal_behind_the_database_is_refused(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    store = make_journaled(directory)
    store.add([msg(Q, 1)])
    store.stop()
    for seg in directory.glob("*.wal"):  # reset by hand, the file naming the newest too
        seg.unlink()
    (directory / NEWEST_FILE_NAME).unlink()
    with pytest.raises(JournalBehindDatabaseError, match="directory was reset"):
        make_journaled(directory)


def test_an_older_copy_of_a_cleanly_stopped_journal_is_refused_saying_nothing_is_lost(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    """Its broker stopped cleanly, its last checkpoint applying everything: an older copy
    of its directory ends before that checkpoint, but no acknowledged write is lost."""
    directory = tmp_path / "j"
    store = make_journaled(directory)
    store.add([msg(Q, 0)])
    store.stop()
    shutil.copytree(directory, tmp_path / "older")
    store = make_journaled(directory)
    store.add([msg(Q, 1)])
    store.stop()
    shutil.rmtree(directory)
    (tmp_path / "older").rename(directory)
    with pytest.raises(JournalBehindDatabaseError) as info:
        make_journaled(directory)
    text = " ".join(str(info.value).split())
    assert "stopped cleanly at" in text and "nothing acknowledged is lost" in text
    assert "are lost" not in text and "journal forget" in text  # named only as the exception
    assert f"Move {directory} away" in text
    assert count_rows(engine, "activemq_msgs") == 2
    directory.rename(tmp_path / "j.old")
    again = make_journaled(directory)
    assert [r.msgid_seq for r in again.page(Q, None, 10)] == [0, 1]


def test_a_journal_whose_row_the_database_lost_is_refused(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    """The database lost the journal's row (a downgrade below 0002, a re-created database):
    replaying every record would bring back the message consumed since. Start-up refuses,
    and the way on it gives keeps each message once."""
    directory = tmp_path / "j"
    store = make_journaled(directory)
    kept, consumed = store.add([msg(Q, 0), msg(Q, 1)])
    store.checkpoint()
    store.remove(Q, [consumed])
    store.stop()
    table = store.pg.schema.journal.name
    with engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM {table}"))
    with pytest.raises(JournalRowMissingError) as info:
        make_journaled(directory)
    text = " ".join(str(info.value).split())
    assert f"no row for it in {table}" in text and f"move {directory} away" in text
    assert [r.id for r in store.pg.page(Q, None, 10)] == [kept]  # nothing was replayed
    directory.rename(tmp_path / "j.old")
    again = make_journaled(directory)
    assert [r.id for r in again.page(Q, None, 10)] == [kept]


def test_a_journal_missing_the_segments_after_the_checkpoint_is_refused(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    """Its oldest segments, the ones after the checkpoint, were deleted: the records left
    cannot be replayed without them, and going on without them loses those too."""
    directory = tmp_path / "j"
    store = make_journaled(directory, segment_size=8192)
    store.add([msg(Q, 0)])
    store.checkpoint()  # in segment 1
    i = 1
    while store.journal.position.segment < 3:
        store.add([msg(Q, i)])
        i += 1
    store.stop(checkpoint=False)  # as a crash leaves it
    (directory / f"{1:016d}.wal").unlink()
    with pytest.raises(JournalBehindDatabaseError) as info:
        make_journaled(directory, segment_size=8192)
    text = " ".join(str(info.value).split())
    assert "segments 1 to 1, which held the writes acknowledged after the checkpoint" in text
    assert "(the records this journal still holds too)" in text


def test_a_repair_that_cuts_behind_the_checkpoint_is_refused_saying_how_to_go_on(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    """``repair`` cut the newest segment before the position the database checkpointed:
    start-up names that case and its way on, and following it applies nothing twice."""
    directory = tmp_path / "j"
    store = make_journaled(directory)
    ends = []
    for i in range(6):
        store.add([msg(Q, i)])
        ends.append(store.journal.position)
        if i == 3:
            store.checkpoint()  # the database holds the first four, up to ends[3]
    journal_id, table = store.journal_id, store.pg.schema.journal.name
    store.stop(checkpoint=False)  # as a crash leaves it
    [segment] = sorted(directory.glob("*.wal"))
    data = bytearray(segment.read_bytes())
    data[ends[0].offset + 8] ^= 0xFF  # the second record goes bad, and nothing after it
    data[ends[1].offset :] = b"\xff" * (len(data) - ends[1].offset)  # can be read
    segment.write_bytes(bytes(data))
    with pytest.raises(JournalUnusableError, match="repair"):
        make_journaled(directory)
    plan = repair(directory, dry_run=False)
    assert [(a.action, a.offset) for a in plan.actions] == [
        ("pad", ends[0].offset),  # the whole record that went bad
        ("truncate", ends[1].offset),  # what cannot be read after it
    ]
    with pytest.raises(JournalBehindDatabaseError) as info:
        make_journaled(directory)
    text = " ".join(str(info.value).split())
    assert "`mqstore journal repair` cut" in text and "already in the database" in text
    assert f"mqstore journal forget {journal_id} --yes" in text and f"move {directory}" in text
    assert f"Deleting the journal's row from {table} instead does not help" in text
    # The way on it gives: nothing the journal held is applied twice.
    with engine.begin() as conn:
        assert runs.forget(conn, store.pg.schema, journal_id)
    directory.rename(tmp_path / "j.cut")
    store = make_journaled(directory)
    assert store.journal_id != journal_id
    assert [r.msgid_seq for r in store.page(Q, None, 100)] == [0, 1, 2, 3]


def test_a_copy_holding_another_history_than_the_one_checkpointed_is_refused(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    """A copy of the directory from before a torn tail was cut and written over: the
    checkpoint the database holds falls inside one of the copy's records. Start-up refuses,
    naming a copy of another history and the way on, and applies nothing of it."""
    directory = tmp_path / "j"
    store = make_journaled(directory)
    store.add([msg(Q, 0)])
    torn_at = store.journal.position
    store.add([msg(Q, 1, body=bytes(4000))])
    store.stop(checkpoint=False)  # as a crash leaves it
    shutil.copytree(directory, tmp_path / "copy")
    [segment] = sorted(directory.glob("*.wal"))
    with segment.open("r+b") as f:  # the big record turns out torn: start-up cuts it
        f.seek(torn_at.offset + 100)
        f.write(b"\xff" * 16)
    store = make_journaled(directory)
    assert store.journal.position == torn_at
    store.add([msg(Q, 2)])  # ends inside the copy's big record
    store.checkpoint()
    store.stop(checkpoint=False)
    shutil.rmtree(directory)
    shutil.copytree(tmp_path / "copy", directory)
    with pytest.raises(JournalBehindDatabaseError) as info:
        make_journaled(directory)
    text = " ".join(str(info.value).split())
    assert "no record of the journal" in text and "another history" in text
    assert "mqstore journal forget" in text


def test_a_crashed_journal_missing_its_newest_segment_is_refused_until_repaired(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    """The newest segment held writes acknowledged after the last checkpoint: the store
    does not start without it, and after ``repair`` it replays what the others hold."""
    directory = tmp_path / "j"
    store = make_journaled(directory, segment_size=8192)
    ends = []
    for i in range(200):
        store.add([msg(Q, i)])
        ends.append(store.journal.position)
    store.stop(checkpoint=False)  # as a crash leaves it
    newest = ends[-1].segment
    kept = [i for i, end in enumerate(ends) if end.segment != newest]
    assert newest >= 2 and kept
    (directory / f"{newest:016d}.wal").unlink()
    with pytest.raises(JournalUnusableError, match=f"missing its newest segment {newest} ") as info:
        make_journaled(directory)
    assert isinstance(info.value.__cause__, JournalTailMissingError)
    assert count_rows(engine, "activemq_msgs") == 0
    repair(directory, dry_run=False)
    store = make_journaled(directory, segment_size=8192)
    assert [r.msgid_seq for r in store.page(Q, None, 1000)] == kept


def test_a_last_record_cut_short_at_every_offset_is_refused_until_repaired(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    """The writer writes records only into space it zero-filled and synced first, so a file
    ending inside its last record was cut since, and that record may have been
    acknowledged: start-up refuses, applying nothing, and after ``repair`` replays the rest."""
    original = tmp_path / "original"
    crashed_journal(make_journaled, original, 3, Q)
    [segment] = sorted(original.glob("*.wal"))
    data = segment.read_bytes()
    # The last record starts where a journal of the first two adds ends: measured on a
    # journal of its own, on an empty database; then the database as the crash left it.
    with engine.begin() as conn:
        [left] = conn.execute(sa.text("SELECT * FROM mqstore_journal")).mappings().all()
        conn.execute(sa.text("TRUNCATE activemq_msgs, mqstore_journal, mqstore_history"))
    probe = tmp_path / "probe"
    crashed_journal(make_journaled, probe, 2, Q)
    record = next(probe.glob("*.wal")).stat().st_size
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE activemq_msgs, mqstore_journal, mqstore_history"))
        columns = ", ".join(left)
        values = ", ".join(f":{c}" for c in left)
        conn.execute(sa.text(f"INSERT INTO mqstore_journal ({columns}) VALUES ({values})"), left)
    for cut in range(record + 1, len(data)):
        copy = tmp_path / f"cut{cut}"
        shutil.copytree(original, copy)
        (copy / segment.name).write_bytes(data[:cut])
        with pytest.raises(JournalUnusableError, match="repair") as info:
            make_journaled(copy)
        assert isinstance(info.value.__cause__, JournalCorruptError)
        assert info.value.__cause__.offset == record
        assert count_rows(engine, "activemq_msgs") == 0
        if cut == len(data) - 1:
            repair(copy, dry_run=False)
            store = make_journaled(copy)
            assert [r.msgid_seq for r in store.page(Q, None, 10)] == [0, 1]
            store.stop(checkpoint=False)
        shutil.rmtree(copy)


def test_mid_log_corruption_stops_start_up(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    crashed_journal(make_journaled, directory, 5, Q)
    [segment] = sorted(directory.glob("*.wal"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x40
    segment.write_bytes(bytes(data))
    with pytest.raises(JournalUnusableError, match="repair") as info:
        make_journaled(directory)
    assert segment.name in str(info.value) and "offset" in str(info.value)
    assert isinstance(info.value.__cause__, JournalCorruptError)


def test_producers_block_at_the_pending_limit_until_a_checkpoint(
    make_journaled: JournaledFactory,
) -> None:
    store = make_journaled(max_pending_bytes=64 * 1024, checkpoint_interval_ms=3_600_000)
    store.checkpoint_interval_s = 3600
    done = threading.Event()

    def produce() -> None:
        for i in range(200):
            store.add([msg(Q, i, body=bytes(1024))])
        done.set()

    threading.Thread(target=produce, daemon=True).start()
    assert done.wait(30)  # pressure checkpoints let the producer through
    counters = store.stats().counters
    assert counters["checkpoints"] >= 2
    assert counters["pending_bytes"] <= 64 * 1024
    assert store.count(Q) == 200


def test_two_last_subscriptions_deleted_at_once_leave_no_messages_behind(
    make_journaled: JournaledFactory, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each delete looked for the topic's other subscriptions before the other's delete was
    journaled: each saw the other, so neither purged the topic's messages, and with no
    subscription left nothing ever would."""
    store = make_journaled()
    topic = "topic://news"
    first, second = (SubscriptionKey(topic, "client", name) for name in ("a", "b"))
    store.add_subscription(first)
    store.add_subscription(second)
    store.add([msg(topic, 1), msg(topic, 2)])
    store.checkpoint()
    looked, other_done = threading.Event(), threading.Event()
    real = store.subscriptions

    def look_slowly(container: str | None = None) -> list[Subscription]:
        found = real(container)
        if threading.current_thread() is slow and not looked.is_set():
            looked.set()
            other_done.wait(1)  # not set while the other delete waits for this one
        return found

    def delete_second() -> None:
        store.delete_subscription(second)
        other_done.set()

    monkeypatch.setattr(store, "subscriptions", look_slowly)
    slow = threading.Thread(target=store.delete_subscription, args=(first,))
    other = threading.Thread(target=delete_second)
    slow.start()
    assert looked.wait(5)
    other.start()
    slow.join(10)
    other.join(10)
    monkeypatch.undo()
    assert store.subscriptions(topic) == []
    assert store.count(topic) == 0
    store.checkpoint()
    assert count_rows(engine, "activemq_msgs") == 0
