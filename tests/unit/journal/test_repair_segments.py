"""``repair`` of damaged segment files: only what cannot be read is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import AddMessage, Journal, JournalCorruptError, JournalError, Position, repair
from tests.unit.journal.test_recovery import SEGMENT, flip, ids_of, segment_file, write_log


def ids_of_after(journal: Journal, after: Position) -> list[int]:
    return [op.id for _, ops in journal.recover(after) for op in ops if isinstance(op, AddMessage)]


def test_an_emptied_middle_segment_gets_its_header_back_and_the_later_ones_stay(
    tmp_path: Path,
) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    emptied = segment_file(tmp_path, 2)
    lost = sum(e.segment == 2 for e in ends)
    emptied.write_bytes(b"")  # truncated to zero by a bad copy or a full disk
    with pytest.raises(JournalCorruptError, match="header"):
        Journal.open(tmp_path, segment_size=SEGMENT)
    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [
        ("header", emptied.name),
        ("mark", emptied.name),  # padded up to the length segment 3's seal says
    ]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        kept = ids_of(journal)
    assert len(kept) == len(ends) - lost and kept == sorted(kept)
    assert kept[-1] == len(ends) - 1


def test_a_bad_segment_header_is_written_again_keeping_its_records(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    flip(segment_file(tmp_path, 2), 2)  # the magic
    with pytest.raises(JournalCorruptError, match="magic"):
        Journal.open(tmp_path, segment_size=SEGMENT)
    plan = repair(tmp_path, dry_run=False)
    assert [a.action for a in plan.actions] == ["header"] and plan.lost_records == 0
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert ids_of(journal) == list(range(len(ends)))


def test_two_bad_records_in_different_segments_are_both_padded(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    for segment in (1, 3):
        start = next(e for e in ends if e.segment == segment).offset
        flip(segment_file(tmp_path, segment), start + 5)  # the second record of each
    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [
        ("pad", segment_file(tmp_path, 1).name),
        ("pad", segment_file(tmp_path, 3).name),
    ]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert len(ids_of(journal)) == len(ends) - 2
    assert repair(tmp_path).problem is None


def test_a_checkpoint_beyond_a_cut_segment_replays_from_the_next_one(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    last_of_2 = max(i for i, e in enumerate(ends) if e.segment == 2)
    checkpoint = ends[last_of_2]  # a checkpoint taken when segment 2 was the active one
    flip(segment_file(tmp_path, 2), ends[last_of_2 - 1].offset + 20)  # its last record
    plan = repair(tmp_path, dry_run=False)
    # Padded up to its sealed end, not cut: the checkpoint is then that padding's end.
    assert [(a.action, a.offset) for a in plan.actions] == [("pad", ends[last_of_2 - 1].offset)]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert ids_of_after(journal, checkpoint) == list(range(last_of_2 + 1, len(ends)))
        with pytest.raises(JournalError, match="not a record boundary"):
            list(journal.recover(Position(2, ends[last_of_2 - 2].offset - 1)))
