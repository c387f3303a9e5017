"""Newest segments that are gone: the journal refuses to start without them, says which
and what to do, and ``repair`` accepts their loss."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import Journal, JournalError, JournalTailMissingError, inspect, repair
from journal.segments import NEWEST_FILE_NAME
from tests.unit.journal.test_recovery import SEGMENT, add, ids_of, segment_file, write_log


def test_a_deleted_newest_segment_is_refused_then_repaired(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    newest = ends[-1].segment
    assert newest >= 3
    segment_file(tmp_path, newest).unlink()
    with pytest.raises(JournalTailMissingError) as info:
        Journal.open(tmp_path, segment_size=SEGMENT)
    message = str(info.value)
    assert f"missing its newest segment {newest} " in message
    assert f"`mqstore journal repair {tmp_path}`" in message
    assert segment_file(tmp_path, newest - 1).exists()  # the refusal changed nothing
    problem = inspect(tmp_path).problem
    assert problem is not None and problem.kind == "missing" and problem.segment == newest

    plan = repair(tmp_path, dry_run=True)
    assert [(a.action, a.file) for a in plan.actions] == [
        ("create", segment_file(tmp_path, newest).name)
    ]
    assert "would create an empty" in plan.describe()
    repair(tmp_path, dry_run=False)
    assert inspect(tmp_path).problem is None
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert ids_of(journal) == [i for i, e in enumerate(ends) if e.segment != newest]
        after = journal.append([add(10_000)])
        assert after.segment == newest  # numbering goes on where the lost segment was


def test_every_segment_deleted_is_refused(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    for path in tmp_path.glob("*.wal"):
        path.unlink()
    with pytest.raises(JournalTailMissingError, match=f"newest segment {ends[-1].segment} "):
        Journal.open(tmp_path, segment_size=SEGMENT)


def test_two_missing_segments_are_named_and_made_again(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    newest = ends[-1].segment
    segment_file(tmp_path, newest).unlink()
    segment_file(tmp_path, newest - 1).unlink()
    with pytest.raises(JournalTailMissingError, match=f"segments {newest - 1} to {newest} "):
        Journal.open(tmp_path, segment_size=SEGMENT)
    plan = repair(tmp_path, dry_run=False)
    assert [a.file for a in plan.actions] == [
        segment_file(tmp_path, n).name for n in (newest - 1, newest)
    ]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.position.segment == newest


def test_a_journal_of_an_earlier_version_is_opened_and_then_watched(tmp_path: Path) -> None:
    """A journal made before the directory recorded its newest segment opens as before,
    and from then on losing its newest segment is noticed."""
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    (tmp_path / NEWEST_FILE_NAME).unlink()
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.position == ends[-1]
    segment_file(tmp_path, ends[-1].segment).unlink()
    with pytest.raises(JournalTailMissingError):
        Journal.open(tmp_path, segment_size=SEGMENT)


def test_repair_that_cuts_the_log_short_leaves_a_journal_that_opens(tmp_path: Path) -> None:
    """Where repair removes the later segments (a header naming another segment), the
    journal then ends there: the segments it cut are not reported missing."""
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    middle = segment_file(tmp_path, 2)
    segment_file(tmp_path, 3).replace(tmp_path / "elsewhere")
    middle.rename(segment_file(tmp_path, 3))  # a header that names segment 2, in file 3
    segment_file(tmp_path, 2).write_bytes(b"")
    with pytest.raises(JournalError):
        Journal.open(tmp_path, segment_size=SEGMENT)
    plan = repair(tmp_path, dry_run=False)
    assert plan.remove_files
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        assert journal.position.segment < ends[-1].segment
