"""The last record of a journal: a complete one damaged since it was written is refused and
kept, one a power loss cut short (sectors of it never written) is a torn tail and cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import AddMessage, Journal, JournalCorruptError, repair
from tests.unit.journal.test_recovery import flip, ids_of, segment_file, tear

#: A message body without a zero byte: a record holding it has no zero sector of its own.
BODY = bytes(range(1, 251)) * 2


def _killed_writer_log(directory: Path) -> list[int]:
    """Three records, their writer killed: its zero-filled space still follows them.

    Returns the offsets: where the first record starts, then where each one ends.
    """
    with Journal.open(directory) as journal:
        start = journal.position.offset
        ends = [
            journal.append([AddMessage(i, "queue://orders", f"ID:p-{i}", i, 0, 4, BODY, None)])
            for i in range(3)
        ]
    with open(segment_file(directory), "ab") as f:
        f.write(bytes(1024 * 1024))
    return [start] + [e.offset for e in ends]


@pytest.mark.parametrize("where", ["type", "payload", "checksum"])
def test_a_flipped_byte_in_the_last_record_is_refused_and_kept(tmp_path: Path, where: str) -> None:
    offsets = _killed_writer_log(tmp_path)
    start, end = offsets[2], offsets[3]
    at = {"type": start + 4, "payload": (start + end) // 2, "checksum": end - 1}[where]
    path = segment_file(tmp_path)
    flip(path, at)
    before = path.read_bytes()
    with pytest.raises(JournalCorruptError) as info:
        Journal.open(tmp_path)
    assert (info.value.segment, info.value.offset) == (path, start)
    assert f"mqstore journal repair {tmp_path}" in str(info.value)
    assert path.read_bytes() == before


def test_a_flipped_byte_in_the_last_record_at_the_end_of_the_file_is_refused(
    tmp_path: Path,
) -> None:
    offsets = _killed_writer_log(tmp_path)
    path = segment_file(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(offsets[3])
    flip(path, (offsets[2] + offsets[3]) // 2)
    before = path.read_bytes()
    with pytest.raises(JournalCorruptError):
        Journal.open(tmp_path)
    assert path.read_bytes() == before


def test_a_last_record_with_a_zeroed_sector_is_a_torn_tail(tmp_path: Path) -> None:
    offsets = _killed_writer_log(tmp_path)
    tear(segment_file(tmp_path), offsets[2], offsets[3])
    with Journal.open(tmp_path) as journal:
        report = journal.recovery_report
        assert report is not None and report.offset == offsets[2]
        assert "checksum" in report.reason
        assert ids_of(journal) == [0, 1]


def test_repair_pads_over_the_damaged_last_record_then_the_journal_opens(
    tmp_path: Path,
) -> None:
    offsets = _killed_writer_log(tmp_path)
    start, end = offsets[2], offsets[3]
    flip(segment_file(tmp_path), (start + end) // 2)
    plan = repair(tmp_path, dry_run=True)
    assert plan.problem is not None and plan.problem.kind == "corrupt"
    # padded over in place: the log still reaches `end`, where a checkpoint may be
    assert [(a.action, a.offset, a.end) for a in plan.actions] == [("pad", start, end)]
    assert plan.lost_bytes == end - start  # the zero-filled space after it is not lost
    text = plan.describe()
    assert f"at offset {start}: record checksum (CRC32C) mismatch" in text
    assert f"would pad {segment_file(tmp_path).name} bytes {start}..{end}" in text
    assert f"the {end - start} unreadable bytes" in text
    assert repair(tmp_path, dry_run=False).applied
    with Journal.open(tmp_path) as journal:
        report = journal.recovery_report  # only the writer's zero-filled space is trimmed
        assert report is None or report.reason.endswith(" zero bytes"), report
        assert ids_of(journal) == [0, 1]
