"""What an operator may do to a journal directory: point it at another database, lock it,
leave a segment it cannot use. The journal refuses with one clear error and writes nothing."""

from __future__ import annotations

import hashlib
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c
from sqlalchemy.engine import Engine

import journal.store as journal_store
from journal import JournalError, JournalLockedError, repair
from journal.checkpoint import CheckpointResult
from journal.format import (
    FORMAT_VERSION,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    MAGIC,
    RECORD_BATCH,
    encode_frame,
)
from journal.store import JournalDatabaseMismatchError, JournaledStore, JournalUnusableError
from mqstore import migrate
from mqstore.db import create_engine
from mqstore.errors import DatabaseUnavailableError, MqstoreError
from mqstore.store import PostgresStore
from tests.conftest import Databases, count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory, crashed_journal

Q = "queue://orders"


def _start(engine: Engine, directory: Path, prefix: str = "") -> JournaledStore:
    pg = PostgresStore(engine, prefix=prefix, cleanup_interval_s=0)
    store = JournaledStore(pg, directory, checkpoint_interval_ms=3_600_000, shared_lock=False)
    store.start()
    return store


@pytest.fixture
def other_engine(databases: Databases) -> Iterator[Engine]:
    name = databases.create(template=databases.migrated_template())
    eng = create_engine(databases.dsn_for(name))
    yield eng
    eng.dispose()


def test_a_journal_is_not_replayed_into_another_database(
    make_journaled: JournaledFactory, engine: Engine, other_engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    store = make_journaled(directory)
    store.add([msg(Q, i) for i in range(3)])
    store.stop(checkpoint=False)  # a crash: the messages are only in the journal
    with pytest.raises(JournalDatabaseMismatchError, match="belongs to database") as info:
        _start(other_engine, directory)
    assert str(directory / "database.json") in str(info.value)
    assert count_rows(other_engine, "activemq_msgs") == 0
    store = make_journaled(directory)  # its own database replays it
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [0, 1, 2]


def test_a_journal_is_not_replayed_under_another_table_prefix(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    migrate.upgrade(engine, "other_")
    directory = tmp_path / "j"
    store = make_journaled(directory)
    store.add([msg(Q, 1)])
    store.stop(checkpoint=False)
    with pytest.raises(JournalDatabaseMismatchError, match="'other_'"):
        _start(engine, directory, prefix="other_")
    assert count_rows(engine, "other_activemq_msgs") == 0


def test_a_moved_database_is_accepted_once_the_operator_deletes_the_binding(
    make_journaled: JournaledFactory, engine: Engine, databases: Databases, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    store = make_journaled(directory)
    store.add([msg(Q, 1)])
    store.checkpoint()
    store.add([msg(Q, 2)])
    store.stop(checkpoint=False)  # one message in the database, one only in the journal
    engine.dispose()
    moved = create_engine(databases.dsn_for(databases.create(template=engine.url.database)))
    try:
        with pytest.raises(JournalDatabaseMismatchError):
            _start(moved, directory)
        (directory / "database.json").unlink()
        store = _start(moved, directory)
        assert [m.msgid_seq for m in store.page(Q, None, 10)] == [1, 2]
        store.stop()
        assert count_rows(moved, "activemq_msgs") == 2
    finally:
        moved.dispose()


def test_a_journal_without_records_follows_a_changed_database(
    other_engine: Engine, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    _start(engine, directory).stop()  # started against the wrong database, nothing written
    store = _start(other_engine, directory)
    store.add([msg(Q, 1)])
    store.stop(checkpoint=False)
    with pytest.raises(JournalDatabaseMismatchError):
        _start(engine, directory)  # now it holds the other database's record


def test_a_locked_journal_is_refused_with_a_store_error(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    make_journaled(tmp_path / "j")
    with pytest.raises(JournalUnusableError, match="locked by another process") as info:
        _start(engine, tmp_path / "j")
    assert isinstance(info.value, MqstoreError)
    assert isinstance(info.value.__cause__, JournalLockedError)


def test_writes_acknowledged_before_the_directory_was_deleted_are_kept(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    store = make_journaled(directory, segment_size=4096)  # rotates every 3 messages
    acked = []
    for i in range(2):
        store.add([msg(Q, i, body=bytes(1000))])
        acked.append(i)
    shutil.rmtree(directory)
    with pytest.raises(JournalError, match="deleted while in use"):
        for i in range(2, 20):
            store.add([msg(Q, i, body=bytes(1000))])
            acked.append(i)
    with pytest.raises(JournalError):
        store.add([msg(Q, 99)])
    store.stop()  # the final checkpoint writes what only the window still holds
    store = make_journaled(directory)
    assert [m.msgid_seq for m in store.page(Q, None, 100)] == acked == [0, 1]


def test_repair_cuts_out_a_bad_record_and_keeps_the_ones_after_it(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    store = make_journaled(directory)
    store.add([msg(Q, i) for i in range(3)])
    store.checkpoint()  # these are in the database, their records still in the segment
    for i in range(3, 8):
        store.add([msg(Q, i)])
    store.stop(checkpoint=False)  # these are only in the journal
    [segment] = directory.glob("*.wal")
    data = bytearray(segment.read_bytes())
    data[HEADER_SIZE + 12] ^= 0x40  # in the first record, behind the checkpoint
    segment.write_bytes(bytes(data))
    with pytest.raises(JournalUnusableError, match="journal repair"):
        make_journaled(directory)
    plan = repair(directory, dry_run=False)
    assert plan.lost_records == 0 and [a.action for a in plan.actions] == ["pad"]
    store = make_journaled(directory)  # the stored checkpoint position is still valid
    assert [m.msgid_seq for m in store.page(Q, None, 100)] == list(range(8))
    store.checkpoint()
    assert count_rows(engine, "activemq_msgs") == 8


def test_a_record_found_unreadable_only_on_replay_is_refused_with_a_store_error(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    ends = crashed_journal(make_journaled, directory, 3, Q)
    [segment] = directory.glob("*.wal")
    data = bytearray(segment.read_bytes())
    start, end = ends[0].offset, ends[1].offset
    data[start:end] = encode_frame(RECORD_BATCH, b"\xff" * (end - start - FRAME_OVERHEAD))
    segment.write_bytes(bytes(data))  # a valid checksum over bytes that are no record
    with pytest.raises(JournalUnusableError, match="undecodable record") as info:
        make_journaled(directory)
    assert isinstance(info.value, MqstoreError) and "journal repair" in str(info.value)
    assert count_rows(engine, "activemq_msgs") == 0


def test_a_journal_of_a_newer_format_is_refused_and_left_alone(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    store = make_journaled(directory)
    store.add([msg(Q, 1)])
    store.stop(checkpoint=False)
    [segment] = directory.glob("*.wal")
    newer = struct.pack("<8sHHQ", MAGIC, FORMAT_VERSION + 1, 0, 1)
    segment.write_bytes(newer + struct.pack("<I", crc32c(newer)) + segment.read_bytes()[24:])
    before = segment.read_bytes()
    with pytest.raises(JournalUnusableError, match="run the mqstore that wrote it") as info:
        make_journaled(directory)
    assert f"format version {FORMAT_VERSION + 1}" in str(info.value)
    with pytest.raises(JournalError, match="neither replays nor repairs"):
        repair(directory, dry_run=False)
    assert segment.read_bytes() == before


def test_a_journal_directory_that_cannot_be_made_is_refused_with_a_store_error(
    engine: Engine, tmp_path: Path
) -> None:
    taken = tmp_path / "j"
    taken.write_text("not a directory")
    with pytest.raises(JournalUnusableError, match=f"cannot open the journal in {taken}"):
        _start(engine, taken)
    assert taken.read_text() == "not a directory"


def test_a_checkpoint_position_inside_a_repaired_stretch_still_replays_what_follows(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    store = make_journaled(directory)
    ends = []
    for i in range(4):
        store.add([msg(Q, i)])
        ends.append(store.journal.position)
        if i == 1:
            store.checkpoint()  # the database holds the position after message 1
    store.stop(checkpoint=False)
    [segment] = directory.glob("*.wal")
    data = bytearray(segment.read_bytes())
    start, end = ends[0].offset + 10, ends[1].offset + 10  # across messages 1 and 2
    data[start:end] = bytes(end - start)
    segment.write_bytes(bytes(data))
    plan = repair(directory, dry_run=False)
    assert [(a.action, a.offset, a.end) for a in plan.actions] == [
        ("pad", ends[0].offset, ends[2].offset)
    ]
    store = make_journaled(directory)  # message 2 is lost with the damage, 3 is replayed
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [0, 1, 3]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_archived_segments_of_a_recreated_journal_never_replace_earlier_ones(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    """A new journal directory numbers its segments from 1 again: what the old one archived
    must still be there, byte for byte, after the new one archives its own."""
    archive = tmp_path / "archive"
    ids = []
    for name in ("old", "new"):
        store = make_journaled(tmp_path / name, segment_size=4096, archive_dir=archive)
        for i in range(12):
            store.add([msg(Q, i, body=bytes(1000), producer=name)])
        ids.append(store.journal_id)
        store.stop()  # the final checkpoint releases the sealed segments
        if name == "old":
            before = {p: _digest(p) for p in archive.rglob("*.wal")}
            assert before
    assert ids[0] != ids[1]
    assert before == {p: _digest(p) for p in before}
    assert {p.parent.name for p in archive.rglob("*.wal")} == set(ids)


def test_a_failed_journal_goes_on_after_a_checkpoint_that_committed_but_reported_a_failure(
    make_journaled: JournaledFactory,
    engine: Engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The journal failed, so the window alone holds what was acknowledged; a checkpoint of
    it committed, but its reply was lost. The next checkpoint cannot read the failed journal
    back, and must not need to: the stop's final checkpoint succeeds, each message once."""
    directory = tmp_path / "j"
    store = make_journaled(directory)
    acked = [store.add([msg(Q, i)])[0] for i in range(2)]
    shutil.rmtree(directory)
    with pytest.raises(JournalError, match="deleted while in use"):
        store.add([msg(Q, 2)])
    real = journal_store.apply_checkpoint

    def reply_lost(*args: Any, **kwargs: Any) -> CheckpointResult:
        monkeypatch.setattr(journal_store, "apply_checkpoint", real)
        real(*args, **kwargs)
        raise DatabaseUnavailableError("the connection was lost after COMMIT was sent")

    monkeypatch.setattr(journal_store, "apply_checkpoint", reply_lost)
    with pytest.raises(DatabaseUnavailableError):
        store.checkpoint()
    assert store.checkpoint() is None  # the commit went through: nothing is left to write
    store.stop()
    assert count_rows(engine, "activemq_msgs") == 2
    store = make_journaled(directory)
    assert [m.id for m in store.page(Q, None, 100)] == acked
