"""A segment cut to its bare header while later segments follow: the writer never leaves
one so, so it is damage (its records were lost), and ``repair`` marks the segments it
leaves empty on purpose so they are not taken for it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from journal import Journal, JournalCorruptError, inspect, repair
from journal.format import HEADER_SIZE
from tests.unit.journal.test_recovery import SEGMENT, add, ids_of, segment_file, write_log


def test_a_middle_segment_cut_to_its_header_refuses_to_open_instead_of_losing_its_records(
    tmp_path: Path,
) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    assert max(e.segment for e in ends) >= 3
    os.truncate(segment_file(tmp_path, 2), HEADER_SIZE)  # a bad copy kept only the header
    with pytest.raises(JournalCorruptError, match="holds no records") as info:
        Journal.open(tmp_path, segment_size=SEGMENT)
    assert "mqstore journal repair" in str(info.value)
    report = inspect(tmp_path)
    assert report.problem is not None and report.problem.file == segment_file(tmp_path, 2).name


def test_repair_marks_a_middle_segment_cut_to_its_header_and_keeps_the_later_records(
    tmp_path: Path,
) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    lost = sum(e.segment == 2 for e in ends)
    os.truncate(segment_file(tmp_path, 2), HEADER_SIZE)
    dry = repair(tmp_path)
    assert "holds no records" in dry.describe() and "records it held are lost" in dry.describe()
    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [("mark", segment_file(tmp_path, 2).name)]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        kept = ids_of(journal)
    assert len(kept) == len(ends) - lost and kept[-1] == len(ends) - 1
    assert repair(tmp_path).problem is None


def test_the_stand_in_repair_creates_for_a_missing_middle_segment_opens(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    lost = sum(e.segment == 2 for e in ends)
    segment_file(tmp_path, 2).unlink()
    repair(tmp_path, dry_run=False)
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert len(ids_of(journal)) == len(ends) - lost
    assert repair(tmp_path).problem is None and inspect(tmp_path).problem is None


def test_repair_that_empties_a_middle_segment_leaves_a_journal_that_opens(
    tmp_path: Path,
) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    second = segment_file(tmp_path, 2)
    size = second.stat().st_size
    with open(second, "r+b") as fh:  # every record of it zeroed: nothing readable is left
        fh.seek(HEADER_SIZE)
        fh.write(bytes(size - HEADER_SIZE))
    repair(tmp_path, dry_run=False)
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert ids_of(journal)[-1] == len(ends) - 1
    assert repair(tmp_path).problem is None


def test_repair_of_missing_newest_segments_leaves_a_journal_that_opens(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    last = max(e.segment for e in ends)
    segment_file(tmp_path, last).unlink()
    segment_file(tmp_path, last - 1).unlink()
    repair(tmp_path, dry_run=False)  # two empty stand-ins: the first is a middle one
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        journal.append([add(10_000)])
    assert repair(tmp_path).problem is None
