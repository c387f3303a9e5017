"""What seals can and cannot tell: a sealed segment that runs on past the end its seal
records, the newest segment cut back to its header and seal, and journals that mix segments
of builds before seals with sealed ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from journal import Journal, JournalCorruptError, inspect, repair
from journal.format import HEADER_SIZE, SEAL_FRAME_SIZE, Position, encode_header, frame_ops
from journal.segments import read_newest
from tests.unit.journal.test_recovery import SEGMENT, add, ids_of, segment_file, write_log
from tests.unit.journal.test_sealed_segments import _write_unsealed_log


def _ids_reopened(directory: Path) -> list[int]:
    with Journal.open(directory, segment_size=SEGMENT) as journal:
        return ids_of(journal)


# -- a sealed segment grown past its seal --------------------------------------------------


@pytest.mark.parametrize("extra", ["records", "zeros"])
def test_a_sealed_segment_that_runs_on_past_its_seal_is_refused_then_cut_back(
    tmp_path: Path, extra: str
) -> None:
    """Bytes after the end the next segment's seal records were written after the writer
    moved on (or the file was replaced): replaying them would put them out of order."""
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    assert ends[-1].segment >= 3
    second = segment_file(tmp_path, 2)
    sealed_end = second.stat().st_size
    records = frame_ops([add(1000)]) + frame_ops([add(1001)])
    tail = records if extra == "records" else bytes(300)
    with open(second, "ab") as fh:
        fh.write(tail)

    with pytest.raises(JournalCorruptError, match="past its sealed end") as info:
        Journal.open(tmp_path, segment_size=SEGMENT)
    assert info.value.segment == second and info.value.offset == sealed_end
    message = str(info.value)
    assert f"ended at offset {sealed_end}" in message and "segment 3" in message
    assert "mqstore journal repair --dry-run" in message
    problem = inspect(tmp_path).problem
    assert problem is not None and problem.kind == "corrupt"
    assert problem.file == second.name and problem.offset == sealed_end

    dry = repair(tmp_path)
    assert [(a.action, a.file, a.offset) for a in dry.actions] == [
        ("truncate", second.name, sealed_end)
    ]
    lost = 2 if extra == "records" else 0
    assert dry.lost_records == lost and dry.lost_bytes == len(tail)
    if lost:
        assert dry.lost_ops_by_type == {"AddMessage": 2}
    assert "past its sealed end" in dry.describe()
    repair(tmp_path, dry_run=False)
    assert second.stat().st_size == sealed_end
    assert _ids_reopened(tmp_path) == list(range(len(ends)))
    assert repair(tmp_path).problem is None and inspect(tmp_path).problem is None


def test_a_sealed_segment_whose_last_record_was_replaced_by_a_longer_one_is_refused(
    tmp_path: Path,
) -> None:
    """A record that starts before the sealed end and ends after it is no record the
    writer left there: refused at its start; repair cuts it and fills up to the seal."""
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    second = segment_file(tmp_path, 2)
    mine = [i for i, e in enumerate(ends) if e.segment == 2]
    sealed_end = second.stat().st_size
    start = ends[mine[-2]].offset  # where its last record starts
    os.truncate(second, start)
    with open(second, "ab") as fh:
        fh.write(frame_ops([add(2000, size=400)]))
    assert second.stat().st_size > sealed_end

    with pytest.raises(JournalCorruptError, match="past its sealed end") as info:
        Journal.open(tmp_path, segment_size=SEGMENT)
    assert info.value.segment == second and info.value.offset == start

    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [
        ("truncate", second.name),
        ("fill", second.name),
    ]
    assert plan.lost_records == 1 and plan.cut_records == 1
    assert second.stat().st_size == sealed_end
    assert _ids_reopened(tmp_path) == [i for i in range(len(ends)) if i != mine[-1]]
    assert repair(tmp_path).problem is None and inspect(tmp_path).problem is None


def test_damage_before_the_sealed_end_is_reported_first(tmp_path: Path) -> None:
    """The overrun check does not hide damage inside the sealed part of a segment."""
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    second = segment_file(tmp_path, 2)
    mine = [i for i, e in enumerate(ends) if e.segment == 2]
    bad = ends[mine[2]].offset + 8  # inside the record after it
    data = bytearray(second.read_bytes())
    data[bad] ^= 0x40
    second.write_bytes(bytes(data) + frame_ops([add(1000)]))
    with pytest.raises(JournalCorruptError, match="checksum") as info:
        Journal.open(tmp_path, segment_size=SEGMENT)
    assert info.value.offset == ends[mine[2]].offset
    plan = repair(tmp_path, dry_run=False)
    assert [a.action for a in plan.actions] == ["truncate", "pad"]
    assert plan.lost_records == 1
    assert _ids_reopened(tmp_path) == [i for i in range(len(ends)) if i != mine[3]]
    assert repair(tmp_path).problem is None and inspect(tmp_path).problem is None


# -- the newest segment cut back to its header and seal ------------------------------------


def test_the_newest_segment_cut_to_its_header_and_seal_cannot_be_told_from_a_crash(
    tmp_path: Path,
) -> None:
    """A limit, not a wish: the writer makes a segment (header and seal, synced, then
    ``newest``) before the record that did not fit in the one before is written, so a crash
    there leaves exactly these bytes. Records cut away from it are not noticed by the
    journal; the database's checkpoint position, where it lies in them, is (see
    ``journal.store``: the journal is then behind the database)."""
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    newest = ends[-1].segment
    os.truncate(segment_file(tmp_path, newest), HEADER_SIZE + SEAL_FRAME_SIZE)
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.recovery_report is None
        assert journal.position == Position(newest, HEADER_SIZE + SEAL_FRAME_SIZE)
        assert journal.position < ends[-1]  # what a stored checkpoint would show
        assert ids_of(journal) == [i for i, e in enumerate(ends) if e.segment < newest]
    assert read_newest(tmp_path) == newest


# -- journals of builds before seals, mixed with sealed segments ---------------------------


def test_a_journal_mixing_segments_with_and_without_seals_replays_whole(
    tmp_path: Path,
) -> None:
    """Segments of an earlier build (flags 0), then sealed ones of this build, then one an
    earlier build wrote again after a downgrade (on the newest, then a new unsealed one)."""
    ids = _write_unsealed_log(tmp_path, 2, 5)
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        ends = [journal.append([add(i)]) for i in range(100, 400)]
    newest = ends[-1].segment
    assert newest >= 4
    with open(segment_file(tmp_path, newest), "ab") as fh:  # the earlier build writes on
        fh.write(frame_ops([add(500)]))
    after = segment_file(tmp_path, newest + 1)
    after.write_bytes(encode_header(newest + 1) + frame_ops([add(501)]))  # ... and rotates
    expected = ids + list(range(100, 400)) + [500, 501]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.recovery_report is None
        assert ids_of(journal) == expected
        journal.append([add(502)])
    assert _ids_reopened(tmp_path) == [*expected, 502]
    assert repair(tmp_path).problem is None and inspect(tmp_path).problem is None


def test_in_a_mixed_journal_only_sealed_segments_tell_a_cut(tmp_path: Path) -> None:
    """A cut of a segment no seal covers goes unnoticed as before (no false alarm); the
    unsealed segment this build sealed when it moved on is told cut."""
    ids = _write_unsealed_log(tmp_path, 3, 5)
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        ends = [journal.append([add(i)]) for i in range(100, 400)]
    assert ends[-1].segment >= 5
    one = len(frame_ops([add(9)]))
    second = segment_file(tmp_path, 2)  # sealed by nothing: segment 3 has no seal
    os.truncate(second, second.stat().st_size - one)
    assert _ids_reopened(tmp_path) == [i for i in ids if i != 9] + list(range(100, 400))
    third = segment_file(tmp_path, 3)  # written by both builds, sealed by segment 4
    os.truncate(third, third.stat().st_size - len(frame_ops([add(100)])))
    with pytest.raises(JournalCorruptError, match="cut short") as info:
        Journal.open(tmp_path, segment_size=SEGMENT)
    assert info.value.segment == third
