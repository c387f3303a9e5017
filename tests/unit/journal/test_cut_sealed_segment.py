"""A sealed segment (one the writer left for the next) cut exactly at a record boundary, by
a bad copy or a file system losing its tail, is damage: the seal the next segment starts
with says how long it was and how many records it held."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from journal import AddMessage, Journal, JournalCorruptError, Position, inspect, repair
from journal.format import HEADER_SIZE
from tests.unit.journal.test_recovery import SEGMENT, ids_of, segment_file, write_log


def cut_after(directory: Path, ends: list[Position], segment: int, lost: int) -> list[int]:
    """Cut ``segment`` at the end of the record ``lost`` records before its last; the ids
    of the records cut away."""
    mine = [i for i, e in enumerate(ends) if e.segment == segment]
    kept, gone = mine[:-lost], mine[-lost:]
    os.truncate(segment_file(directory, segment), ends[kept[-1]].offset)
    return gone


@pytest.mark.parametrize("which", ["first", "before-the-active-one"])
def test_a_sealed_segment_cut_at_a_record_boundary_is_refused_then_repaired(
    tmp_path: Path, which: str
) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    segment = 1 if which == "first" else ends[-1].segment - 1
    assert ends[-1].segment >= 4
    gone = cut_after(tmp_path, ends, segment, 3)
    cut_at = segment_file(tmp_path, segment).stat().st_size

    with pytest.raises(JournalCorruptError, match="cut short") as info:
        Journal.open(tmp_path, segment_size=SEGMENT)
    assert info.value.segment == segment_file(tmp_path, segment) and info.value.offset == cut_at
    assert "3 acknowledged record(s)" in str(info.value)
    assert "mqstore journal repair" in str(info.value)
    report = inspect(tmp_path)
    assert report.problem is not None and report.problem.kind == "corrupt"
    assert report.problem.file == segment_file(tmp_path, segment).name
    assert report.problem.offset == cut_at and "cut short" in report.problem.reason

    dry = repair(tmp_path)
    assert dry.cut_records == 3 and "3 record(s) cut away" in dry.describe()
    assert "would fill" in dry.describe()
    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [
        ("fill", segment_file(tmp_path, segment).name)
    ]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert ids_of(journal) == [i for i in range(len(ends)) if i not in gone]
        # A checkpoint taken after a record cut away replays from the end of the filling.
        records = journal.recover(ends[gone[0]])
        after = [op.id for _, ops in records for op in ops if isinstance(op, AddMessage)]
        assert after == list(range(gone[-1] + 1, len(ends)))
    assert repair(tmp_path).problem is None and inspect(tmp_path).problem is None


def test_the_newest_segment_cut_to_its_bare_header_is_refused(tmp_path: Path) -> None:
    """Its seal was synced before ``newest`` named it: without it, it is no crash."""
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    last = segment_file(tmp_path, ends[-1].segment)
    os.truncate(last, HEADER_SIZE)
    with pytest.raises(JournalCorruptError, match="cut to its header") as info:
        Journal.open(tmp_path, segment_size=SEGMENT)
    assert info.value.segment == last and last.exists()
    problem = inspect(tmp_path).problem
    assert problem is not None and problem.kind == "corrupt" and problem.file == last.name
    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [("remove", last.name)]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert ids_of(journal) == [i for i, e in enumerate(ends) if e.segment != ends[-1].segment]
