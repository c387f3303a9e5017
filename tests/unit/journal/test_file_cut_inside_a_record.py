"""A segment file ending inside a record: the writer never leaves one (it writes records only
into room it zero-filled and synced first), so one that does was cut short since, and the
records cut may have been acknowledged: refused and kept, not cut as a torn tail."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

import pytest

from journal import AddMessage, Journal, JournalCorruptError, JournalFullError, inspect, repair
from journal.format import HEADER_SIZE, frame_ops


def add(i: int, size: int = 1700) -> AddMessage:
    return AddMessage(i, "queue://orders", f"ID:prod-{i}", i, 0, 4, bytes(size), None)


def ids_of(journal: Journal) -> list[int]:
    return [op.id for _, ops in journal.recover() for op in ops if isinstance(op, AddMessage)]


def wal(directory: Path) -> Path:
    [path] = sorted(directory.glob("*.wal"))
    return path


def test_a_killed_writers_segment_cut_inside_its_last_record_is_refused_then_repaired(
    tmp_path: Path,
) -> None:
    live = tmp_path / "live"
    journal = Journal.open(live)
    ends = [journal.append([add(i)]) for i in range(5)]  # all acknowledged
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)  # as a SIGKILL leaves it: zeros after the last record
    journal.close()
    path = wal(crashed)
    assert path.stat().st_size > ends[-1].offset
    last_start = ends[-2].offset
    os.truncate(path, last_start + 100)
    with pytest.raises(JournalCorruptError, match="repair") as info:
        Journal.open(crashed)
    assert (info.value.segment, info.value.offset) == (path, last_start)
    assert "runs past end of file" in info.value.reason
    report = inspect(crashed)
    assert report.problem is not None and report.problem.kind == "corrupt"
    plan = repair(crashed, dry_run=False)
    assert [(a.action, a.offset) for a in plan.actions] == [("truncate", last_start)]
    with Journal.open(crashed) as reopened:
        assert reopened.recovery_report is None
        assert ids_of(reopened) == [0, 1, 2, 3]


def test_a_segment_cut_inside_a_record_header_is_refused(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        ends = [journal.append([add(i)]) for i in range(3)]
    os.truncate(wal(tmp_path), ends[1].offset + 3)
    with pytest.raises(JournalCorruptError) as info:
        Journal.open(tmp_path)
    assert info.value.offset == ends[1].offset


def test_records_are_written_only_into_room_already_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every record lies within the segment's size as of a sync before it was written, so
    neither a killed process nor a power loss can leave the file ending inside it."""
    real_pwrite, real_fdatasync, real_fsync = os.pwrite, os.fdatasync, os.fsync
    synced: dict[int, int] = {}
    records: list[tuple[int, int, int]] = []

    def is_segment(fd: int) -> bool:
        return os.readlink(f"/proc/self/fd/{fd}").endswith(".wal")

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        if offset == 0 and is_segment(fd):  # a new segment (its descriptor may be reused)
            synced[fd] = 0
        elif offset >= HEADER_SIZE and is_segment(fd) and bytes(data).strip(b"\0"):
            records.append((offset + len(data), synced.get(fd, 0), fd))
        return real_pwrite(fd, data, offset)

    def syncing(real: object) -> object:
        def sync(fd: int) -> None:
            real(fd)  # type: ignore[operator]
            if is_segment(fd):
                synced[fd] = os.fstat(fd).st_size

        return sync

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "fdatasync", syncing(real_fdatasync))
    monkeypatch.setattr(os, "fsync", syncing(real_fsync))
    with Journal.open(tmp_path, segment_size=64 * 1024) as journal:
        for i in range(100):
            journal.append([add(i, 300 + 37 * i)])
        journal.append_many([[add(i)] for i in range(100, 140)])
    assert len(records) >= 101
    beyond = [(end, size) for end, size, _ in records if end > size]
    assert beyond == []


def test_a_disk_with_room_for_the_record_but_not_the_space_ahead_takes_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With less than the usual zero-filled stretch left, the writer makes room for just the
    record; with not even that, it refuses the record, and the file ends at a record."""
    limit = 20_000
    real_pwrite = os.pwrite

    def small_disk(fd: int, data: bytes | memoryview, offset: int) -> int:
        room = limit - offset
        if len(data) > room:
            if room > 0:
                real_pwrite(fd, bytes(data)[:room], offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    live = tmp_path / "live"
    journal = Journal.open(live)
    monkeypatch.setattr(os, "pwrite", small_disk)
    written = []
    with pytest.raises(JournalFullError, match="no space"):
        for i in range(100):
            journal.append([add(i)])
            written.append(i)
    assert written and journal.position.offset + len(frame_ops([add(0)])) > limit
    assert wal(live).stat().st_size == journal.position.offset
    monkeypatch.undo()
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    journal.close()
    with Journal.open(crashed) as reopened:
        assert reopened.recovery_report is None
        assert ids_of(reopened) == written


def test_what_start_up_cuts_is_not_called_harmless(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Journal.open(tmp_path) as journal:
        ends = [journal.append([add(i)]) for i in range(3)]
    path = wal(tmp_path)
    data = bytearray(path.read_bytes())
    start, end = ends[1].offset, ends[2].offset
    boundary = (start // 512 + 1) * 512  # a write a power loss cut short, its sectors unwritten
    data[boundary:end] = bytes(end - boundary)
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.INFO, logger="journal"), Journal.open(tmp_path) as journal:
        report = journal.recovery_report
        assert report is not None and not report.free_space
        assert "damaged since" in str(report) and "only unacknowledged" not in str(report)
        journal.append([add(9)])
    copy = tmp_path / "copy"
    journal = Journal.open(copy)
    journal.append([add(1)])
    shutil.copytree(copy, tmp_path / "crashed")
    journal.close()
    with Journal.open(tmp_path / "crashed") as journal:
        report = journal.recovery_report
        assert report is not None and report.free_space and "no record" in str(report)
