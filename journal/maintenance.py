"""Offline inspection of a journal directory (read-only), and helpers ``repair`` shares."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from journal.errors import JournalDecodeError
from journal.format import (
    RECORD_BATCH,
    RECORD_CHECKPOINT,
    RECORD_PADDING,
    Position,
    segment_file_name,
)
from journal.frames import Frame, FrameWalker, resync
from journal.reader import scan_log
from journal.records import CheckpointMark, decode_batch, flatten, op_name
from journal.scans import Damage, SegmentScan
from journal.segments import missing_after, read_newest

__all__ = [
    "InspectReport",
    "Problem",
    "SegmentInfo",
    "count_frames",
    "inspect",
    "jsonable",
    "problem_of",
    "resync",
]


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment file: size, valid records, first/last record start, end of valid data."""

    number: int
    file: str
    size: int
    records: int | None
    first: Position | None = None
    last: Position | None = None
    end: Position | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """The first damage: ``kind`` is ``"torn-tail"`` (dropped on open), ``"corrupt"``, or
    ``"missing"`` (newest segments the directory made are gone)."""

    kind: str
    segment: int
    file: str
    offset: int
    bytes_after: int
    reason: str


_RECORD_NAMES = {RECORD_BATCH: "batch", RECORD_CHECKPOINT: "checkpoint", RECORD_PADDING: "padding"}


def jsonable(value: Any) -> Any:
    if isinstance(value, Position):
        return str(value)
    if isinstance(value, Path):
        return str(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


@dataclass(slots=True)
class InspectReport:
    """Read-only summary of a journal directory."""

    directory: Path
    segments: list[SegmentInfo] = field(default_factory=list)
    records: int = 0
    records_by_type: dict[str, int] = field(default_factory=dict)
    ops_by_type: dict[str, int] = field(default_factory=dict)
    last_checkpoint: Position | None = None
    last_checkpoint_record: Position | None = None
    end: Position | None = None
    problem: Problem | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (positions as ``SEGMENT:OFFSET`` text)."""
        return dict(jsonable(self))


def problem_of(damage: Damage) -> Problem:
    kind = "torn-tail" if damage.torn else "corrupt"
    return Problem(
        kind, damage.segment, damage.path.name, damage.offset, damage.bytes_after, damage.reason
    )


def _info(seg: SegmentScan) -> SegmentInfo:
    return SegmentInfo(
        seg.number, seg.path.name, seg.size, seg.records, seg.first, seg.last, seg.end
    )


def inspect(directory: str | os.PathLike[str]) -> InspectReport:
    """Summarise a journal directory without locking or modifying it.

    Decodes every record to count operations by type and find the last CheckpointMark.
    Safe beside a live writer: its zero-filled space after the last record is no problem,
    segments it releases during the scan are left out, and damage found in the last
    segment (maybe a record it was writing) is looked at again before it is reported.
    """
    path = Path(directory)
    report, damage = _inspect_once(path)
    if damage is not None and report.segments and damage.segment == report.segments[-1].number:
        report, damage = _inspect_once(path)
    return report


def _inspect_once(path: Path) -> tuple[InspectReport, Damage | None]:
    """One read of the directory: the report and the damage the scan stopped at, if any."""
    report = InspectReport(path)
    counts = _SegmentCounts()
    newest = read_newest(path)  # before the scan: a live writer records a segment once made
    scan = scan_log(path, counts.on_frame)
    damage = scan.damage if scan.damage is not None and not scan.damage.free_space else None
    kept = [s.number for s in scan.segments]
    report.segments = [_info(s) for s in scan.segments]
    for number, seg_path in scan.unscanned:
        with contextlib.suppress(FileNotFoundError):  # released during the scan
            size = seg_path.stat().st_size
            report.segments.append(SegmentInfo(number, seg_path.name, size, None))
    by_record = counts.total(counts.by_record, kept)
    report.records = sum(by_record.values())
    report.records_by_type = dict(by_record)
    report.ops_by_type = dict(counts.total(counts.by_op, kept))
    marks = [counts.checkpoints[n] for n in kept if n in counts.checkpoints]
    if marks:
        report.last_checkpoint, report.last_checkpoint_record = marks[-1]
    report.end = scan.end
    undecodable = [p for p in counts.undecodable if p.segment in kept]
    if damage is not None:
        report.problem = problem_of(damage)
    elif undecodable:
        report.problem = undecodable[0]
    else:
        last = kept[-1] if kept else None
        missing = missing_after(newest, last)
        if missing:
            first, name = missing[0], segment_file_name(missing[0])
            reason = f"segments {first} to {missing[-1]} were made and are missing (file 'newest')"
            report.problem = Problem("missing", first, name, 0, 0, reason)
    return report, damage


class _SegmentCounts:
    """What ``inspect`` counts, per segment (so segments released meanwhile drop out)."""

    def __init__(self) -> None:
        self.by_record: dict[int, Counter[str]] = {}
        self.by_op: dict[int, Counter[str]] = {}
        self.checkpoints: dict[int, tuple[Position, Position]] = {}
        self.undecodable: list[Problem] = []

    def on_frame(self, number: int, frame: Frame) -> None:
        self.by_record.setdefault(number, Counter())[_RECORD_NAMES[frame.record_type]] += 1
        if frame.record_type == RECORD_PADDING:
            return
        try:
            ops = decode_batch(frame.payload)
        except JournalDecodeError as exc:
            reason = f"undecodable record: {exc}"
            name = segment_file_name(number)
            self.undecodable.append(Problem("corrupt", number, name, frame.start, 0, reason))
            return
        by_op = self.by_op.setdefault(number, Counter())
        for op in flatten(ops):
            by_op[op_name(op)] += 1
            if isinstance(op, CheckpointMark):
                mark = Position(op.segment, op.offset)
                self.checkpoints[number] = (mark, Position(number, frame.start))

    @staticmethod
    def total(per_segment: dict[int, Counter[str]], numbers: list[int]) -> Counter[str]:
        """The counts of segments ``numbers`` added up."""
        total: Counter[str] = Counter()
        for number in numbers:
            total.update(per_segment.get(number, Counter()))
        return total


def count_frames(view: memoryview, start: int, counts: Counter[str]) -> int:
    """Count (by op type) the valid frames from ``start``, resyncing past damage."""
    records = 0
    pos: int | None = start
    while pos is not None and pos < len(view):
        walker = FrameWalker(view, pos)
        for frame in walker:
            if frame.record_type == RECORD_PADDING:
                continue
            records += 1
            try:
                for op in flatten(decode_batch(frame.payload)):
                    counts[op_name(op)] += 1
            except JournalDecodeError:
                counts["undecodable"] += 1
        if walker.problem is None:
            break
        pos = resync(view, walker.problem[0] + 1)
    return records
