"""Recovery: torn tails are truncated, damage elsewhere is refused, repair, real crashes."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from journal import (
    AddMessage,
    CheckpointMark,
    Journal,
    JournalCorruptError,
    JournalLockedError,
    Position,
    PurgeDestination,
    inspect,
    repair,
)
from journal.format import FRAME_OVERHEAD, HEADER_SIZE, RECORD_BATCH, encode_frame

REPO = Path(__file__).resolve().parents[3]
SEGMENT = 8192


def add(i: int, size: int = 40) -> AddMessage:
    return AddMessage(i, "queue://orders", f"ID:prod-{i}", i, 0, 4, bytes(size), None)


def ids_of(journal: Journal) -> list[int]:
    return [op.id for _, ops in journal.recover() for op in ops if isinstance(op, AddMessage)]


def write_log(directory: Path, count: int, body: int = 40, **options: object) -> list[Position]:
    with Journal.open(directory, **options) as journal:  # type: ignore[arg-type]
        return [journal.append([add(i, body)]) for i in range(count)]


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def tear(path: Path, start: int, end: int) -> None:
    """Zero record ``start..end`` from its first 512-byte sector boundary on: a write of it
    that a power loss cut short, its later sectors never written."""
    boundary = (start // 512 + 1) * 512
    assert boundary < end, "the record lies in one sector"
    data = bytearray(path.read_bytes())
    data[boundary:end] = bytes(end - boundary)
    path.write_bytes(bytes(data))


def segment_file(directory: Path, number: int = 1) -> Path:
    return directory / f"{number:016d}.wal"


def test_a_last_record_cut_short_at_every_offset_is_refused_then_repaired(
    tmp_path: Path,
) -> None:
    """A file ending inside a record was cut since (the writer writes records only into
    space it zero-filled and synced first): the record may have been acknowledged."""
    original = tmp_path / "original"
    ends = write_log(original, 3)
    start, end = ends[1].offset, ends[2].offset
    for cut in range(start + 1, end):
        work = tmp_path / f"cut{cut}"
        shutil.copytree(original, work)
        os.truncate(segment_file(work), cut)
        with pytest.raises(JournalCorruptError, match="repair") as info:
            Journal.open(work)
        assert (info.value.segment, info.value.offset) == (segment_file(work), start)
        plan = repair(work, dry_run=False)
        assert [(a.action, a.offset) for a in plan.actions] == [("truncate", start)]
        with Journal.open(work) as journal:
            assert journal.recovery_report is None
            assert ids_of(journal) == [0, 1]
            journal.append([add(7)])
        with Journal.open(work) as journal:
            assert journal.recovery_report is None
            assert ids_of(journal) == [0, 1, 7]
        shutil.rmtree(work)


def test_a_last_record_with_unwritten_sectors_and_trailing_zeros_are_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ends = write_log(tmp_path, 3, body=600)
    tear(segment_file(tmp_path), ends[1].offset, ends[2].offset)
    with caplog.at_level(logging.WARNING, logger="journal"), Journal.open(tmp_path) as journal:
        assert ids_of(journal) == [0, 1]
        report = journal.recovery_report
        assert report is not None and "checksum" in report.reason
        assert report.dropped_bytes == ends[2].offset - ends[1].offset
    assert "torn tail" in caplog.text
    with open(segment_file(tmp_path), "ab") as f:
        f.write(bytes(4096))
    with Journal.open(tmp_path) as journal:
        assert ids_of(journal) == [0, 1]
        report = journal.recovery_report
        assert report is not None and report.dropped_bytes == 4096 and "zero" in report.reason


def test_torn_header_of_a_new_last_segment_is_removed(tmp_path: Path) -> None:
    write_log(tmp_path, 3)
    segment_file(tmp_path, 2).write_bytes(b"MQSJ")
    with Journal.open(tmp_path) as journal:
        report = journal.recovery_report
        assert report is not None and report.removed_file and report.segment == 2
        assert ids_of(journal) == [0, 1, 2]
    assert not segment_file(tmp_path, 2).exists()


def test_mid_log_corruption_is_refused_then_repaired(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 6)
    path = segment_file(tmp_path)
    bad_start = ends[1].offset
    flip(path, bad_start + 20)
    before = path.read_bytes()
    with pytest.raises(JournalCorruptError) as info:
        Journal.open(tmp_path)
    err = info.value
    assert (err.segment, err.offset) == (path, bad_start)
    assert str(path) in str(err) and f"offset {bad_start}" in str(err)
    assert f"mqstore journal repair {tmp_path}" in str(err)

    report = inspect(tmp_path)
    assert report.problem is not None and report.problem.kind == "corrupt"
    assert report.records == 2

    plan = repair(tmp_path, dry_run=True)
    assert path.read_bytes() == before and not plan.applied
    bad_end = ends[2].offset
    assert [(a.action, a.file, a.offset, a.end) for a in plan.actions] == [
        ("pad", path.name, bad_start, bad_end)
    ]
    assert plan.lost_bytes == bad_end - bad_start
    assert plan.lost_records == 0 and plan.lost_ops_by_type == {}  # only the bad one goes
    assert f"offset {bad_start}" in plan.describe()

    applied = repair(tmp_path, dry_run=False)
    assert applied.applied and path.stat().st_size == len(before)
    with Journal.open(tmp_path) as journal:
        assert journal.recovery_report is None
        assert ids_of(journal) == [0, 1, 3, 4, 5]
        assert [end for end, _ in journal.recover(after=ends[3])] == ends[4:]
    assert repair(tmp_path).problem is None


def test_damage_in_an_earlier_segment_is_corruption(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    assert ends[-1].segment >= 4
    first = segment_file(tmp_path, 1)
    size = first.stat().st_size
    os.truncate(first, size - 3)  # torn-shaped, but not in the last segment
    with pytest.raises(JournalCorruptError) as info:
        Journal.open(tmp_path, segment_size=SEGMENT)
    assert info.value.segment == first
    plan = repair(tmp_path, dry_run=False)
    # Padded, not cut: the seal segment 2 starts with records segment 1's length.
    assert [(a.action, a.file) for a in plan.actions] == [("pad", first.name)]
    assert plan.lost_records == 0 and plan.remove_files == []
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:  # later segments kept
        kept = ids_of(journal)
    assert len(kept) == len(ends) - 1 and kept == sorted(kept)


def test_gap_and_bad_header_are_corruption(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 400, segment_size=SEGMENT)
    segment_file(tmp_path, 2).unlink()
    with pytest.raises(JournalCorruptError, match="gap in segment numbers"):
        Journal.open(tmp_path, segment_size=SEGMENT)
    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [
        ("create", segment_file(tmp_path, 2).name),
        ("fill", segment_file(tmp_path, 2).name),  # up to the length segment 3's seal says
    ]
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:  # the later ones stay
        assert journal.position == ends[-1]
        assert ids_of(journal) == [i for i, e in enumerate(ends) if e.segment != 2]
    assert ends[-1].segment > 2

    other = tmp_path / "other"
    write_log(other, 400, segment_size=SEGMENT)
    flip(segment_file(other, 2), 2)
    with pytest.raises(JournalCorruptError, match="magic") as info:
        Journal.open(other, segment_size=SEGMENT)
    assert info.value.offset == 0


def test_inspect_reports_segments_types_and_checkpoint(tmp_path: Path) -> None:
    with Journal.open(tmp_path, segment_size=SEGMENT) as journal:
        for i in range(200):
            journal.append([add(i), PurgeDestination("queue://x")])
        mark = journal.position
        journal.append([CheckpointMark(mark.segment, mark.offset)])
        end = journal.position
    report = inspect(tmp_path)
    assert report.problem is None
    assert report.records == 201
    assert report.records_by_type == {"batch": 200, "checkpoint": 1}
    assert report.ops_by_type == {"AddMessage": 200, "PurgeDestination": 200, "CheckpointMark": 1}
    assert report.last_checkpoint == mark
    assert report.end == end
    assert [s.number for s in report.segments] == list(range(1, end.segment + 1))
    assert sum(s.records or 0 for s in report.segments) == 201
    assert report.segments[0].first == Position(1, HEADER_SIZE)
    data = report.to_dict()
    assert data["last_checkpoint"] == str(mark)
    assert data["segments"][0]["file"] == "0000000000000001.wal"


CHILD = textwrap.dedent(
    """
    import sys
    from journal import AddMessage, Journal
    journal = Journal.open(sys.argv[1], segment_size=16384, sync_policy="always")
    print("open", flush=True)
    i = 0
    while True:
        end = journal.append([AddMessage(i, "queue://crash", None, None, 0, 4, bytes(300), None)])
        print(i, end, flush=True)
        i += 1
    """
)


def test_sigkill_loses_no_acknowledged_record(tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "open"
        with pytest.raises(JournalLockedError, match=str(directory)):
            Journal.open(directory)
        acknowledged: list[int] = []
        while len(acknowledged) < 300:
            line = child.stdout.readline()
            assert line, "journal writer died"
            acknowledged.append(int(line.split()[0]))
        child.send_signal(signal.SIGKILL)
        acknowledged += [int(line.split()[0]) for line in child.stdout if len(line.split()) == 2]
    finally:
        child.kill()
        child.wait()
    with Journal.open(directory, segment_size=16384) as journal:
        recovered = ids_of(journal)
    assert recovered == list(range(len(recovered)))
    assert set(acknowledged) <= set(recovered)
    assert journal.position.segment > 1


def test_a_record_that_does_not_decode_is_refused_then_repaired(tmp_path: Path) -> None:
    ends = write_log(tmp_path, 3)
    path = segment_file(tmp_path)
    start, end = ends[0].offset, ends[1].offset
    data = bytearray(path.read_bytes())
    garbage = encode_frame(RECORD_BATCH, b"\xff" * (end - start - FRAME_OVERHEAD))
    assert len(garbage) == end - start  # a valid checksum over bytes that are no record
    data[start:end] = garbage
    path.write_bytes(bytes(data))
    with Journal.open(tmp_path) as journal, pytest.raises(JournalCorruptError) as info:
        list(journal.recover())
    assert "undecodable record" in str(info.value) and "journal repair" in str(info.value)
    plan = repair(tmp_path, dry_run=False)
    assert [(a.action, a.offset, a.end) for a in plan.actions] == [("pad", start, end)]
    assert plan.lost_records == 0 and plan.applied  # the readable record after it is kept
    with Journal.open(tmp_path) as journal:
        assert ids_of(journal) == [0, 2]


@pytest.mark.parametrize("crashed", [False, True], ids=["closed", "preallocated"])
def test_a_bad_length_in_the_last_segment_is_corruption_not_a_torn_tail(
    tmp_path: Path, crashed: bool
) -> None:
    ends = write_log(tmp_path, 5)
    path = segment_file(tmp_path)
    bad_start = ends[1].offset
    if crashed:  # the length now ends inside the zeroed space a killed writer leaves
        flip(path, bad_start + 1)
        with open(path, "ab") as f:
            f.write(bytes(64 * 1024))
    else:  # the length now runs past the end of the file
        flip(path, bad_start + 3)
    with pytest.raises(JournalCorruptError) as info:  # records 3 and 4 were acknowledged
        Journal.open(tmp_path)
    assert (info.value.segment, info.value.offset) == (path, bad_start)
    plan = repair(tmp_path, dry_run=False)
    first = plan.actions[0]  # the zeroed space after it is free space, left to open
    assert (first.action, first.offset, first.end) == ("pad", bad_start, ends[2].offset)
    with Journal.open(tmp_path) as journal:
        assert ids_of(journal) == [0, 1, 3, 4]
