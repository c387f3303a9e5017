"""``inspect`` (``mqstore journal inspect``, ``mqstore stats``) beside a running writer: its
preallocated space, the segments it releases and the record it is writing are no damage."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import journal.reader
from journal import Journal, JournalError, inspect
from tests.unit.journal.test_recovery import SEGMENT, add, segment_file, write_log

Reader = Callable[[Path], memoryview]


def test_the_zeroed_space_ahead_of_a_live_writer_is_no_problem(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        for i in range(3):
            journal.append([add(i)])
        assert segment_file(tmp_path).stat().st_size > journal.position.offset  # preallocated
        report = inspect(tmp_path)
        assert report.problem is None
        assert report.records == 3 and report.end == journal.position


@pytest.mark.parametrize("before", [1, 2], ids=["before-the-scan", "during-the-scan"])
def test_segments_released_while_inspect_reads_are_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: int
) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    real: Reader = journal.reader._read

    def releasing(path: Path) -> memoryview:  # a checkpoint releases segments 1 and 2
        if path == segment_file(tmp_path, before):
            for number in (1, 2):
                segment_file(tmp_path, number).unlink(missing_ok=True)
        return real(path)

    monkeypatch.setattr(journal.reader, "_read", releasing)
    report = inspect(tmp_path)
    assert report.problem is None
    assert [s.number for s in report.segments] == sorted({e.segment for e in ends} - {1, 2})
    assert report.records == sum(e.segment > 2 for e in ends)


def test_a_segment_deleted_from_the_middle_while_read_is_a_journal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_log(tmp_path, 400, segment_size=SEGMENT)
    real: Reader = journal.reader._read

    def deleting(path: Path) -> memoryview:
        if path == segment_file(tmp_path, 3):
            path.unlink()
        return real(path)

    monkeypatch.setattr(journal.reader, "_read", deleting)
    with pytest.raises(JournalError, match=str(segment_file(tmp_path, 3))):
        inspect(tmp_path)


def test_a_record_read_while_it_is_written_is_read_again_not_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ends = write_log(tmp_path, 5)
    real: Reader = journal.reader._read
    reads = []

    def mid_write(path: Path) -> memoryview:  # the first read sees record 3 half copied
        data = bytearray(real(path))
        if not reads:
            data[ends[2].offset + 10 : ends[2].offset + 30] = bytes(20)
        reads.append(path)
        return memoryview(bytes(data))

    monkeypatch.setattr(journal.reader, "_read", mid_write)
    report = inspect(tmp_path)
    assert report.problem is None and report.records == 5


def test_recover_names_a_segment_released_under_it(tmp_path: Path) -> None:
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        ends = [journal.append([add(i)]) for i in range(400)]
        records = journal.recover()
        next(records)  # listed the segments, read the first
        journal.release(ends[-1])
        with pytest.raises(JournalError, match="was deleted while the journal was read"):
            list(records)
