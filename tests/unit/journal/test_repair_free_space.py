"""``repair`` after a crash: the zeroed space a killed writer leaves is free, not lost."""

from __future__ import annotations

from pathlib import Path

from journal import Journal, repair
from tests.unit.journal.test_recovery import ids_of, segment_file, tear, write_log


def _crashed(directory: Path) -> list[int]:
    """A log of 5 records whose writer was killed: its preallocated zeros are still there."""
    ends = write_log(directory, 5, body=600)
    with open(segment_file(directory), "ab") as f:
        f.write(bytes(1024 * 1024))
    return [e.offset for e in ends]


def test_the_zeroed_space_of_a_killed_writer_is_nothing_to_repair(tmp_path: Path) -> None:
    _crashed(tmp_path)
    plan = repair(tmp_path, dry_run=True)
    assert plan.problem is None and plan.lost_bytes == 0
    assert plan.describe() == f"journal {tmp_path} is intact; nothing to repair"
    assert not repair(tmp_path, dry_run=False).actions
    with Journal.open(tmp_path) as journal:
        assert ids_of(journal) == [0, 1, 2, 3, 4]


def test_a_torn_record_before_the_zeroed_space_is_still_cut(tmp_path: Path) -> None:
    ends = _crashed(tmp_path)
    tear(segment_file(tmp_path), ends[3], ends[4])  # the last record, being written
    plan = repair(tmp_path, dry_run=False)
    assert plan.problem is not None and plan.problem.kind == "torn-tail"
    assert [(a.action, a.offset) for a in plan.actions] == [("truncate", ends[3])]
    assert plan.lost_bytes == ends[4] - ends[3]
    with Journal.open(tmp_path) as journal:
        assert ids_of(journal) == [0, 1, 2, 3]
