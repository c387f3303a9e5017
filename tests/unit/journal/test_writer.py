"""Appending: durability policies, group commit, rotation, release, lock, stats."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import journal.writer as writer_module
from journal import (
    AddMessage,
    CheckpointMark,
    Journal,
    JournalClosedError,
    JournalError,
    JournalFullError,
    JournalLockedError,
    Op,
    Position,
    RemoveMessages,
    SyncPolicy,
    repair,
)
from journal.format import HEADER_SIZE, SEAL_FRAME_SIZE, Seal

SEGMENT = 8192


def add(i: int, size: int = 100) -> AddMessage:
    return AddMessage(i, "queue://orders", f"ID:prod-{i}", i, 0, 4, bytes(size), None)


def ids_of(journal: Journal, after: Position | None = None) -> list[int]:
    return [op.id for _, ops in journal.recover(after) for op in ops if isinstance(op, AddMessage)]


@pytest.fixture
def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Wrap os.fdatasync with a short delay (like a real disk) and count its calls."""
    calls = 0
    lock = threading.Lock()
    real = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        nonlocal calls
        with lock:
            calls += 1
        time.sleep(0.002)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    return lambda: calls


def test_sync_policy_parse() -> None:
    assert SyncPolicy.parse("always") == SyncPolicy("always")
    assert SyncPolicy.parse("NEVER") == SyncPolicy("never")
    assert SyncPolicy.parse("batch:5ms") == SyncPolicy("batch", 5.0)
    assert SyncPolicy.parse("batch:5") == SyncPolicy("batch", 5.0)
    assert str(SyncPolicy.parse("batch:2.5ms")) == "batch:2.5ms"
    for bad in ("sometimes", "batch:", "batch:0", "batch:-1ms"):
        with pytest.raises(ValueError, match="sync policy"):
            SyncPolicy.parse(bad)


def test_append_returns_end_positions_and_recover_replays(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        assert journal.position == Position(1, HEADER_SIZE)
        first = journal.append([add(1), add(2)])
        second = journal.append([RemoveMessages("queue://orders", (1,))])
        assert Position(1, HEADER_SIZE) < first < second == journal.position
        assert journal.durable_position == second
        records = list(journal.recover())
        assert [pos for pos, _ in records] == [first, second]
        assert records[0][1] == [add(1), add(2)]
        assert list(journal.recover(first)) == records[1:]
        assert list(journal.recover(second)) == []
        with pytest.raises(JournalError, match="not a record boundary"):
            list(journal.recover(Position(1, first.offset - 1)))
        with pytest.raises(ValueError, match="at least one operation"):
            journal.append([])
    with Journal.open(tmp_path) as journal:
        assert journal.recovery_report is None
        assert journal.position == second
        assert ids_of(journal) == [1, 2]


def test_rotation_and_oversized_record(tmp_path: Path) -> None:
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        ends = [journal.append([add(i, 1000)]) for i in range(20)]
        assert ends == sorted(ends)
        assert len({e.segment for e in ends}) > 2
        big = journal.append([add(100, 3 * SEGMENT)])
        after = journal.append([add(101)])
        assert big.segment == ends[-1].segment + 1
        assert big.offset > SEGMENT
        assert after.segment == big.segment + 1
        assert all(e.offset <= SEGMENT for e in ends)
        assert journal.stats().segments == after.segment
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert ids_of(journal) == [*range(20), 100, 101]


def test_release_deletes_or_archives_whole_segments_behind(tmp_path: Path) -> None:
    directory, archive = tmp_path / "j", tmp_path / "archive"
    with Journal.open(directory, segment_size=SEGMENT) as journal:
        ends = [journal.append([add(i, 1000)]) for i in range(30)]
        mark = ends[14]
        journal.append([CheckpointMark(mark.segment, mark.offset)])
        removed = journal.release(mark, archive_dir=archive)
        assert [p.name for p in removed] == [f"{n:016d}.wal" for n in range(1, mark.segment)]
        assert sorted(p.name for p in archive.iterdir()) == [p.name for p in removed]
        # Past the seal of the segment before it, which the segment starts with.
        assert journal.start_position == Position(mark.segment, HEADER_SIZE + SEAL_FRAME_SIZE)
        assert ids_of(journal, mark) == list(range(15, 30))
        with pytest.raises(JournalError, match="released"):
            list(journal.recover(ends[0]))
        assert journal.release(Position(10**6, 0)) != []
        assert journal.stats().segments == 1
        last = journal.append([add(99)])
    with Journal.open(directory, segment_size=SEGMENT) as journal:
        assert journal.start_position == Position(last.segment, HEADER_SIZE + SEAL_FRAME_SIZE)
        remaining = ids_of(journal)
        assert remaining[-1] == 99 and min(remaining) >= 15


def test_group_commit_shares_fsyncs(tmp_path: Path, count_fsyncs: Callable[[], int]) -> None:
    threads, per_thread = 8, 40
    ends: list[Position] = []
    lock = threading.Lock()
    with Journal.open(tmp_path) as journal:
        start = threading.Barrier(threads)

        def work(t: int) -> None:
            start.wait()
            for i in range(per_thread):
                end = journal.append([add(t * 1000 + i)])
                assert journal.durable_position >= end
                with lock:
                    ends.append(end)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        stats = journal.stats()
        appends = threads * per_thread
        assert len(set(ends)) == appends == stats.records_appended
        assert stats.fsyncs == count_fsyncs()
        assert 0 < stats.fsyncs < appends
        assert len(ids_of(journal)) == appends


def test_append_many_is_one_sync(tmp_path: Path, count_fsyncs: Callable[[], int]) -> None:
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        batches: list[list[Op]] = [[add(i, 500)] for i in range(40)]
        ends = journal.append_many(batches)
        assert ends == sorted(ends) and ends[-1] == journal.durable_position
        assert ids_of(journal) == list(range(40))
        rotations = ends[-1].segment - 1
        # and one per segment making its zero-filled room durable before records go in
        assert count_fsyncs() == 1 + rotations + (rotations + 1)


def test_never_policy_warns_and_skips_fsync(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, count_fsyncs: Callable[[], int]
) -> None:
    with caplog.at_level(logging.WARNING, logger="journal"):
        journal = Journal.open(tmp_path, sync_policy="never")
    assert "acknowledged writes can be lost" in caplog.text
    for i in range(50):
        journal.append([add(i)])
    assert count_fsyncs() == 0 and journal.stats().fsyncs == 0
    assert journal.durable_position < journal.position
    journal.close()
    assert count_fsyncs() == 1
    with Journal.open(tmp_path) as journal:
        assert len(ids_of(journal)) == 50


def test_batch_policy_syncs_in_the_background(
    tmp_path: Path, count_fsyncs: Callable[[], int]
) -> None:
    with Journal.open(tmp_path, sync_policy="batch:5ms") as journal:
        for i in range(100):
            journal.append([add(i)])
        end = journal.position
        deadline = time.monotonic() + 5
        while journal.durable_position < end and time.monotonic() < deadline:
            time.sleep(0.005)
        assert journal.durable_position == end
        assert 1 <= journal.stats().fsyncs < 100
        assert journal.stats().fsyncs == count_fsyncs()


def test_closed_journal_refuses_appends(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path)
    journal.append([add(1)])
    journal.close()
    journal.close()
    assert journal.closed
    with pytest.raises(JournalClosedError):
        journal.append([add(2)])
    with pytest.raises(JournalClosedError):
        journal.recover()


def test_lock_excludes_a_second_writer_and_repair(tmp_path: Path) -> None:
    with Journal.open(tmp_path):
        with pytest.raises(JournalLockedError, match=str(tmp_path)):
            Journal.open(tmp_path)
        with pytest.raises(JournalLockedError):
            repair(tmp_path, dry_run=True)
    with Journal.open(tmp_path):
        pass


def test_stats(tmp_path: Path) -> None:
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        for i in range(10):
            journal.append([add(i, 1000)])
        stats = journal.stats()
        assert stats.records_appended == 10
        assert stats.fsyncs >= 10
        assert stats.position == journal.position
        sizes = sum(p.stat().st_size for p in tmp_path.glob("*.wal"))
        assert stats.bytes_on_disk == sizes
        # Sealed segments are trimmed; the active one has zeroed space preallocated ahead.
        sealed = sum(p.stat().st_size for p in sorted(tmp_path.glob("*.wal"))[:-1])
        used = sealed + journal.position.offset
        seals = SEAL_FRAME_SIZE * (stats.segments - 1)  # every segment after the first has one
        assert stats.bytes_appended == used - HEADER_SIZE * stats.segments - seals
        assert stats.to_dict()["position"] == str(stats.position)
        assert stats.sync_policy == "always"


def test_disk_full_cuts_the_record_and_keeps_the_journal_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwrite = os.pwrite

    def full_after_half(fd: int, data: bytes | memoryview, offset: int) -> int:
        real_pwrite(fd, bytes(data)[: len(data) // 2], offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    with Journal.open(tmp_path) as journal:
        first = journal.append([add(1)])
        monkeypatch.setattr(os, "pwrite", full_after_half)
        with pytest.raises(JournalFullError, match="no space"):
            journal.append([add(2)])
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        assert journal.position == first
        [active] = tmp_path.glob("*.wal")
        assert journal.bytes_on_disk == active.stat().st_size == first.offset
        journal.append([add(3)])
        assert active.stat().st_size > journal.position.offset  # zeroed ahead again
    with Journal.open(tmp_path) as journal:
        assert journal.recovery_report is None
        assert ids_of(journal) == [1, 3]


def test_disk_full_at_rotation_keeps_writing_the_active_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_create = writer_module.create_segment

    def no_room(directory: Path, number: int, seal: Seal | None = None) -> int:
        raise JournalFullError(f"no space left to create journal segment {number}")

    journal = Journal.open(tmp_path, segment_size=SEGMENT)
    journal.append([add(1, 5000)])
    monkeypatch.setattr(writer_module, "create_segment", no_room)
    with pytest.raises(JournalFullError, match="no space"):
        journal.append([add(2, 5000)])  # needs the next segment
    monkeypatch.setattr(writer_module, "create_segment", real_create)
    other = os.open(tmp_path / "other-file", os.O_RDWR | os.O_CREAT)  # may reuse a closed fd
    try:
        journal.append([add(3)])  # still fits in the active segment
        journal.append([add(4, 5000)])  # room again: rotates
    finally:
        os.close(other)
    assert (tmp_path / "other-file").stat().st_size == 0
    journal.close()
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.recovery_report is None
        assert ids_of(journal) == [1, 3, 4]


def test_failed_fsync_fails_the_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    journal = Journal.open(tmp_path)
    monkeypatch.setattr(os, "fdatasync", broken)
    with pytest.raises(JournalError, match="fsync failed"):
        journal.append([add(1)])
    with pytest.raises(JournalError, match="restart"):
        journal.append([add(2)])
    journal.close()
    monkeypatch.undo()
    with Journal.open(tmp_path) as journal:
        assert ids_of(journal) in ([], [1])


def test_a_write_that_fails_with_an_io_error_fails_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unlike a full disk: after EIO the page cache may have dropped earlier writes not yet
    synced, which a later fsync would report durable. Nothing more is acknowledged."""

    def broken(fd: int, data: bytes | memoryview, offset: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    journal = Journal.open(tmp_path)
    journal.append([add(1)])
    monkeypatch.setattr(os, "pwrite", broken)
    with pytest.raises(JournalError, match="write failed"):
        journal.append([add(2)])
    monkeypatch.undo()
    assert journal.failed
    with pytest.raises(JournalError, match="restart"):
        journal.append([add(3)])
    journal.close()
    with Journal.open(tmp_path) as journal:
        assert ids_of(journal) == [1]


def test_preallocated_space_is_trimmed_and_not_reported_as_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal.open(tmp_path)
    for i in range(5):
        journal.append([add(i, 1000)])
    [active] = sorted(tmp_path.glob("*.wal"))
    assert active.stat().st_size > journal.position.offset  # zeroed space ahead of writes
    journal.close()
    assert active.stat().st_size == journal.position.offset
    with caplog.at_level(logging.WARNING, logger="journal"), Journal.open(tmp_path) as again:
        assert ids_of(again) == list(range(5))
    assert "torn tail" not in caplog.text
