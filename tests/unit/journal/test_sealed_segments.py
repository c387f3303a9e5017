"""Seals: each segment the writer leaves is sealed by the next one (its length and record
count), so a sealed segment cut exactly at a record boundary is damage, not an intact log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from journal import Journal, JournalCorruptError, inspect, repair
from journal.format import (
    FLAG_SEALS_PREVIOUS,
    HEADER_SIZE,
    SEAL_FRAME_SIZE,
    Position,
    Seal,
    encode_header,
    encode_seal,
    frame_ops,
)
from journal.reader import read_seal
from journal.segments import NEWEST_FILE_NAME, read_newest
from tests.unit.journal.test_cut_sealed_segment import cut_after
from tests.unit.journal.test_recovery import SEGMENT, add, ids_of, segment_file, write_log


def test_a_segment_cut_to_its_header_and_seal_is_refused_then_marked(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    second = segment_file(tmp_path, 2)
    os.truncate(second, HEADER_SIZE + SEAL_FRAME_SIZE)  # every record of it cut away
    with pytest.raises(JournalCorruptError, match="holds no records"):
        Journal.open(tmp_path, segment_size=SEGMENT)
    lost = sum(e.segment == 2 for e in ends)
    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [("mark", second.name)]
    assert plan.cut_records == lost
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert len(ids_of(journal)) == len(ends) - lost
    assert repair(tmp_path).problem is None


def test_one_repair_fills_a_cut_segment_whose_successor_has_a_bad_header(
    tmp_path: Path,
) -> None:
    """The seal behind a damaged header still counts, and the header written again keeps
    the flag that says the seal is there."""
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    gone = cut_after(tmp_path, ends, 2, 2)
    third = segment_file(tmp_path, 3)
    data = bytearray(third.read_bytes())
    data[2] ^= 0x40  # the magic
    third.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError, match="magic"):
        Journal.open(tmp_path, segment_size=SEGMENT)
    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [
        ("fill", segment_file(tmp_path, 2).name),
        ("header", third.name),
    ]
    assert plan.cut_records == 2
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert ids_of(journal) == [i for i in range(len(ends)) if i not in gone]
    with open(third, "rb") as fh:
        assert read_seal(memoryview(fh.read())) is not None
    assert repair(tmp_path).problem is None


def test_the_seal_counts_records_written_before_a_reopen(tmp_path: Path) -> None:
    """The writer counts the records of the segment it reopens, so its seal is right."""
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        first = [journal.append([add(i)]) for i in range(10)]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        ends = first + [journal.append([add(i)]) for i in range(10, 200)]
    assert ends[-1].segment > 1
    in_first = sum(e.segment == 1 for e in ends)
    with open(segment_file(tmp_path, 2), "rb") as fh:
        data = memoryview(fh.read())
    assert read_seal(data) == Seal(1, ends[in_first - 1].offset, in_first)
    cut_after(tmp_path, ends, 1, 1)
    with pytest.raises(JournalCorruptError, match=r"1 acknowledged record\(s\)"):
        Journal.open(tmp_path, segment_size=SEGMENT)


# -- crashes during rotation ---------------------------------------------------------------


def _rotation_cut_short(directory: Path, tail: bytes) -> tuple[list[Position], Path]:
    """A journal whose writer died creating its next segment: the new file holds ``tail``
    (the `newest` file still names the segment before it, as it is written after)."""
    ends = write_log(directory, 3)
    nxt = segment_file(directory, 2)
    nxt.write_bytes(tail)
    assert read_newest(directory) == 1
    return ends, nxt


@pytest.mark.parametrize(
    "tail",
    [
        encode_header(2, FLAG_SEALS_PREVIOUS),
        encode_header(2, FLAG_SEALS_PREVIOUS) + bytes(SEAL_FRAME_SIZE),
        encode_header(2, FLAG_SEALS_PREVIOUS) + encode_seal(Seal(1, 100, 3))[:-5],
    ],
    ids=["header-only", "header-and-zeros", "torn-seal"],
)
def test_a_crash_before_the_new_segment_and_its_seal_were_synced_loses_nothing(
    tmp_path: Path, tail: bytes
) -> None:
    ends, nxt = _rotation_cut_short(tmp_path, tail)
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        report = journal.recovery_report
        assert report is not None and report.removed_file and report.segment == 2
        assert ids_of(journal) == [0, 1, 2] and journal.position == ends[-1]
        more = [journal.append([add(i)]) for i in range(3, 300)]  # written on, then rotates
    assert more[-1].segment >= 2  # made again, sealing segment 1 as it now is
    with open(nxt, "rb") as fh:
        seal = read_seal(memoryview(fh.read()))
    first = segment_file(tmp_path, 1)
    assert seal == Seal(1, first.stat().st_size, sum(e.segment == 1 for e in ends + more))
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.recovery_report is None
        assert ids_of(journal) == list(range(300))
    assert repair(tmp_path).problem is None and inspect(tmp_path).problem is None


def test_a_crash_after_the_new_segment_was_synced_but_not_recorded_newest(
    tmp_path: Path,
) -> None:
    """The new segment and its seal made it; ``newest`` was not written yet."""
    first = segment_file(tmp_path, 1)
    ends = write_log(tmp_path, 3)
    seal = Seal(1, first.stat().st_size, 3)
    nxt = segment_file(tmp_path, 2)
    nxt.write_bytes(encode_header(2, FLAG_SEALS_PREVIOUS) + encode_seal(seal))
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.recovery_report is None
        assert read_newest(tmp_path) == 2
        assert journal.position == Position(2, HEADER_SIZE + SEAL_FRAME_SIZE)
        assert journal.start_position == Position(1, HEADER_SIZE)
        assert ids_of(journal) == [0, 1, 2] and ends[-1].segment == 1
        journal.append([add(3)])
    assert ids_of_reopened(tmp_path) == [0, 1, 2, 3]
    os.truncate(first, ends[1].offset)  # the seal now tells the cut
    with pytest.raises(JournalCorruptError, match="cut short"):
        Journal.open(tmp_path, segment_size=SEGMENT)


def ids_of_reopened(directory: Path) -> list[int]:
    with Journal.open(directory, segment_size=SEGMENT) as journal:
        return ids_of(journal)


def test_a_log_holding_only_a_seal_holds_no_records(tmp_path: Path) -> None:
    """After a release, the seal a segment starts with is no record: the journal is empty
    (start-up then needs no database row or journal id for it)."""
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        ends = [journal.append([add(i, 1000)]) for i in range(20)]
        while journal.position.segment == ends[-1].segment:
            journal.append([add(99, 1000)])
        journal.release(Position(journal.position.segment, 0))
        journal.release(journal.position)
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.stats().segments == 1
        assert journal.position.offset > HEADER_SIZE + SEAL_FRAME_SIZE  # the record after
    segment = journal.position.segment
    os.truncate(segment_file(tmp_path, segment), HEADER_SIZE + SEAL_FRAME_SIZE)
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.position == journal.start_position
        assert journal.position == Position(segment, HEADER_SIZE + SEAL_FRAME_SIZE)
        assert list(journal.recover()) == []


# -- journals of earlier builds ------------------------------------------------------------


def _write_unsealed_log(directory: Path, segments: int, per_segment: int) -> list[int]:
    """A journal as builds before seals wrote it: flags 0, no seal, sealed segments
    trimmed to their last record."""
    directory.mkdir(parents=True, exist_ok=True)
    ids = []
    for number in range(1, segments + 1):
        frames = []
        for k in range(per_segment):
            i = (number - 1) * per_segment + k
            frames.append(frame_ops([add(i)]))
            ids.append(i)
        segment_file(directory, number).write_bytes(encode_header(number) + b"".join(frames))
    return ids


def test_a_journal_written_without_seals_opens_and_replays_as_before(tmp_path: Path) -> None:
    ids = _write_unsealed_log(tmp_path, 3, 5)
    assert not (tmp_path / NEWEST_FILE_NAME).exists()
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.recovery_report is None
        assert ids_of(journal) == ids
        assert journal.start_position == Position(1, HEADER_SIZE)
        ends = [journal.append([add(i)]) for i in range(100, 300)]  # rotates: seals from now
    assert ends[-1].segment > 3
    with open(segment_file(tmp_path, 4), "rb") as fh:
        seal = read_seal(memoryview(fh.read()))
    assert (
        seal is not None
        and seal.segment == 3
        and seal.records == 5 + sum(e.segment == 3 for e in ends)
    )
    assert ids_of_reopened(tmp_path) == ids + list(range(100, 300))
    assert repair(tmp_path).problem is None and inspect(tmp_path).problem is None


def test_an_unsealed_segment_cut_at_a_record_boundary_still_goes_unnoticed(
    tmp_path: Path,
) -> None:
    """Nothing seals the segments of earlier builds: such a cut cannot be told (as before)."""
    ids = _write_unsealed_log(tmp_path, 3, 5)
    second = segment_file(tmp_path, 2)
    data = second.read_bytes()
    second.write_bytes(data[: len(data) - len(frame_ops([add(9)]))])  # its last record
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert ids_of(journal) == [i for i in ids if i != 9]
