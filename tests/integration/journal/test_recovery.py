"""Restarts rebuild exactly what was acknowledged: IDs, order and checkpoints stay consistent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import Result
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from journal import AddMessage, Position, repair
from journal.store import JournalIdLostError, JournalUnusableError
from mqstore.errors import DatabaseUnavailableError
from tests.conftest import count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"


def test_ids_after_a_replay_that_checkpointed_on_the_way_are_new(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    ids = store.add([msg(Q, i, body=b"x" * 1000) for i in range(20)])
    store.stop(checkpoint=False)  # a crash: the window is only in the journal
    # The window is over the limit now, so replay checkpoints it part by part.
    store = make_journaled(tmp_path / "j", max_pending_bytes=10_000)
    assert count_rows(engine, "activemq_msgs") == 20
    [new] = store.add([msg(Q, 1000)])
    assert new > max(ids)
    assert [m.msgid_seq for m in store.page(Q, None, 100)] == [*range(20), 1000]
    store.checkpoint()
    assert count_rows(engine, "activemq_msgs") == 21


def test_a_journal_that_lost_its_id_file_is_refused_not_replayed_twice(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    store.add([msg(Q, 1)])
    store.stop()  # checkpointed: the message is in the database and still in the log
    (tmp_path / "j" / "journal-id").unlink()
    with pytest.raises(JournalIdLostError, match="journal-id file is missing") as info:
        make_journaled(tmp_path / "j")
    assert "move the *.wal files and the file 'newest'" in str(info.value)
    assert count_rows(engine, "activemq_msgs") == 1
    for moved in [*(tmp_path / "j").glob("*.wal"), tmp_path / "j" / "newest"]:
        moved.rename(tmp_path / moved.name)
    store = make_journaled(tmp_path / "j")  # a new, empty journal
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [1]


def test_a_checkpoint_under_a_lazy_sync_policy_stores_only_a_durable_position(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j", sync_policy="never")
    store.add([msg(Q, 1)])
    assert store.journal.durable_position < store.journal.position
    store.checkpoint()
    assert store.journal.durable_position == store.journal.position


def test_records_are_applied_in_log_order_as_replay_applies_them(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    journal = store.journal
    real_append = journal.append
    add_written, purge_done = threading.Event(), threading.Event()

    def append(ops: list[Any], **kwargs: Any) -> Any:
        end = real_append(ops, **kwargs)
        if isinstance(ops[0], AddMessage):  # the adding thread is descheduled right here
            add_written.set()
            purge_done.wait(5)
        return end

    journal.append = append  # type: ignore[method-assign]
    adder = threading.Thread(target=store.add, args=([msg(Q, 1)],))
    adder.start()
    assert add_written.wait(5)
    store.purge(Q)  # journaled after the add
    purge_done.set()
    adder.join()
    journal.append = real_append  # type: ignore[method-assign]
    live = store.count(Q)
    store.stop(checkpoint=False)  # a crash
    assert make_journaled(tmp_path / "j").count(Q) == live == 0


def test_a_checkpoint_retried_after_a_lost_commit_reply_applies_nothing_twice(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    [first] = store.add([msg(Q, 1)])
    pg = store.pg
    real = pg.transaction
    calls = 0

    @contextmanager
    def reply_lost() -> Iterator[Any]:
        nonlocal calls
        calls += 1
        with real() as conn:
            yield conn
        if calls == 1:  # committed, but the connection died before the reply came back
            raise DatabaseUnavailableError("server closed the connection unexpectedly")

    pg.transaction = reply_lost  # type: ignore[method-assign]
    with pytest.raises(DatabaseUnavailableError):
        store.checkpoint()
    assert store.remove(Q, [first]) == 1  # work after the failure: now in the window
    store.add([msg(Q, 2)])
    store.checkpoint()
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [2]
    assert count_rows(engine, "activemq_msgs") == 1
    store.stop()
    assert make_journaled(tmp_path / "j").count(Q) == 1


def _checkpointed_then_damaged(
    make_journaled: JournaledFactory, directory: Path, applied: int, record: int
) -> Position:
    """Five adds, the first ``applied`` (0 to 5) checkpointed into the database; then a byte of
    record ``record`` (0-based) flipped. Returns where that record starts."""
    store = make_journaled(directory)
    starts = []
    for i in range(5):
        if i == applied:
            store.checkpoint()
        starts.append(store.journal.position)
        store.add([msg(Q, i, body=b"x" * 100)])
    if applied == 5:
        store.checkpoint()
    store.stop(checkpoint=False)  # a crash: what was not checkpointed is only in the log
    start = starts[record]
    segment = directory / f"{start.segment:016d}.wal"
    data = bytearray(segment.read_bytes())
    data[start.offset + 20] ^= 0x40
    segment.write_bytes(bytes(data))
    return start


def test_damage_the_database_has_applied_is_refused_saying_the_repair_loses_nothing(
    make_journaled: JournaledFactory, engine: Engine, dsn: str, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    start = _checkpointed_then_damaged(make_journaled, directory, applied=3, record=1)
    with pytest.raises(JournalUnusableError) as info:
        make_journaled(directory)
    text = str(info.value)
    assert f"is corrupt at offset {start.offset}" in text
    assert "the position the database has applied" in text and "loses nothing" in text
    [(segment, position)] = _stored_positions(engine)
    plan = repair(directory, dry_run=True, database_position=Position(segment, position))
    assert plan.lost_applied_only
    assert "lost: nothing" in plan.describe()
    # The command says so too when it can read the database, and only then.
    said = _cli_repair_dry_run(directory, "--dsn", dsn)
    assert "lost: nothing" in said.stdout and said.exit_code == 0, said.output
    unread = _cli_repair_dry_run(directory, "--dsn", "postgresql://127.0.0.1:1/none")
    assert "lost: whatever records the" in unread.stdout, unread.output
    assert "checkpoint position for journal" in unread.stderr and "not read" in unread.stderr
    repair(directory, dry_run=False)
    store = make_journaled(directory)
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [0, 1, 2, 3, 4]


def test_a_damaged_last_record_the_database_has_applied_is_padded_and_the_journal_starts(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    """Cut off, the record would leave the log short of the database's position, and the
    next start would refuse the journal as behind the database."""
    directory = tmp_path / "j"
    _checkpointed_then_damaged(make_journaled, directory, applied=5, record=4)
    with pytest.raises(JournalUnusableError) as info:
        make_journaled(directory)
    assert "loses nothing" in str(info.value)
    [(segment, position)] = _stored_positions(engine)
    plan = repair(directory, dry_run=False, database_position=Position(segment, position))
    assert plan.lost_applied_only and [a.action for a in plan.actions] == ["pad"]
    store = make_journaled(directory)
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [0, 1, 2, 3, 4]
    store.add([msg(Q, 5)])
    assert store.count(Q) == 6


def test_damage_after_the_applied_position_is_not_called_harmless(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    _checkpointed_then_damaged(make_journaled, directory, applied=2, record=3)
    with pytest.raises(JournalUnusableError) as info:
        make_journaled(directory)
    assert "loses nothing" not in str(info.value)
    [(segment, position)] = _stored_positions(engine)
    plan = repair(directory, dry_run=True, database_position=Position(segment, position))
    assert not plan.lost_applied_only
    assert "lost: whatever records the" in plan.describe()


def _stored_positions(engine: Engine) -> list[tuple[int, int]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT segment, position FROM mqstore_journal"))
        return [(int(s), int(p)) for s, p in rows]


def _cli_repair_dry_run(directory: Path, *options: str) -> Result:
    from mqstore.cli import app

    runner = CliRunner()
    return runner.invoke(app, ["journal", "repair", "--dry-run", str(directory), *options])
