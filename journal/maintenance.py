"""Offline tools: ``inspect`` (read-only) and ``repair`` (truncate at the first damage)."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from journal.errors import JournalDecodeError
from journal.format import (
    FRAME_CRC,
    FRAME_HEAD,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    RECORD_CHECKPOINT,
    Position,
    frame_crc,
    segment_file_name,
)
from journal.reader import Damage, Frame, FrameWalker, SegmentScan, scan_log
from journal.records import CheckpointMark, decode_batch, flatten, op_name
from journal.segments import DirectoryLock, fsync_directory

__all__ = ["InspectReport", "Problem", "RepairPlan", "SegmentInfo", "inspect", "repair"]


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
    """The first damage: ``kind`` is ``"torn-tail"`` (dropped on open) or ``"corrupt"``."""

    kind: str
    segment: int
    file: str
    offset: int
    bytes_after: int
    reason: str


def _jsonable(value: Any) -> Any:
    if isinstance(value, Position):
        return str(value)
    if isinstance(value, Path):
        return str(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
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
        return dict(_jsonable(self))


@dataclass(slots=True)
class RepairPlan:
    """What ``repair`` would cut (or cut, when ``applied``) and what is lost with it."""

    directory: Path
    problem: Problem | None = None
    truncate_file: str | None = None
    truncate_offset: int | None = None
    remove_files: list[str] = field(default_factory=list)
    lost_bytes: int = 0
    lost_records: int = 0
    lost_ops_by_type: dict[str, int] = field(default_factory=dict)
    applied: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return dict(_jsonable(self))

    def describe(self) -> str:
        """Human-readable summary for the command line."""
        if self.problem is None:
            return f"journal {self.directory} is intact; nothing to repair"
        p = self.problem
        verb = "truncated" if self.applied else "would truncate"
        lines = [f"{p.kind} in {p.file} at offset {p.offset}: {p.reason}"]
        if self.truncate_file is not None:
            lines.append(f"{verb} {self.truncate_file} at offset {self.truncate_offset}")
        for name in self.remove_files:
            lines.append(f"{'removed' if self.applied else 'would remove'} {name}")
        types = ", ".join(f"{k}={v}" for k, v in sorted(self.lost_ops_by_type.items()))
        lines.append(
            f"lost: {self.lost_bytes} bytes, {self.lost_records} parseable records after the "
            f"damage" + (f" ({types})" if types else "")
        )
        return "\n".join(lines)


def _problem(damage: Damage) -> Problem:
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
    A live writer's last record may show up as a torn tail.
    """
    path = Path(directory)
    report = InspectReport(path)
    by_record: Counter[str] = Counter()
    by_op: Counter[str] = Counter()
    undecodable: list[Problem] = []

    def on_frame(number: int, frame: Frame) -> None:
        by_record["checkpoint" if frame.record_type == RECORD_CHECKPOINT else "batch"] += 1
        try:
            ops = decode_batch(frame.payload)
        except JournalDecodeError as exc:
            reason = f"undecodable record: {exc}"
            name = segment_file_name(number)
            undecodable.append(Problem("corrupt", number, name, frame.start, 0, reason))
            return
        for op in flatten(ops):
            by_op[op_name(op)] += 1
            if isinstance(op, CheckpointMark):
                report.last_checkpoint = Position(op.segment, op.offset)
                report.last_checkpoint_record = Position(number, frame.start)

    scan = scan_log(path, on_frame)
    report.segments = [_info(s) for s in scan.segments]
    for number, seg_path in scan.unscanned:
        report.segments.append(SegmentInfo(number, seg_path.name, seg_path.stat().st_size, None))
    report.records = sum(by_record.values())
    report.records_by_type = dict(by_record)
    report.ops_by_type = dict(by_op)
    report.end = scan.end
    if scan.damage is not None:
        report.problem = _problem(scan.damage)
    elif undecodable:
        report.problem = undecodable[0]
    return report


_TYPE_BYTE = re.compile(rb"[\x01\x02]")


def _resync(view: memoryview, start: int) -> int | None:
    """Offset of the first valid frame at or after ``start`` (for counting what is lost)."""
    data = bytes(view)
    for match in _TYPE_BYTE.finditer(data, start + FRAME_HEAD.size - 1):
        pos = match.start() - (FRAME_HEAD.size - 1)
        (length,) = FRAME_CRC.unpack_from(data, pos)
        end = pos + FRAME_OVERHEAD + length
        if end > len(data):
            continue
        (stored,) = FRAME_CRC.unpack_from(data, end - FRAME_CRC.size)
        head = view[pos : pos + FRAME_HEAD.size]
        if stored == frame_crc(head, view[pos + FRAME_HEAD.size : end - FRAME_CRC.size]):
            return pos
    return None


def _count_frames(view: memoryview, start: int, counts: Counter[str]) -> int:
    """Count (by op type) the valid frames from ``start``, resyncing past damage."""
    records = 0
    pos: int | None = start
    while pos is not None and pos < len(view):
        walker = FrameWalker(view, pos)
        for frame in walker:
            records += 1
            try:
                for op in flatten(decode_batch(frame.payload)):
                    counts[op_name(op)] += 1
            except JournalDecodeError:
                counts["undecodable"] += 1
        if walker.problem is None:
            break
        pos = _resync(view, walker.problem[0] + 1)
    return records


def repair(directory: str | os.PathLike[str], *, dry_run: bool = True) -> RepairPlan:
    """Find the first damage and cut the journal there (unless ``dry_run``).

    The plan names the segment and offset of the cut, the later segments removed, and how
    many records (by op type) that can still be parsed are lost with them. Takes the
    directory lock, so it refuses to run while a server has the journal open
    (:class:`~journal.errors.JournalLockedError`).
    """
    path = Path(directory)
    plan = RepairPlan(path)
    with DirectoryLock(path):
        undecodable: list[tuple[int, int, str]] = []  # the first: segment, offset, why

        def on_frame(number: int, frame: Frame) -> None:
            if not undecodable:
                try:
                    decode_batch(frame.payload)
                except JournalDecodeError as exc:
                    undecodable.append((number, frame.start, str(exc)))

        scan = scan_log(path, on_frame)
        damage, later = scan.damage, scan.unscanned
        if undecodable:  # a valid checksum over bytes replay cannot read: it stops there too
            number, offset, why = undecodable[0]
            seg = next(s for s in scan.segments if s.number == number)
            reason = f"undecodable record: {why}"
            damage = Damage(number, seg.path, offset, seg.size, reason, torn=False)
            later = [(s.number, s.path) for s in scan.segments if s.number > number]
            later += scan.unscanned
        if damage is None:
            return plan
        plan.problem = _problem(damage)
        lost: Counter[str] = Counter()
        with open(damage.path, "rb") as f:
            view = memoryview(f.read())
        if damage.header:
            plan.remove_files.append(damage.path.name)
            plan.lost_records += _count_frames(view, HEADER_SIZE, lost)
        else:
            plan.truncate_file = damage.path.name
            plan.truncate_offset = damage.offset
            plan.lost_records += _count_frames(view, damage.offset + 1, lost)
        plan.lost_bytes = damage.bytes_after
        for _number, seg_path in later:
            with open(seg_path, "rb") as f:
                view = memoryview(f.read())
            plan.remove_files.append(seg_path.name)
            plan.lost_bytes += len(view)
            plan.lost_records += _count_frames(view, HEADER_SIZE, lost)
        plan.lost_ops_by_type = dict(lost)
        if not dry_run:
            _apply(path, plan)
    return plan


def _apply(directory: Path, plan: RepairPlan) -> None:
    # Newest first, so a crash during repair still leaves a gap-free prefix.
    for name in reversed(plan.remove_files):
        (directory / name).unlink()
    if plan.truncate_file is not None and plan.truncate_offset is not None:
        fd = os.open(directory / plan.truncate_file, os.O_WRONLY)
        try:
            os.ftruncate(fd, plan.truncate_offset)
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_directory(directory)
    plan.applied = True
